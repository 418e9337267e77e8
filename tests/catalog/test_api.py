import datetime as dt

import pytest

from catalog import lifecycle
from catalog.models import ModelVersion

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def today():
    return lifecycle.utc_today()


def slugs(response):
    return [item["slug"] for item in response.json()["data"]]


def test_models_list_has_the_openai_shape_and_lifecycle(client, builtin_catalog):
    r = client.get("/api/v1/models/")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and len(body["data"]) == 12
    spark = next(x for x in body["data"] if x["slug"] == "gpt-5.3-codex-spark")
    assert spark["status"] == "retired"  # today is after 2026-09-18
    assert spark["successor"] == "gpt-5.6-sol"
    assert spark["retires_on"] == spark["shutdown_date"] == "2026-09-18"
    assert spark["id"] == "gpt-5.3-codex-spark" and spark["object"] == "model"
    assert spark["created"] == 1770854400  # 2026-02-12T00:00:00Z


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "status=retired",
            {"gpt-5.2", "gpt-5.3-codex", "gpt-5.3-codex-spark", "gpt-5.4", "gpt-5.4-mini"},
        ),
        ("family=neohorse-1", {"neohorse-1-4b", "neohorse-1-9b"}),
        ("vendor=deepseek", {"deepseek-v4.1-flash"}),
        ("status=active&vendor=OpenAI&family=sol", {"gpt-5.6-sol"}),
    ],
)
def test_models_list_filters(client, builtin_catalog, query, expected):
    assert set(slugs(client.get(f"/api/v1/models/?{query}"))) == expected


def test_retiring_within_days_filter(client, builtin_catalog):
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=ModelVersion.objects.get(slug="gpt-5.6-luna"),
        retires_on=today() + dt.timedelta(days=20),
        successor=None,
        actor="test",
    )
    assert slugs(client.get("/api/v1/models/?retiring_within_days=30")) == ["gpt-5.6-luna"]
    assert slugs(client.get("/api/v1/models/?retiring_within_days=10")) == []


def test_models_list_is_cursor_paginated(client, builtin_catalog):
    first = client.get("/api/v1/models/?limit=5").json()
    assert len(first["data"]) == 5 and first["has_more"] and first["next"]
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()
    seen = [x["slug"] for page in (first, second, third) for x in page["data"]]
    assert len(seen) == 12 and len(set(seen)) == 12 and not third["has_more"]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("status=sunsetting", "status"),
        ("retiring_within_days=soon", "retiring_within_days"),
        ("retiring_within_days=-3", "retiring_within_days"),
    ],
)
def test_bad_filters_are_a_400_problem(client, builtin_catalog, query, parameter):
    r = client.get(f"/api/v1/models/?{query}")
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["parameter"] == parameter and body["status"] == 400 and body["detail"]


def test_model_detail_has_tiers_prices_benchmarks_and_resolved_successor(client, builtin_catalog):
    r = client.get("/api/v1/models/gpt-5.3-codex/")
    assert r.status_code == 200
    body = r.json()
    assert body["resolved_successor"] == {
        "model": "gpt-5.6-sol",
        "tier": "standard",
        "chain": ["gpt-5.3-codex", "gpt-5.4", "gpt-5.6-sol"],
    }
    assert [t["tier"] for t in body["tiers"]] == ["flex", "standard", "priority"]
    assert body["tiers"][1]["price"]["output_per_million"] == 14.0
    assert body["tiers"][1]["price"]["is_estimate"] is True
    assert {(b["name"], b["duration_minutes"]) for b in body["benchmarks"]} >= {
        ("SWE-Bench Pro", 9.0)
    }
    assert body["context_window"] == 400000 and body["architecture"]["layers"] == 80


def test_sol_detail_lists_its_four_tiers_and_no_deprecation_headers(client, builtin_catalog):
    r = client.get("/api/v1/models/gpt-5.6-sol/")
    assert [t["tier"] for t in r.json()["tiers"]] == ["flex", "standard", "priority", "ultrafast"]
    assert r.json()["tiers"][3]["device"] == "wse-3"
    assert "Deprecation" not in r and "Sunset" not in r


def test_a_deprecated_model_carries_deprecation_sunset_and_successor_link(client, builtin_catalog):
    retires = today() + dt.timedelta(days=40)
    announced = today() - dt.timedelta(days=2)
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=ModelVersion.objects.get(slug="gpt-5.6-luna"),
        retires_on=retires,
        announced_on=announced,
        successor=ModelVersion.objects.get(slug="gpt-5.6-terra"),
        actor="test",
    )
    r = client.get("/api/v1/models/gpt-5.6-luna/")
    assert r.json()["status"] == "deprecated"
    start = dt.datetime.combine(announced, dt.time.min, tzinfo=dt.UTC)
    assert r["Deprecation"] == f"@{int(start.timestamp())}"
    assert r["Sunset"] == retires.strftime("%a, %d %b %Y 00:00:00 GMT")
    assert r["Link"] == '<http://testserver/api/v1/models/gpt-5.6-terra/>; rel="successor-version"'


def test_a_retired_model_still_reads_with_its_sunset(client, builtin_catalog):
    r = client.get("/api/v1/models/gpt-5.3-codex-spark/")
    assert r.status_code == 200
    assert r["Sunset"] == "Fri, 18 Sep 2026 00:00:00 GMT"
    assert "gpt-5.6-sol" in r["Link"]


def test_unknown_model_is_a_404_problem_with_a_clear_detail(client, builtin_catalog):
    r = client.get("/api/v1/models/gpt-7/")
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["title"] == "Unknown model"
    assert "No model 'gpt-7'" in body["detail"] and "gpt-5.6-sol" in body["detail"]
    assert body["instance"] == "/api/v1/models/gpt-7/"
    assert body["type"].endswith("/problems/model-not-found")


def test_unknown_api_path_and_wrong_method_are_problems(client, builtin_catalog):
    r = client.get("/api/v1/no-such-thing")
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM
    r = client.post("/api/v1/models/", data="{", content_type="application/json")
    assert r.status_code == 405 and r["Content-Type"] == PROBLEM


def test_tiers_list(client, builtin_catalog):
    body = client.get("/api/v1/tiers/").json()
    assert [(t["id"], t["price_multiplier"]) for t in body["data"]] == [
        ("flex", 0.5),
        ("standard", 1.0),
        ("priority", 2.0),
        ("ultrafast", 6.0),
    ]


def test_health_reports_database_and_broker(client, db):
    r = client.get("/api/v1/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_health_is_503_when_the_broker_is_unreachable(client, db, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    r = client.get("/api/v1/health")
    assert r.status_code == 503
    assert r.json()["broker"].startswith("unreachable")
    assert r.json()["database"] == "ok"


def test_openapi_schema_and_docs_are_served(client, db):
    r = client.get("/api/v1/schema/")
    assert r.status_code == 200 and b"/api/v1/models/" in r.content
    assert client.get("/api/docs/").status_code == 200


def test_status_is_evaluated_at_request_time(client, builtin_catalog):
    # A retirement scheduled for today is already in force.
    lifecycle.model_retire_now(
        model=ModelVersion.objects.get(slug="neohorse-1-9b"), actor="t", notice_override="test"
    )
    assert client.get("/api/v1/models/neohorse-1-9b/").json()["status"] == "retired"

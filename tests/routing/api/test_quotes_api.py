"""POST /api/v1/quotes and GET /api/v1/quota as a client sees them."""

import datetime as dt
from decimal import Decimal

import pytest

from catalog import lifecycle
from catalog.models import HardwarePool, ModelVersion
from routing.accounts.accounts import account_create
from routing.models import PoolLoad, QuotaPackage, QuotaReservation
from routing.quota import package_create
from tests.helpers import GDPVAL, ApiClient

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def quote(api, **fields):
    return api.post_json("/api/v1/quotes", GDPVAL | fields)


@pytest.mark.parametrize(
    ("deadline", "tier"),
    [(3600, "flex"), (600, "standard"), (400, "priority"), (120, "ultrafast")],
)
def test_the_flagship_quoted_for_a_gdpval_task(api, deadline, tier):
    r = quote(api, deadline_seconds=deadline)
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["tier"] == body["service_tier"] == tier
    assert body["model"] == "sol" and body["served_model"] == "gpt-5.6-sol"
    assert body["predicted"]["total_seconds"] <= deadline
    assert body["package"]["name"] == "Main (monthly)"
    assert len(body["candidates"]) == 4
    assert sum(c["chosen"] for c in body["candidates"]) == 1


def test_a_quote_reserves_nothing(api, account):
    quote(api, deadline_seconds=600)
    pkg = account.packages.get()
    assert pkg.reserved == 0 and pkg.spent == 0
    assert not QuotaReservation.objects.exists()


def test_priority_costs_about_twice_standard(api):
    std = quote(api, deadline_seconds=3600, tier="standard").json()
    pri = quote(api, deadline_seconds=3600, tier="fast").json()  # OpenAI's alias
    assert pri["tier"] == "priority"
    assert Decimal(pri["cost"]) == 2 * Decimal(std["cost"])


def test_an_impossible_deadline_is_422_with_the_fastest_option(api):
    r = quote(api, deadline_seconds=60)
    assert r.status_code == 422 and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["type"].endswith("/problems/deadline-infeasible")
    assert body["fastest"]["tier"] == "ultrafast"
    # 93 s: the P90 promised (its typical run is 82 s; simengine.spread adds the spread).
    assert body["detail"].startswith("Fastest option: ultrafast, 93 s predicted; deadline 60 s.")


def test_a_retired_model_is_410_with_its_successor(api):
    r = quote(
        api,
        model="gpt-5.3-codex-spark",
        input_tokens=2000,
        output_tokens=1000,
        turns=1,
        deadline_seconds=600,
    )
    assert r.status_code == 410 and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["successor"] == "gpt-5.6-sol" and body["successor_tier"] == "ultrafast"
    assert 'rel="successor-version"' in r["Link"]


def test_an_account_opted_in_to_migration_is_quoted_on_the_successor(builtin_catalog):
    _, key = account_create(name="migrator", auto_migrate=True)
    r = quote(
        ApiClient(key),
        model="gpt-5.3-codex",
        input_tokens=2000,
        output_tokens=1000,
        turns=1,
        deadline_seconds=600,
    )
    assert r.status_code == 200
    body = r.json()
    assert body["served_model"] == "gpt-5.6-sol" and body["migrated_from"] == "gpt-5.3-codex"


def test_a_deprecated_model_is_served_with_deprecation_headers(api):
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=luna,
        retires_on=lifecycle.utc_today() + dt.timedelta(days=60),
        successor=ModelVersion.objects.get(slug="gpt-5.6-terra"),
        actor="t",
    )
    r = quote(api, model="gpt-5.6-luna", deadline_seconds=3600)
    assert r.status_code == 200
    assert r["Deprecation"].startswith("@") and r["Sunset"].endswith("GMT")
    assert "gpt-5.6-terra" in r["Link"]
    assert r.json()["lifecycle"]["status"] == "deprecated"


def test_no_package_can_pay_is_429_with_the_next_reset(api, account):
    QuotaPackage.objects.filter(account=account).update(spent=Decimal("99.99"))
    r = quote(api, deadline_seconds=3600)
    assert r.status_code == 429 and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["next_reset"].startswith(account.packages.get().next_reset_at.strftime("%Y-%m-%d"))
    assert int(r["Retry-After"]) > 0


def test_a_full_pool_pushes_the_quote_to_a_faster_tier(api):
    assert quote(api, deadline_seconds=600).json()["tier"] == "standard"
    PoolLoad.objects.create(
        pool=HardwarePool.objects.get(slug="h200-main"), background_utilisation=1
    )
    body = quote(api, deadline_seconds=600).json()
    assert body["tier"] == "ultrafast"
    standard = next(c for c in body["candidates"] if c["tier"] == "standard")
    assert "saturated" in standard["reason"]


def test_a_spare_tank_pays_only_when_main_quota_cannot(api, account):
    sol = ModelVersion.objects.get(slug="gpt-5.6-sol")
    package_create(
        account=account,
        name="Spare tank",
        limit="50",
        independent=True,
        order=1,
        scope=QuotaPackage.Scope.MODELS,
        model_versions=[sol],
    )
    assert quote(api, deadline_seconds=3600).json()["package"]["name"] == "Main (monthly)"
    QuotaPackage.objects.filter(account=account, independent=False).update(spent=Decimal(100))
    body = quote(api, deadline_seconds=3600).json()
    assert body["package"] == {
        "id": body["package"]["id"],
        "name": "Spare tank",
        "independent": True,
    }


def test_model_auto_with_a_task_class(api):
    # The serving models carry (estimated) SWE-Bench Pro rows: auto works on a fresh
    # catalog (issue 26), choosing one of them.
    r = quote(api, model="auto", task="swe-bench-pro", deadline_seconds=3600)
    assert r.status_code == 200, r.content
    assert r.json()["served_model"] in {
        "gpt-5.6-luna",
        "gpt-5.6-terra",
        "gpt-5.6-sol",
        "gpt-6-astra",
    }
    r = quote(api, model="auto", deadline_seconds=3600)
    assert r.status_code == 400 and "needs a `task`" in r.json()["detail"]


@pytest.mark.parametrize(
    ("payload", "status", "field"),
    [
        ({"model": "gpt-9", "deadline_seconds": 60}, 404, None),
        ({"deadline_seconds": 0}, 400, "deadline_seconds"),
        ({"deadline_seconds": -5}, 400, "deadline_seconds"),
        ({"deadline_seconds": 600, "input_tokens": -1}, 400, "input_tokens"),
        ({"deadline_seconds": 600, "output_tokens": "lots"}, 400, "output_tokens"),
        ({"deadline_seconds": 600, "turns": 0}, 400, "turns"),
        ({"deadline_seconds": 600, "output_tokens": 10, "turns": 30}, 400, "output_tokens"),
        ({"deadline_seconds": 600, "tier": "scale"}, 400, "tier"),
        ({"deadline_seconds": 600, "max_cost": -1}, 400, "max_cost"),
        ({"deadline_seconds": 600, "input_tokens": 399_000}, 422, None),
    ],
)
def test_bad_input_is_a_clear_4xx_problem(api, payload, status, field):
    r = quote(api, **payload)
    assert r.status_code == status and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["status"] == status and body["detail"]
    if field:
        assert field in {e["field"] for e in body["errors"]}


def test_missing_fields_and_malformed_json(api):
    r = api.post_json("/api/v1/quotes", {"model": "sol"})
    assert r.status_code == 400
    fields = {e["field"] for e in r.json()["errors"]}
    assert {"input_tokens", "output_tokens", "deadline_seconds"} <= fields
    r = api.post_json("/api/v1/quotes", '{"model": "sol",')
    assert r.status_code == 400 and r.json()["title"] == "Malformed request"
    r = api.post("/api/v1/quotes", "model=sol", content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415


def test_quota_shows_each_package_of_the_caller_only(api, account, builtin_catalog):
    other, _ = account_create(name="other-co")
    package_create(account=account, name="Spare", limit="20", independent=True, period="once")
    r = api.get("/api/v1/quota")
    assert r.status_code == 200
    data = r.json()["data"]
    assert [p["name"] for p in data] == ["Main (monthly)", "Spare"]
    main = data[0]
    for key in (
        "limit",
        "spent",
        "reserved",
        "remaining",
        "next_reset_at",
        "scope",
        "order",
        "independent",
    ):
        assert key in main
    assert main["remaining"] == "100.000000" and data[1]["independent"] is True
    assert data[1]["next_reset_at"] is None
    assert other.packages.exists() and len(data) == 2


def test_the_schema_documents_quotes_and_quota(client, db):
    body = client.get("/api/v1/schema/").content.decode()
    assert "/api/v1/quotes" in body and "/api/v1/quota" in body


def test_the_quote_matches_its_documented_schema(api):
    """The quote path builds plain dicts for speed: they must keep the documented shape."""
    from routing.api.serializers import CandidateSerializer, QuoteSerializer

    body = quote(api, deadline_seconds=600).json()
    assert set(body) == set(QuoteSerializer().fields)
    for cand in body["candidates"]:
        assert set(cand) == set(CandidateSerializer().fields)
    problem = quote(api, deadline_seconds=60).json()
    assert set(problem["candidates"][0]) == set(CandidateSerializer().fields)


def _floats(value, where: str = "") -> list[tuple[str, float]]:
    """Every float in a JSON answer, with where it is."""
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _floats(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _floats(v, f"{where}[{i}]")]
    return [(where, value)] if isinstance(value, float) else []


def _unrounded(floats) -> list[tuple[str, float]]:
    return [(w, x) for w, x in floats if x != float(f"{x:.6g}")]


def test_quotes_and_jobs_send_rounded_numbers_and_no_negative_time(api, account):
    """Timings are computed in floats; the answer sends them to 6 significant digits
    (never `1.2000000000000002`) and no time below 0 (issue 26)."""
    from routing.models import Job

    body = quote(api, deadline_seconds=600).json()
    floats = _floats(body)
    assert len([w for w, _ in floats if ".predicted." in w]) > 10, floats
    assert not _unrounded(floats)
    assert not [(w, x) for w, x in floats if w.endswith("_seconds") and x < 0]

    r = api.post_json(
        "/api/v1/jobs",
        {"model": "sol", "input_tokens": 100, "output_tokens": 10, "deadline_seconds": 600},
    )
    assert r.status_code in (200, 202), r.content
    job = Job.objects.get(pk=r.json()["id"])
    # a simulated run as the worker stores it: raw floats, a wait a hair below 0
    job.simulated = {
        "queue_seconds": -1.1102230246251565e-16,
        "ttft_seconds": 0.6135989149957891,
        "generation_seconds": 0.5676509191524106,
        "transport_seconds": 0.04000000000000001,
        "tool_seconds": 0.0,
        "run_seconds": 0.6076509191524107,
        "total_seconds": 1.2000000000000002,
        "tokens_per_second": 19.125933854063565,
    }
    job.save(update_fields=["simulated"])
    for answer in (api.get(f"/api/v1/jobs/{job.pk}").json(), api.get("/api/v1/jobs").json()):
        floats = _floats(answer)
        assert not _unrounded(floats), _unrounded(floats)
        assert not [(w, x) for w, x in floats if w.endswith("_seconds") and x < 0]
    sim = api.get(f"/api/v1/jobs/{job.pk}").json()["simulated"]
    assert (sim["queue_seconds"], sim["total_seconds"], sim["transport_seconds"]) == (
        0.0,
        1.2,
        0.04,
    )


def test_a_task_larger_than_any_window_is_a_400_not_a_500(api):
    r = quote(api, input_tokens=9_000_000, output_tokens=9_000_000, deadline_seconds=600)
    assert r.status_code == 400 and "at most 10000000" in r.json()["detail"]


def test_auto_without_a_model_for_the_task_says_so(api):
    r = quote(api, model="auto", task="gdp-val", deadline_seconds=600)
    assert r.status_code == 422 and r.json()["type"].endswith("/no-model-for-task")


def test_an_unreadable_cursor_is_a_400(api, client):
    r = api.get("/api/v1/jobs?cursor=garbage")
    assert r.status_code == 400 and r.json()["parameter"] == "cursor"
    assert client.get("/api/v1/models/?cursor=garbage").status_code == 400

"""Issue 26: the headers SDKs read, and what a newcomer and an admin tripped over (in
process; the admin pages in a browser: tests/test_browser_admin_pages.py)."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from catalog.admin import status_sentence
from catalog.models import ModelVersion
from routing.api import throttling
from tests.routing.api.test_throttling import Clock

pytestmark = pytest.mark.django_db
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


def test_every_response_has_a_request_id_and_processing_time(client, api):
    for r in (
        client.get("/v1/models"),
        client.get("/v1/nope"),
        client.get("/api/v1/models/"),
        api.post_json("/v1/chat/completions", {"model": "sol", "messages": MESSAGES}),
    ):
        assert r["x-request-id"].startswith("req_") and len(r["x-request-id"]) == 36
        assert int(r["openai-processing-ms"]) >= 0
    a, b = client.get("/v1/models"), client.get("/v1/models")
    assert a["x-request-id"] != b["x-request-id"]
    # A proxy's own id carries through; a strange one is replaced.
    assert client.get("/v1/models", HTTP_X_REQUEST_ID="edge-42")["x-request-id"] == "edge-42"
    assert client.get("/v1/models", HTTP_X_REQUEST_ID="a b")["x-request-id"].startswith("req_")


def test_the_request_id_is_in_the_log_lines(client, caplog):
    import logging

    from httpedge.requestid import RequestIdFilter

    handler = logging.getLogger("django.request")
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.WARNING, logger=handler.name):
        r = client.get("/v1/models/nope")
    assert r.status_code == 404
    assert any(rec.request_id == r["x-request-id"] for rec in caplog.records)


@pytest.fixture
def rates(settings, monkeypatch):
    monkeypatch.setattr(throttling, "now", Clock(1_000_000.5))
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "t26"}
    }
    cache.clear()
    settings.API_THROTTLE_RATES = {"account": "10/min", "write": "4/min", "anon": "10/min"}
    yield
    cache.clear()


def test_ratelimit_headers_show_the_limit_that_binds_the_request(api, rates):
    body = {"model": "sol", "messages": MESSAGES, "max_tokens": 2}
    seen = []
    for _ in range(4):
        r = api.post_json("/v1/chat/completions", body)
        assert r.status_code == 200, r.content
        seen.append((r["x-ratelimit-limit-requests"], r["x-ratelimit-remaining-requests"]))
    # The writes' 4/min binds first: a client pacing by the headers sees 0 left ...
    assert seen == [("4", "3"), ("4", "2"), ("4", "1"), ("4", "0")]
    r = api.post_json("/v1/chat/completions", body)
    assert r.status_code == 429  # ... and is refused only then
    # A read shows the request limit: 6 of 10 counted (4 writes, the refused one, which
    # the request limit had counted before the write limit refused it, and this read).
    r = api.get("/v1/files")
    assert (r["x-ratelimit-limit-requests"], r["x-ratelimit-remaining-requests"]) == ("10", "4")


def test_models_retrieve_accepts_the_aliases_chat_accepts(client, builtin_catalog):
    r = client.get("/v1/models/sol")
    assert r.status_code == 200 and r.json()["id"] == "gpt-5.6-sol"
    assert client.get("/v1/models/gpt-5.6-sol").json()["id"] == "gpt-5.6-sol"
    assert client.get("/v1/models/nope").status_code == 404
    assert client.delete("/v1/models/sol").status_code == 405


def test_auto_with_a_task_works_on_a_fresh_catalog(api):
    r = api.post_json(
        "/v1/chat/completions",
        {"model": "auto", "task": "swe-bench-pro", "messages": MESSAGES, "max_tokens": 5},
    )
    assert r.status_code == 200, r.content
    served = ModelVersion.objects.get(slug=r.json()["model"])
    assert served.benchmarks.filter(source__startswith="estimate").exists()


def test_the_model_pages_name_the_final_successor(builtin_catalog):
    gpt52 = ModelVersion.objects.get(slug="gpt-5.2")
    sentence = status_sentence(gpt52)
    assert "successor gpt-5.6-sol" in sentence and "(via gpt-5.4)" in sentence
    assert sentence.startswith("since ")  # after the "retired" badge: no "retired retired"


def test_the_admin_says_what_it_administers_and_lists_its_own_apps_first(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "Model lifecycle &amp; routing" in page and "Django administration" not in page
    assert page.index(">Model catalog<") < page.index(">Authentication and Authorization<")
    assert page.index(">Routing, accounts and quota<") < page.index(">Axes<")


def test_the_api_docs_say_where_v1_and_keys_are(client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    text = schema["info"]["description"]
    assert "/v1/" in text and "create_account" in text and "Bearer" in text


def test_problem_pages_render_code_not_backticks(client):
    page = client.get("/problems/invalid-request").content.decode()
    assert "<code>errors</code>" in page and "`" not in page.split("<body>")[1]


def test_a_stream_keeps_the_deadline_headers(api):  # (the /v1 headers live together)
    r = api.post_json(
        "/v1/chat/completions", {"model": "sol", "messages": MESSAGES, "max_tokens": 2}
    )
    assert r["X-Job-Id"] and r["x-request-id"]

"""Issue 13: the database or the broker away answers 503 problem+json with Retry-After
(never a 500), in the DRF views and in plain Django views under /api/; a finished job's
synthetic output is generated once, not on every GET."""

from __future__ import annotations

import datetime as dt

import django.db
import pytest
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import path
from kombu.exceptions import OperationalError as BrokerOperationalError

from deploy import urls as deploy_urls
from routing.api import jobs as jobs_view
from routing.api import quota as quota_view
from routing.jobs import output as jobs_output
from routing.jobs import worker as jobs_worker
from tests.helpers import job_submit as submit

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def _broken_filter(exc):
    def filter(*args, **kwargs):  # noqa: A001, ARG001
        raise exc

    return filter


def assert_unavailable(r):
    assert r.status_code == 503, r.content
    assert r["Content-Type"] == PROBLEM
    assert r["Retry-After"] == "5"
    body = r.json()
    assert body["status"] == 503 and body["type"].endswith("/problems/service-unavailable")
    assert body["title"] == "Service unavailable"
    assert "password" not in r.content.decode()  # nothing of the error's text leaks


@pytest.mark.parametrize(
    "exc",
    [
        django.db.OperationalError("could not connect to server: password=secret"),
        django.db.InterfaceError("connection already closed"),
        BrokerOperationalError("[Errno 111] Connection refused"),
        ConnectionRefusedError(111, "Connection refused"),
    ],
    ids=["db-operational", "db-interface", "broker", "socket"],
)
def test_a_drf_view_answers_503_when_the_database_or_broker_is_away(api, monkeypatch, exc):
    monkeypatch.setattr(quota_view.QuotaPackage.objects, "filter", _broken_filter(exc))
    assert_unavailable(api.get("/api/v1/quota"))


def test_a_job_detail_answers_503_when_the_database_is_away(api, monkeypatch):
    job_id = submit(api).json()["id"]

    def own_job(*args, **kwargs):  # noqa: ARG001
        raise django.db.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(jobs_view, "own_job", own_job)
    assert_unavailable(api.get(f"/api/v1/jobs/{job_id}"))


def _plain_view(request):  # noqa: ARG001
    raise django.db.OperationalError("could not connect to server")


def _plain_ok(request):  # noqa: ARG001
    return HttpResponse("ok")


class _Urls:
    urlpatterns = [
        path("api/v1/plain-broken", _plain_view),
        path("elsewhere/broken", _plain_view),
        *deploy_urls.urlpatterns,
    ]
    handler500 = deploy_urls.handler500


@override_settings(ROOT_URLCONF=_Urls)
@pytest.mark.parametrize("debug", [False, True])
def test_a_plain_django_view_under_api_answers_503(settings, debug):
    settings.DEBUG = debug  # even with DEBUG on: no HTML debug page for the API
    client = Client(raise_request_exception=False)
    assert_unavailable(client.get("/api/v1/plain-broken"))


@override_settings(ROOT_URLCONF=_Urls)
def test_outside_the_api_the_500_handler_still_answers_503():
    client = Client(raise_request_exception=False)
    assert_unavailable(client.get("/elsewhere/broken"))


def test_a_real_bug_is_still_a_500(api, monkeypatch):
    monkeypatch.setattr(quota_view.QuotaPackage.objects, "filter", _broken_filter(KeyError("x")))
    client = api
    client.raise_request_exception = False
    r = client.get("/api/v1/quota")
    assert r.status_code == 500 and r["Content-Type"] == PROBLEM
    assert not r.has_header("Retry-After")


def test_a_finished_jobs_output_is_generated_once(api, monkeypatch):
    calls = []
    real = jobs_output.synthetic_text

    def spy(seed, words):
        calls.append((seed, words))
        return real(seed, words)

    monkeypatch.setattr(jobs_output, "synthetic_text", spy)
    job_id = submit(api, output_tokens=300).json()["id"]
    job = jobs_worker.job_run(job_id)
    jobs_worker.job_finish(job_id, at=job.finishes_at + dt.timedelta(seconds=1))
    first = api.get(f"/api/v1/jobs/{job_id}?output=full").json()
    second = api.get(f"/api/v1/jobs/{job_id}?output=full").json()
    assert len(calls) == 1
    assert first == second
    assert first["output"]["text"] == real(calls[0][0], 300)  # the same text as before
    assert len(first["output"]["text"].split()) == 300


def test_the_output_cache_is_bounded_by_characters(monkeypatch):
    jobs_output.clear_cache()
    monkeypatch.setattr(jobs_output, "CACHE_MAX_CHARS", 10_000)
    texts = [jobs_output.cached_text(seed, 1000) for seed in range(20)]
    assert all(len(t.split()) == 1000 for t in texts)
    assert 0 < jobs_output.cache_chars() <= 10_000
    # too large for the budget: answered, not kept
    big = jobs_output.cached_text("big", 5000)
    assert len(big.split()) == 5000 and jobs_output.cache_chars() <= 10_000

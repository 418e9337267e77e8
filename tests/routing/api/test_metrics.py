"""GET /metrics (issue 17): who may scrape, and the figures move when work is done.

State gauges come from the database (exact per test). Event metrics are summed over
every process on the machine (other pytest-xdist workers too), so a test reads its own
process's value from the metric object for exact deltas, and checks the scrape shows at
least as much."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from django.core.cache import cache
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from routing.core import metrics
from routing.jobs import worker as jobs_worker
from routing.models import Job
from tests.helpers import batch_make, batch_run, job_submit, jsonl

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def scrape(client, **extra) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of one scrape."""
    r = client.get("/metrics", **extra)
    assert r.status_code == 200, r.content
    assert r["Content-Type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.content.decode())
        for s in family.samples
    }


def own(metric, sample: str, **labels) -> float:
    """This process's value of one sample of an event metric."""
    for family in metric.collect():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def value(figures, name: str, **labels) -> float:
    return figures.get((name, tuple(sorted(labels.items()))), 0.0)


def jobs(figures, state: str) -> float:
    return sum(
        v for (n, lab), v in figures.items() if n == "routing_jobs" and dict(lab)["state"] == state
    )


def test_a_job_moves_the_figures(api, client, django_capture_on_commit_callbacks):
    before = scrape(client)
    assert jobs(before, "queued") == jobs(before, "succeeded") == 0

    r = job_submit(api, tier="standard", deadline_seconds=86400)
    assert r.status_code == 202, r.content
    queued = scrape(client)
    assert jobs(queued, "queued") == 1
    assert value(queued, "routing_quota_reserved_credits") > 0

    job = jobs_worker.job_run(r.json()["id"])
    running = scrape(client)
    assert jobs(running, "running") == 1
    pool = job.pool.slug
    assert value(running, "routing_pool_utilisation", pool=pool, source="own") > 0

    count = "routing_job_completion_seconds_count"
    waits_before = own(
        metrics.JOB_QUEUE_WAIT, "routing_job_queue_wait_seconds_count", tier="standard"
    )
    done_before = own(metrics.JOB_COMPLETION, count, tier="standard")
    with django_capture_on_commit_callbacks(execute=True):
        jobs_worker.job_finish(job.pk, at=job.finishes_at + dt.timedelta(seconds=1))
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED
    assert own(metrics.JOB_COMPLETION, count, tier="standard") == done_before + 1
    assert (
        own(metrics.JOB_QUEUE_WAIT, "routing_job_queue_wait_seconds_count", tier="standard")
        == waits_before + 1
    )
    total = job.simulated["total_seconds"]
    assert (
        own(metrics.JOB_COMPLETION, "routing_job_completion_seconds_sum", tier="standard") >= total
    )

    after = scrape(client)
    assert jobs(after, "succeeded") == 1 and jobs(after, "running") == 0
    model = job.model.slug
    assert value(after, "routing_jobs", state="succeeded", tier="standard", model=model) == 1
    assert value(after, "routing_quota_reserved_credits") == 0
    assert value(after, "routing_quota_spent_credits") == float(job.cost) > 0
    assert value(after, count, tier="standard") >= done_before + 1
    assert value(after, "routing_pool_utilisation", pool=pool, source="own") == 0


def test_attainment_and_lateness_are_served(api, client, django_capture_on_commit_callbacks):
    # One job that met its deadline and one that missed it (its claim came late: the
    # slot wait counts from its submission), then one scrape.
    met = jobs_worker.job_run(job_submit(api, tier="standard", deadline_seconds=86400).json()["id"])
    missed_id = job_submit(api, tier="standard", deadline_seconds=600).json()["id"]
    submitted = Job.objects.get(pk=missed_id).created_at
    missed = jobs_worker.job_run(missed_id, at=submitted + dt.timedelta(seconds=900))
    counts = {
        o: own(metrics.JOB_DEADLINE, "routing_job_deadline_total", tier="standard", outcome=o)
        for o in ("met", "missed")
    }
    late_before = own(metrics.JOB_LATENESS, "routing_job_lateness_seconds_count", tier="standard")
    with django_capture_on_commit_callbacks(execute=True):
        for job in (met, missed):
            jobs_worker.job_finish(job.pk, at=job.finishes_at + dt.timedelta(seconds=1))
    missed.refresh_from_db()
    assert missed.deadline_met is False and missed.late_by_seconds > 300
    assert (
        own(metrics.JOB_DEADLINE, "routing_job_deadline_total", tier="standard", outcome="met")
        == counts["met"] + 1
    )
    assert (
        own(metrics.JOB_DEADLINE, "routing_job_deadline_total", tier="standard", outcome="missed")
        == counts["missed"] + 1
    )
    assert (
        own(metrics.JOB_LATENESS, "routing_job_lateness_seconds_count", tier="standard")
        == late_before + 1
    )
    # The sliding window is read at scrape time: the jobs finished in the future of
    # this clock (simulated ends), so read the window where they are.
    from routing.jobs.attainment import attainment

    rows = attainment(at=missed.finished_at + dt.timedelta(seconds=1))
    row = next(r for r in rows if r.tier == "standard")
    assert (row.finished, row.met) == (2, 1) and row.share_met == 0.5
    figures = scrape(client)
    names = {n for n, _ in figures}
    assert {"routing_job_deadline_total", "routing_job_lateness_seconds_count"} <= names


def test_batches_and_their_lines_are_counted(account, client):
    at = timezone.now()
    batch = batch_make(account, jsonl(3), at=at)
    figures = scrape(client)
    assert (
        value(figures, "routing_batches", status="in_progress")
        + value(figures, "routing_batches", status="validating")
        == 1
    )
    assert value(figures, "routing_batch_requests", state="total") == 3
    assert value(figures, "routing_batch_requests", state="completed") == 0
    batch_run(batch, at)
    figures = scrape(client)
    assert value(figures, "routing_batches", status="completed") == 1
    assert value(figures, "routing_batch_requests", state="completed") == 3


def test_rate_limit_refusals_are_counted(api, client, settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "metrics-tests",
        }
    }
    cache.clear()
    settings.API_THROTTLE_RATES = {"account": "1/min", "write": None, "anon": None}
    sample = "routing_rate_limited_total"
    before = own(metrics.RATE_LIMITED, sample, scope="account")
    assert api.get("/api/v1/jobs").status_code == 200
    assert own(metrics.RATE_LIMITED, sample, scope="account") == before  # not refused
    statuses = [api.get("/api/v1/jobs").status_code for _ in range(2)]
    assert statuses == [429, 429]
    assert own(metrics.RATE_LIMITED, sample, scope="account") == before + 2
    assert value(scrape(client), sample, scope="account") >= before + 2
    cache.clear()


def test_without_a_token_only_loopback_may_scrape(client):
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    r = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert r.status_code == 403 and r["Content-Type"] == PROBLEM
    assert "METRICS_TOKEN" in r.json()["detail"]


def test_loopback_behind_a_proxy_is_the_forwarded_client(client, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    r = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert r.status_code == 403


def test_with_a_token_every_scrape_must_send_it(client, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    r = client.get("/metrics")  # loopback is not enough any more
    assert r.status_code == 401 and r["Content-Type"] == PROBLEM
    assert r["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token", REMOTE_ADDR="203.0.113.9")


def test_only_get_and_head(client):
    r = client.post("/metrics")
    assert r.status_code == 405 and r["Content-Type"] == PROBLEM
    assert r["Allow"] == "GET, HEAD"
    assert client.head("/metrics").status_code == 200


def test_the_grafana_dashboard_uses_only_figures_the_service_serves(client):
    dashboard = (
        Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "routing-dashboard.json"
    )
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(bucket|count|sum|total)$", "", n)
        for e in exprs
        for n in re.findall(r"routing_\w+", e)
    }
    served = {
        f.name for f in text_string_to_metric_families(client.get("/metrics").content.decode())
    }
    served |= {
        m._name.removesuffix("_total")
        for m in (
            metrics.RATE_LIMITED,
            metrics.JOB_QUEUE_WAIT,
            metrics.JOB_COMPLETION,
            metrics.JOB_DEADLINE,
            metrics.JOB_LATENESS,
        )
    } | {metrics.TASK_QUEUE_WAIT._name, metrics.TASK_RUNTIME._name}
    assert used and used <= served, used - served

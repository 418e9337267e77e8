"""/metrics with real parts (issue 17): three workers on the split queues (interactive,
batch, housekeeping), beat, gunicorn, PostgreSQL and Redis; a scrape of the web process
after doing work shows the jobs, the quota, and the Celery task latency by queue that the
worker processes observed (one metrics folder per machine)."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.realparts


def samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(figures, name: str, **labels) -> float:
    return sum(
        v
        for (n, lab), v in figures.items()
        if n == name and all(dict(lab).get(k) == w for k, w in labels.items())
    )


def test_a_scrape_after_work_on_split_queues_shows_it(stack):
    for queue in ("interactive", "batch", "housekeeping"):
        stack.start_worker(concurrency=1, queues=queue)
    stack.start_beat()
    before = samples(stack.metrics())
    assert total(before, "routing_jobs") == 0
    ids = [stack.submit()["id"] for _ in range(3)]
    stack.wait_status(ids)
    figures = samples(stack.metrics())
    assert total(figures, "routing_jobs", state="succeeded", tier="standard") == 3
    assert total(figures, "routing_quota_spent_credits") > 0
    assert total(figures, "routing_job_completion_seconds_count", tier="standard") == 3
    assert total(figures, "routing_job_queue_wait_seconds_count", tier="standard") == 3
    # Celery latency, observed by the interactive worker; the sweeps by housekeeping's.
    wait = "routing_celery_task_queue_wait_seconds_count"
    assert total(figures, wait, queue="interactive", task="routing.run_job") == 3
    assert total(figures, wait, queue="interactive", task="routing.finish_job") >= 3
    assert total(figures, "routing_celery_task_runtime_seconds_count", queue="interactive") >= 6
    # beat's sweeps (every second here) on the housekeeping worker
    deadline = time.monotonic() + 30
    while total(figures, wait, queue="housekeeping", task="routing.sweep_jobs") < 1:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.5)
        figures = samples(stack.metrics())
    assert total(figures, wait, queue="batch") == 0
    assert stack.ledger()["ok"]

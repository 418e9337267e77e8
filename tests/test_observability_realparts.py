"""Observability with real parts (issue 30): the request id of `POST /api/v1/jobs`
follows the job into the Celery worker's log lines for its run and finish (gunicorn,
a prefork worker, beat, PostgreSQL and Redis)."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.stack import SMALL

pytestmark = pytest.mark.realparts


def test_the_request_id_follows_a_job_into_the_worker_log(stack):
    worker = stack.start_worker(concurrency=1)
    stack.start_beat()
    rid = f"req_{uuid.uuid4().hex}"
    code, job = stack.call("POST", "/api/v1/jobs", SMALL, headers={"X-Request-ID": rid})
    assert code == 202, job
    stack.wait_status([job["id"]])
    log = worker.log_text()
    for task in ("routing.run_job", "routing.finish_job"):
        done = [line for line in log.splitlines() if re.search(rf"{task}\[.*\] succeeded", line)]
        assert done, log
        assert any(f"[{rid}]" in line for line in done), (task, done)
    # beat's sweeps run under ids of their own, never the request's
    stack.workers[0].wait_for_log("routing.sweep_jobs[", timeout=30)
    sweeps = [
        line
        for line in worker.log_text().splitlines()
        if re.search(r"routing.sweep_jobs\[.*\] succeeded", line)
    ]
    assert sweeps, worker.log_text()
    assert all(re.search(r"\[req_[0-9a-f]{32}\]", line) for line in sweeps), worker.log_text()
    assert all(f"[{rid}]" not in line for line in sweeps), sweeps

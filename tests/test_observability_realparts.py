"""Observability with real parts (issue 30): the request id of `POST /api/v1/jobs`
follows the job into the Celery worker's log lines for its run and finish (gunicorn,
a prefork worker, beat, PostgreSQL and Redis), in both log formats (LOG_FORMAT)."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.realparts import wait_until
from tests.stack import SMALL, Stack

pytestmark = pytest.mark.realparts

REQ_ID = re.compile(r"req_[0-9a-f]{32}")


def task_lines(log: str, log_format: str) -> list[dict]:
    """The worker's 'Task <name>[<id>] succeeded' lines as records: message, request_id
    (and in JSON task_id, task_name)."""
    found = []
    for line in log.splitlines():
        if log_format == "json":
            if not line.startswith("{"):
                continue
            record = json.loads(line)
        else:
            m = re.match(r"\S+ \S+ (\w+) (\S+) \[(\S+)\]: (.*)", line)
            if not m:
                continue
            record = dict(
                zip(("level", "logger", "request_id", "message"), m.groups(), strict=True)
            )
        m = re.fullmatch(r"Task (\S+)\[(\S+)\] succeeded.*", record["message"])
        if m:
            found.append(record | {"name": m[1], "id": m[2]})
    return found


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_the_request_id_follows_a_job_into_the_worker_log(
    log_format, postgres_server, redis_server, broker_server
):
    stack = Stack(
        postgres_server, redis_server, broker=broker_server, extra_env={"LOG_FORMAT": log_format}
    )
    try:
        worker = stack.start_worker(concurrency=1)
        stack.start_beat()
        rid = f"req_{uuid.uuid4().hex}"
        code, job = stack.call("POST", "/api/v1/jobs", SMALL, headers={"X-Request-ID": rid})
        assert code == 202, job
        stack.wait_status([job["id"]])

        # The job's status is committed inside finish_job, its "succeeded" line written
        # after the task returns: wait for the lines themselves (a sweep's line seen first
        # may predate the finish: a run on 2026-12-06; earlier, a receipt line read for a
        # success, a CI run at 03:05 UTC).
        def logged() -> list[dict] | None:
            lines = task_lines(worker.log_text(), log_format)
            names = {r["name"] for r in lines if r["request_id"] == rid}
            done = {"routing.run_job", "routing.finish_job"} <= names
            return lines if done and any(r["name"] == "routing.sweep_jobs" for r in lines) else None

        try:
            lines = wait_until(logged, 30, "the job's run and finish lines and a sweep's")
        except TimeoutError:
            lines = task_lines(worker.log_text(), log_format)
        for task in ("routing.run_job", "routing.finish_job"):
            mine = [r for r in lines if r["name"] == task and r["request_id"] == rid]
            assert mine, (task, lines)
            if log_format == "json":
                assert {(r["task_name"], r["task_id"]) for r in mine} == {
                    (task, r["id"]) for r in mine
                }
                assert all(r["level"] == "INFO" and r["timestamp"] for r in mine)
        # beat's sweeps run under ids of their own, never the request's
        sweeps = [r for r in lines if r["name"] == "routing.sweep_jobs"]
        assert sweeps, lines
        assert all(REQ_ID.fullmatch(r["request_id"]) for r in sweeps), sweeps
        assert all(r["request_id"] != rid for r in sweeps), sweeps
    finally:
        stack.close()

"""Batches end to end with real parts: a 10,000-line file uploaded over HTTP to gunicorn,
validated, planned and run by real Celery workers on a throwaway PostgreSQL and Redis,
beat sweeping; then a worker killed in the middle of a batch. After each, the output
file matches the input by custom_id and `manage.py ledger_check` passes (charged once)."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest

from tests.helpers import jsonl
from tests.realparts import run_manage
from tests.stack import Stack

pytestmark = pytest.mark.realparts

BODY = {"model": "sol", "input_tokens": 2000, "output_tokens": 1000}


def busy_stack(pg, redis, scale: float, busy: float) -> Stack:
    # Interactive work holds most of the GPU pool so that the batch runs in waves of
    # ~35 simulated seconds (Flex).
    s = Stack(pg, redis, scale=scale, credits="1000")
    run_manage(
        s.env,
        "shell",
        "-c",
        "from catalog.models import HardwarePool; from routing.models import PoolLoad; "
        "PoolLoad.objects.update_or_create(pool=HardwarePool.objects.get(slug='h200-main'), "
        f"defaults={{'background_utilisation': {busy}}})",
    )
    return s


@pytest.fixture
def stack(postgres_server, redis_server):
    s = busy_stack(postgres_server, redis_server, scale=400.0, busy=0.98)  # ~0.1 s a wave
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def slow_stack(postgres_server, redis_server):
    s = busy_stack(postgres_server, redis_server, scale=25.0, busy=0.998)  # ~1.4 s a wave
    try:
        yield s
    finally:
        s.close()


def wait_batch(stack: Stack, batch_id: str, statuses, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    body = {}
    while time.monotonic() < deadline:
        body = stack.call("GET", f"/api/v1/batches/{batch_id}")[1]
        if body["status"] in statuses:
            return body
        time.sleep(0.25)
    raise AssertionError(f"batch not {statuses} after {timeout} s: {body}\n{stack.logs()}")


def check_output(stack: Stack, body: dict, n: int) -> None:
    lines = [json.loads(x) for x in stack.download(body["output_file_id"]).splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(f"req-{i}" for i in range(n))
    assert {x["response"]["status_code"] for x in lines} == {200}
    costs = sum(Decimal(x["response"]["body"]["cost"]) for x in lines)
    assert costs == Decimal(body["cost"])


def test_ten_thousand_requests_run_by_real_workers_inside_their_window(stack):
    stack.start_worker()
    stack.start_beat()
    code, f = stack.upload(jsonl(10_000, prefix="req-", body=BODY))
    assert code == 201 and f["lines"] == 10_000, f
    code, created = stack.call(
        "POST", "/api/v1/batches", {"input_file_id": f["id"], "completion_window": "8h"}
    )
    assert code == 202 and created["status"] == "validating", created
    seen = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        body = stack.call("GET", f"/api/v1/batches/{created['id']}")[1]
        seen.add(body["status"])
        if body["status"] in ("completed", "failed", "expired"):
            break
        time.sleep(0.2)
    assert body["status"] == "completed", body
    assert "in_progress" in seen
    assert body["request_counts"] == {"total": 10_000, "completed": 10_000, "failed": 0}
    assert body["completed_at"] <= body["expires_at"]
    assert body["plan"]["feasible"] and body["plan"]["makespan_seconds"] <= 8 * 3600
    assert Decimal(body["cost"]) == Decimal(body["predicted_cost"])  # half Standard each
    check_output(stack, body, 10_000)
    report = stack.ledger()
    assert report["ok"], report
    assert stack.spent() == pytest.approx(float(body["cost"]))


def test_a_worker_killed_mid_batch_loses_nothing_and_charges_once(slow_stack):
    stack = slow_stack
    worker = stack.start_worker()
    stack.start_beat()
    _, f = stack.upload(jsonl(2000, prefix="req-", body=BODY))  # ~8 waves
    _, created = stack.call(
        "POST", "/api/v1/batches", {"input_file_id": f["id"], "completion_window": "8h"}
    )
    body = wait_batch(stack, created["id"], ("in_progress", "completed"))
    deadline = time.monotonic() + 60
    while body["request_counts"]["completed"] == 0:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.05)
        body = stack.call("GET", f"/api/v1/batches/{created['id']}")[1]
    worker.kill()  # the next link of the chain dies with it (acks late: redelivered)
    assert body["status"] == "in_progress", "the kill came too late to test anything"
    stack.start_worker()
    body = wait_batch(stack, created["id"], ("completed", "failed", "expired"))
    assert body["status"] == "completed", body
    assert body["request_counts"] == {"total": 2000, "completed": 2000, "failed": 0}
    check_output(stack, body, 2000)
    report = stack.ledger()
    assert report["ok"], report
    assert stack.spent() == pytest.approx(float(body["cost"]))

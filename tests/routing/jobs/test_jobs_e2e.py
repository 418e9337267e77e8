"""Jobs end to end with real parts: a throwaway PostgreSQL cluster and Redis server, the
web app under gunicorn, real Celery worker and beat processes. The test is a plain HTTP
client; it kills, stops and restarts the servers and workers it started.

After every scenario `manage.py ledger_check` must pass: balances equal the ledger, no
job settled twice, none charged while cancelled, every succeeded job settled.
"""

from __future__ import annotations

import time

import pytest

from tests.realparts import BROKERS
from tests.stack import SMALL

pytestmark = pytest.mark.realparts

# The failure tests run on both real brokers: Redis and RabbitMQ (a throwaway node each).
on_each_broker = pytest.mark.parametrize("broker_server", BROKERS, indirect=True)


def test_a_job_goes_queued_running_succeeded_with_a_real_worker(stack):
    stack.start_worker()
    # Long enough (~8,000 output tokens: several real seconds at the stack's time scale)
    # that the polls below still see it running on a loaded machine (as the worker-kill
    # test's jobs; a 1,000-token job ran between two polls once, 2026-12-07).
    job = stack.submit(prompt="Explain the failing test", output_tokens=8000)
    assert job["status"] == "queued"
    seen = {job["status"]}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = stack.job(job["id"])
        seen.add(body["status"])
        if body["status"] == "succeeded":
            break
        time.sleep(0.1)
    assert seen >= {"queued", "running", "succeeded"}, seen
    assert body["cost"] == body["predicted"]["cost"]
    assert body["simulated"]["total_seconds"] > 0 and body["output"]["simulated"] is True
    assert stack.spent() == pytest.approx(float(body["cost"]))
    assert stack.ledger()["ok"]


@on_each_broker
def test_a_worker_killed_mid_job_loses_nothing_and_charges_once(stack):
    worker = stack.start_worker()
    # Long enough (~8,000 output tokens: several real seconds at the stack's time scale)
    # that a loaded machine still sees them running before they end.
    ids = [stack.submit(output_tokens=8000)["id"] for _ in range(12)]
    # Kill the worker while jobs are running (their finish is scheduled in it).
    deadline = time.monotonic() + 30
    while "running" not in {stack.job(j)["status"] for j in ids}:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.1)
    worker.kill()
    statuses = {stack.job(j)["status"] for j in ids}
    assert statuses - {"succeeded"}, "the kill came too late to test anything"
    stack.start_worker()
    stack.start_beat()  # the sweeper finishes and re-sends what died with the worker
    stack.wait_status(ids)
    report = stack.ledger()
    assert report["ok"], report
    assert report["settlements"] == len(ids)
    costs = sum(float(stack.job(j)["cost"]) for j in ids)
    assert stack.spent() == pytest.approx(costs)


@on_each_broker
def test_jobs_accepted_while_the_broker_is_down_complete_once_it_returns(stack):
    stack.start_worker()
    stack.start_beat()
    before = stack.submit()["id"]
    stack.broker.stop()
    during = []
    for _ in range(4):
        t0 = time.monotonic()
        during.append(stack.submit()["id"])  # accepted: the row is the truth
        assert time.monotonic() - t0 < 10
    time.sleep(2)
    stack.broker.start()
    stack.wait_status([before, *during], timeout=120)
    report = stack.ledger()
    assert report["ok"], report
    assert report["settlements"] == 5 and report["jobs"] == {"succeeded": 5}


def test_the_service_and_workers_recover_from_a_database_restart(stack):
    stack.start_worker()
    stack.start_beat()
    first = [stack.submit()["id"] for _ in range(3)]
    stack.pg.restart()
    # The web app reconnects on its own (no manual step): the next requests work.
    deadline = time.monotonic() + 30
    while True:
        code, body = stack.call("POST", "/api/v1/jobs", SMALL)
        if code == 202:
            break
        assert code in (500, 502, 503) and time.monotonic() < deadline, (code, body)
        time.sleep(0.5)
    later = [body["id"]] + [stack.submit()["id"] for _ in range(2)]
    stack.wait_status(first + later, timeout=120)
    assert stack.ledger()["ok"]


def test_cancel_while_queued_and_while_running_charges_nothing(stack):
    queued = stack.submit()["id"]  # no worker yet: it stays queued
    code, body = stack.call("POST", f"/api/v1/jobs/{queued}/cancel")
    assert code == 200 and body["status"] == "cancelled"
    stack.start_worker()
    # A long job (~470 simulated s = ~23 s wall at scale 20) to cancel while it runs.
    running = stack.submit(input_tokens=8000, output_tokens=22000, turns=30, tool_seconds=15)["id"]
    stack.wait_status([running], statuses=("running",), timeout=30)
    code, body = stack.call("POST", f"/api/v1/jobs/{running}/cancel")
    assert code == 200 and body["status"] == "cancelled"
    time.sleep(1.5)
    assert stack.job(queued)["status"] == "cancelled"
    assert stack.job(running)["status"] == "cancelled"
    assert stack.spent() == 0
    quota = stack.call("GET", "/api/v1/quota")[1]["data"][0]
    assert float(quota["reserved"]) == 0
    assert stack.ledger()["ok"]

"""The client's path on the real stack (throwaway PostgreSQL and Redis, gunicorn, a real
Celery worker): make a webhook endpoint through the API, make a key with a spending
cap, spend to 80 % of it, receive the signed quota.threshold webhook (delivered by the
worker, retried after a failed attempt) and verify it with the standardwebhooks
library. The receiver is a local http.server, let through the SSRF guard by the
operator's WEBHOOK_ALLOW_HOSTS (and WEBHOOK_ALLOW_HTTP)."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from standardwebhooks import Webhook

from tests.routing.webhooks.conftest import Receiver
from tests.stack import SMALL, Stack

pytestmark = pytest.mark.realparts


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def stack(postgres_server, redis_server, receiver):
    s = Stack(
        postgres_server,
        redis_server,
        extra_env={
            "WEBHOOK_ALLOW_HTTP": "1",
            "WEBHOOK_ALLOW_HOSTS": f"127.0.0.1:{receiver.port}",
            "WEBHOOK_RETRY_SCHEDULE": "1,1,1",
        },
    )
    try:
        yield s
    finally:
        s.close()


def wait_for(predicate, stack, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("not within the wait\n" + stack.logs())


def test_a_client_gets_a_signed_webhook_at_80_percent_of_its_key(stack, receiver):
    stack.start_worker()
    code, endpoint = stack.call(
        "POST", "/api/v1/webhooks", {"url": receiver.url, "event_types": ["quota.threshold"]}
    )
    assert code == 201, endpoint
    secret = endpoint["secret"]
    code, quote = stack.call("POST", "/api/v1/quotes", SMALL)
    assert code == 200, quote
    cost = Decimal(str(quote["cost"]))
    # A cap the job takes 85 % of: it crosses 50 % and 80 %, not 100 %.
    code, key = stack.call(
        "POST",
        "/api/v1/keys",
        {"name": "ci", "spend_limit": str((cost / Decimal("0.85")).quantize(Decimal("0.000001")))},
    )
    assert code == 201, key
    receiver.statuses = [500]  # the first attempt fails: the worker retries it
    code, job = stack.call(
        "POST", "/api/v1/jobs", SMALL, headers={"Authorization": f"Bearer {key['key']}"}
    )
    assert code == 202, job
    wait_for(lambda: len(receiver.requests) >= 3, stack)  # 50 %, 80 % (after a retry)
    payloads = [Webhook(secret).verify(body, headers) for headers, body in receiver.requests]
    assert {p["type"] for p in payloads} == {"quota.threshold"}
    assert sorted({p["data"]["threshold"] for p in payloads}) == [50, 80]
    at_80 = next(p for p in payloads if p["data"]["threshold"] == 80)
    assert at_80["data"]["scope"] == "key" and at_80["data"]["key"]["id"] == key["id"]
    code, log = stack.call("GET", f"/api/v1/webhooks/{endpoint['id']}/deliveries")
    assert code == 200
    wait_for(
        lambda: all(
            d["state"] == "delivered"
            for d in stack.call("GET", f"/api/v1/webhooks/{endpoint['id']}/deliveries")[1]["data"]
        ),
        stack,
    )
    log = stack.call("GET", f"/api/v1/webhooks/{endpoint['id']}/deliveries")[1]["data"]
    assert len(log) == 2 and sorted(d["attempts"] for d in log) == [1, 2]
    assert {d["last_status_code"] for d in log} == {204}

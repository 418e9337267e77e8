"""Webhook endpoints through the API, deliveries signed by the Standard Webhooks scheme
and verified with the `standardwebhooks` library on a real local receiver, secret
rotation, retries with backoff, "send again", and the SSRF guard."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from standardwebhooks import Webhook, WebhookVerificationError

from routing.accounts.accounts import account_create
from routing.accounts.keys import api_key_create
from routing.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from routing.webhooks.delivery import deliveries_due, delivery_attempt
from routing.webhooks.events import event_emit
from tests.helpers import ApiClient
from tests.routing.webhooks.conftest import deliver_due

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def make_endpoint(api, url, **fields):
    r = api.post_json("/api/v1/webhooks", {"url": url, **fields})
    assert r.status_code == 201, r.json()
    return r.json()


def emit(account, kind="batch.completed", key="k1"):
    return event_emit(account_id=account.pk, type=kind, key=key, data={"id": key})


def test_an_endpoint_is_made_with_its_secret_shown_once(api, receiver):
    made = make_endpoint(api, receiver.url, description="ops", event_types=["job.failed"])
    assert made["secret"].startswith("whsec_") and made["event_types"] == ["job.failed"]
    shown = api.get(f"/api/v1/webhooks/{made['id']}").json()
    assert "secret" not in shown and shown["url"] == receiver.url
    listed = api.get("/api/v1/webhooks").json()["data"]
    assert [e["id"] for e in listed] == [made["id"]] and "secret" not in listed[0]
    r = api.patch(
        f"/api/v1/webhooks/{made['id']}",
        json.dumps({"enabled": False, "event_types": []}),
        content_type="application/json",
    )
    assert r.status_code == 200 and r.json()["enabled"] is False and r.json()["event_types"] == []
    assert api.delete(f"/api/v1/webhooks/{made['id']}").status_code == 204
    assert api.get(f"/api/v1/webhooks/{made['id']}").status_code == 404


def test_only_an_admin_key_manages_endpoints_and_another_accounts_id_is_a_404(
    api, account, receiver
):
    made = make_endpoint(api, receiver.url)
    _, member = api_key_create(account=account, name="member")
    r = ApiClient(member).get("/api/v1/webhooks")
    assert r.status_code == 403 and r["Content-Type"] == PROBLEM
    _, other = account_create(name="other")
    r = ApiClient(other).get(f"/api/v1/webhooks/{made['id']}")
    assert r.status_code == 404 and r.json()["type"].endswith("/webhook-not-found")
    for bad in ("¹", "1.0", "x", "9" * 30):
        assert api.get(f"/api/v1/webhooks/{bad}").status_code == 404


def test_a_private_address_is_refused_unless_the_operator_allows_it(api, settings):
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_ALLOW_HOSTS = frozenset()
    for url in ("http://127.0.0.1:9/x", "http://10.0.0.1/x", "https://[::1]/x", "ftp://a/x"):
        r = api.post_json("/api/v1/webhooks", {"url": url})
        assert r.status_code == 400 and r.json()["type"].endswith("/unsafe-url"), url
    settings.WEBHOOK_ALLOW_HOSTS = frozenset({"127.0.0.1:9"})
    assert api.post_json("/api/v1/webhooks", {"url": "http://127.0.0.1:9/x"}).status_code == 201
    # Another port of the same host is not on the list.
    r = api.post_json("/api/v1/webhooks", {"url": "http://127.0.0.1:10/x"})
    assert r.status_code == 400
    assert WebhookEndpoint.objects.count() == 1


def test_the_guard_is_checked_again_at_the_call(api, account, receiver, settings, dispatched):
    make_endpoint(api, receiver.url)
    emit(account)
    settings.WEBHOOK_ALLOW_HOSTS = frozenset()  # the operator took the host off the list
    deliver_due()
    d = WebhookDelivery.objects.get()
    assert d.state == "failed" and d.attempts == 1 and "non-public" in d.last_error
    assert receiver.requests == []


def test_a_delivery_is_signed_and_verifies_with_the_library(api, account, receiver, dispatched):
    made = make_endpoint(api, receiver.url)
    event = emit(account)
    assert deliver_due() == 1
    [(headers, body)] = receiver.requests
    assert headers["webhook-id"] == event.pk and event.pk.startswith("msg_")
    payload = Webhook(made["secret"]).verify(body, headers)
    assert payload == {
        "id": event.pk,
        "type": "batch.completed",
        "timestamp": payload["timestamp"],
        "data": {"id": "k1"},
    }
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(body, headers)
    d = WebhookDelivery.objects.get()
    assert (d.state, d.attempts, d.last_status_code) == ("delivered", 1, 204)
    assert d.response_ms is not None and d.delivered_at is not None
    log = api.get(f"/api/v1/webhooks/{made['id']}/deliveries").json()["data"]
    assert log[0]["state"] == "delivered" and log[0]["event_id"] == event.pk


def test_during_a_rotation_both_secrets_verify_then_only_the_new_one(
    api, account, receiver, dispatched
):
    made = make_endpoint(api, receiver.url)
    r = api.post_json(f"/api/v1/webhooks/{made['id']}/rotate-secret", {"overlap_seconds": 3600})
    assert r.status_code == 201
    rotated = r.json()
    assert rotated["secret"] != made["secret"] and rotated["previous_secret_expires_at"]
    emit(account, key="during")
    deliver_due()
    headers, body = receiver.requests[-1]
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(made["secret"]).verify(body, headers)
    Webhook(rotated["secret"]).verify(body, headers)
    # The overlap ends: the old secret is dropped.
    WebhookEndpoint.objects.filter(pk=made["id"]).update(
        previous_secret_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    emit(account, key="after")
    deliver_due()
    headers, body = receiver.requests[-1]
    Webhook(rotated["secret"]).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(made["secret"]).verify(body, headers)


def test_failed_attempts_are_retried_on_the_schedule_then_the_delivery_fails(
    api, account, receiver, settings, dispatched
):
    settings.WEBHOOK_RETRY_SCHEDULE = [5.0, 300.0]
    make_endpoint(api, receiver.url)
    emit(account)
    receiver.statuses = [500, 503, 500]
    d = WebhookDelivery.objects.get()
    assert delivery_attempt(d.pk) == 5.0
    d.refresh_from_db()
    assert (d.state, d.attempts, d.last_status_code, d.last_error) == (
        "pending",
        1,
        500,
        "HTTP 500",
    )
    assert d.next_attempt_at - d.last_attempt_at == dt.timedelta(seconds=5)
    assert delivery_attempt(d.pk) is None  # not due yet: nothing sent
    assert len(receiver.requests) == 1
    WebhookDelivery.objects.filter(pk=d.pk).update(next_attempt_at=timezone.now())
    assert delivery_attempt(d.pk) == 300.0
    d.refresh_from_db()
    assert d.next_attempt_at - d.last_attempt_at == dt.timedelta(seconds=300)
    WebhookDelivery.objects.filter(pk=d.pk).update(next_attempt_at=timezone.now())
    assert deliveries_due() == 1  # beat's sweep sends what is due
    assert delivery_attempt(d.pk) is None  # the last attempt: no more retries
    d.refresh_from_db()
    assert (d.state, d.attempts, d.next_attempt_at) == ("failed", 3, None)
    assert len(receiver.requests) == 3
    # Each attempt carries the same webhook-id (receivers dedupe on it).
    assert len({h["webhook-id"] for h, _ in receiver.requests}) == 1


def test_a_delivery_is_posted_once_however_often_its_task_runs(api, account, receiver, dispatched):
    make_endpoint(api, receiver.url)
    emit(account)
    d = WebhookDelivery.objects.get()
    for _ in range(3):
        delivery_attempt(d.pk)
    assert len(receiver.requests) == 1
    # Emitting the same thing again (a rerun) records nothing new.
    assert emit(account) is None
    assert WebhookEvent.objects.count() == 1


def test_send_again_from_the_admin_delivers_a_failed_delivery(api, account, receiver, dispatched):
    make_endpoint(api, receiver.url)
    emit(account)
    receiver.statuses = [500, 500, 500]
    deliver_due()
    d = WebhookDelivery.objects.get()
    assert d.state == "failed" and d.attempts == 3
    staff = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw-123456")
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/routing/webhookdelivery/")
    assert page.status_code == 200 and "Failed" in page.content.decode()
    r = client.post(
        "/admin/routing/webhookdelivery/",
        {"action": "send_again", "_selected_action": [d.pk]},
    )
    assert r.status_code == 302
    assert ("routing.deliver_webhook", (d.pk,)) in dispatched
    deliver_due()
    d.refresh_from_db()
    assert (d.state, d.attempts, d.last_status_code) == ("delivered", 1, 204)
    assert len(receiver.requests) == 4


def test_the_test_event_goes_to_the_endpoint_signed(api, receiver, dispatched):
    made = make_endpoint(api, receiver.url, event_types=["job.failed"])
    r = api.post(f"/api/v1/webhooks/{made['id']}/test")
    assert r.status_code == 202 and r.json()["event_type"] == "webhook.test"
    deliver_due()
    headers, body = receiver.requests[-1]
    assert Webhook(made["secret"]).verify(body, headers)["type"] == "webhook.test"


def test_an_endpoint_gets_only_the_types_it_subscribes_to(api, account, receiver, dispatched):
    make_endpoint(api, receiver.url, event_types=["job.failed"])
    assert emit(account, "batch.completed") is None
    assert emit(account, "job.failed", key="j") is not None
    assert WebhookDelivery.objects.count() == 1

"""Emitting an event: the event row and one pending delivery per enabled endpoint of the
account that subscribes to its type, written in the caller's transaction (with the
state change the event tells), the deliveries sent after commit. Idempotent per
(account, key): emitting the same thing twice (a rerun, a redelivered task) records and
sends it once. An account with no endpoint for the type records nothing."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from routing.core import dispatch, tasknames
from routing.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from routing.models.webhooks import EVENT_TYPES, TEST_EVENT


def send_delivery(delivery_id: int, countdown: float = 0.0) -> None:
    """Deliver on a worker (beat's sweep sends it later when the broker is away)."""
    dispatch.send_now(tasknames.DELIVER_WEBHOOK, delivery_id, countdown=countdown)


def event_emit(
    *,
    account_id: int,
    type: str,
    key: str,
    data: dict,
    endpoints: list[WebhookEndpoint] | None = None,
) -> WebhookEvent | None:
    """Record event `type` for the account (once per `key`) with a delivery to each
    enabled endpoint subscribing to it (or to `endpoints`, as given: a test event);
    None when there is nobody to tell or it was emitted already."""
    if type not in EVENT_TYPES and type != TEST_EVENT:
        raise ValueError(f"Unknown event type {type!r}.")
    # Deliveries are due now (wall time), whatever time the caller's work is at.
    now = timezone.now()
    if endpoints is None:
        endpoints = [
            e
            for e in WebhookEndpoint.objects.filter(account_id=account_id, enabled=True)
            if e.subscribes(type)
        ]
    if not endpoints:
        return None
    try:
        with transaction.atomic():
            event = WebhookEvent.objects.create(
                account_id=account_id, type=type, key=key[:200], data=data
            )
            deliveries = WebhookDelivery.objects.bulk_create(
                WebhookDelivery(event=event, endpoint=e, next_attempt_at=now) for e in endpoints
            )
    except IntegrityError:
        return None  # emitted already
    ids = [d.pk for d in deliveries]
    transaction.on_commit(lambda: [send_delivery(pk) for pk in ids])
    return event

"""Webhook deliveries on a worker: one attempt per message, the next one scheduled by
countdown when it is near, by beat's sweep otherwise (and for anything the broker lost)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from routing.core import tasknames
from routing.tasks.base import RETRY, reset_connections
from routing.webhooks.delivery import deliveries_due, delivery_attempt
from routing.webhooks.events import send_delivery


@shared_task(name=tasknames.DELIVER_WEBHOOK, ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    """One attempt (idempotent: claimed by a conditional update; a delivered or
    not-yet-due delivery is left alone)."""
    reset_connections()
    delay = delivery_attempt(delivery_id)
    if delay is not None and delay <= settings.BROKER_MAX_COUNTDOWN_SECONDS:
        send_delivery(delivery_id, countdown=delay)


@shared_task(name=tasknames.SWEEP_WEBHOOKS, ignore_result=True, **RETRY)
def sweep_webhooks() -> int:
    """Send the deliveries whose attempt is due (beat, every 5 seconds)."""
    reset_connections()
    return deliveries_due()

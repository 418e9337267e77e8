"""Housekeeping on beat: quota periods, the retirement day, retirement notices and
their webhook deliveries, expired batch output files."""

from __future__ import annotations

import random

from celery import shared_task

from routing.batches.files import files_expire_due
from routing.core import tasknames
from routing.quota import quota_reset_due
from routing.retirement.day import retirements_apply_due
from routing.retirement.notices import (
    WEBHOOK_MAX_ATTEMPTS,
    WebhookError,
    notice_deliver,
    notices_announce_due,
)
from routing.router.occupancy import occupancy_reconcile
from routing.tasks.base import RETRY, reset_connections


@shared_task(name=tasknames.RESET_QUOTA_PERIODS, ignore_result=True, **RETRY)
def reset_quota_periods() -> int:
    """Start the new period of every package whose reset is due (beat, every minute).
    Running it twice resets once."""
    reset_connections()
    return quota_reset_due()


@shared_task(name=tasknames.APPLY_RETIREMENTS, ignore_result=True, **RETRY)
def apply_retirements() -> dict:
    """The retirement day's quota policies (beat, every minute; idempotent, resumable)."""
    reset_connections()
    return retirements_apply_due()


@shared_task(name=tasknames.ANNOUNCE_NOTICES, ignore_result=True, **RETRY)
def announce_notices() -> int:
    """Notices for announced retirements not yet told (beat, every minute)."""
    reset_connections()
    return notices_announce_due()


@shared_task(name=tasknames.EXPIRE_FILES, ignore_result=True, **RETRY)
def expire_files() -> int:
    """Delete the content of batch output and error files past their expiry (beat,
    every hour; idempotent)."""
    reset_connections()
    return files_expire_due()


@shared_task(
    name=tasknames.DELIVER_NOTICE,
    bind=True,
    ignore_result=True,
    max_retries=WEBHOOK_MAX_ATTEMPTS - 1,
)
def deliver_notice(self, notice_id: str) -> None:
    """POST a notice to the account's webhook; retried with backoff and jitter, then
    marked failed (the admin shows the state, the API keeps the notice)."""
    reset_connections()
    final = self.request.retries >= self.max_retries
    try:
        notice_deliver(notice_id, final=final)
    except WebhookError as exc:
        raise self.retry(exc=exc, countdown=backoff_seconds(self.request.retries)) from exc


def backoff_seconds(retries: int) -> float:
    return min(600.0, 5.0 * 2**retries) * random.uniform(0.5, 1.0)


@shared_task(name=tasknames.RECONCILE_OCCUPANCY, ignore_result=True, **RETRY)
def reconcile_occupancy() -> int:
    """Check each pool's occupancy counters against its jobs; rewrite them (and log a
    warning) when they differ (beat, every minute). The number of pools that differed."""
    reset_connections()
    return len(occupancy_reconcile())

"""Celery tasks: thin callers of the services. Each is idempotent."""

from __future__ import annotations

from celery import shared_task

from routing.quota import quota_reset_due


@shared_task(name="routing.reset_quota_periods", ignore_result=True)
def reset_quota_periods() -> int:
    """Start the new period of every package whose reset is due (beat, every minute).
    Running it twice resets once."""
    return quota_reset_due()

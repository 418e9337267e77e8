"""Celery tasks: thin callers of the services. Each takes ids and is idempotent; the
database row is the truth and results are ignored."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError, InterfaceError, OperationalError

from routing.jobs.sweep import jobs_sweep
from routing.jobs.worker import job_finish_when_due, job_run
from routing.quota import quota_reset_due
from routing.retirement.day import retirements_apply_due
from routing.retirement.notices import (
    WEBHOOK_MAX_ATTEMPTS,
    WebhookError,
    notice_deliver,
    notices_announce_due,
)

# Expected, passing errors (the database restarting, a connection cut): retry with
# exponential backoff and jitter. Anything else is a bug and is logged by Celery.
TRANSIENT = (OperationalError, InterfaceError, DatabaseError)
RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 20,
}


def _reset_connections() -> None:
    # A connection broken by a database restart must not be reused by the retry. (Not
    # inside a transaction: a task run eagerly in a test must keep its connection.)
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


@shared_task(name="routing.run_job", ignore_result=True, **RETRY)
def run_job(job_id: str) -> None:
    _reset_connections()
    job_run(job_id)


@shared_task(name="routing.finish_job", ignore_result=True, **RETRY)
def finish_job(job_id: str) -> None:
    _reset_connections()
    job_finish_when_due(job_id)


@shared_task(name="routing.sweep_jobs", ignore_result=True, **RETRY)
def sweep_jobs() -> dict:
    _reset_connections()
    return jobs_sweep()


@shared_task(name="routing.reset_quota_periods", ignore_result=True, **RETRY)
def reset_quota_periods() -> int:
    """Start the new period of every package whose reset is due (beat, every minute).
    Running it twice resets once."""
    _reset_connections()
    return quota_reset_due()


@shared_task(name="routing.apply_retirements", ignore_result=True, **RETRY)
def apply_retirements() -> dict:
    """The retirement day's quota policies (beat, every minute; idempotent, resumable)."""
    _reset_connections()
    return retirements_apply_due()


@shared_task(name="routing.announce_notices", ignore_result=True, **RETRY)
def announce_notices() -> int:
    """Notices for announced retirements not yet told (beat, every minute)."""
    _reset_connections()
    return notices_announce_due()


@shared_task(
    name="routing.deliver_notice",
    bind=True,
    ignore_result=True,
    max_retries=WEBHOOK_MAX_ATTEMPTS - 1,
)
def deliver_notice(self, notice_id: str) -> None:
    """POST a notice to the account's webhook; retried with backoff and jitter, then
    marked failed (the admin shows the state, the API keeps the notice)."""
    _reset_connections()
    final = self.request.retries >= self.max_retries
    try:
        notice_deliver(notice_id, final=final)
    except WebhookError as exc:
        raise self.retry(exc=exc, countdown=backoff_seconds(self.request.retries)) from exc


def backoff_seconds(retries: int) -> float:
    import random

    return min(600.0, 5.0 * 2**retries) * random.uniform(0.5, 1.0)


# --- Batches ---------------------------------------------------------------------------


@shared_task(name="routing.validate_batch", ignore_result=True, **RETRY)
def validate_batch(batch_id: str) -> None:
    from routing.batches.service import batch_validate

    _reset_connections()
    batch_validate(batch_id)


@shared_task(name="routing.advance_batch", ignore_result=True, **RETRY)
def advance_batch(batch_id: str) -> None:
    """One link of a running batch's chain; it sends the next."""
    from routing.batches.service import batch_advance

    _reset_connections()
    batch_advance(batch_id)


@shared_task(name="routing.finalize_batch", ignore_result=True, **RETRY)
def finalize_batch(batch_id: str) -> None:
    from routing.batches.service import batch_finalize

    _reset_connections()
    batch_finalize(batch_id)


@shared_task(name="routing.sweep_batches", ignore_result=True, **RETRY)
def sweep_batches() -> dict:
    """Beat: start due batches, expire overdue ones, finalize finished ones, restart lost
    chains (idempotent)."""
    from routing.batches.service import batches_sweep

    _reset_connections()
    return batches_sweep()


@shared_task(name="routing.start_scheduled_batch", ignore_result=True, **RETRY)
def start_scheduled_batch(schedule_id: int) -> str | None:
    """A recurring batch's periodic task (django-celery-beat): one batch per firing."""
    from routing.batches.service import batch_from_schedule

    _reset_connections()
    batch = batch_from_schedule(int(schedule_id))
    return str(batch.pk) if batch else None

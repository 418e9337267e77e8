"""Batch steps: validate, advance the chain, finalize, beat's sweep, scheduled starts."""

from __future__ import annotations

from celery import shared_task

from routing.batches.finish import batch_finalize
from routing.batches.runner import batch_advance
from routing.batches.schedules import batch_from_schedule
from routing.batches.sweep import batches_sweep
from routing.batches.validation import batch_validate
from routing.core import tasknames
from routing.tasks.base import RETRY, reset_connections


@shared_task(name=tasknames.VALIDATE_BATCH, ignore_result=True, **RETRY)
def validate_batch(batch_id: str) -> None:
    reset_connections()
    batch_validate(batch_id)


@shared_task(name=tasknames.ADVANCE_BATCH, ignore_result=True, **RETRY)
def advance_batch(batch_id: str) -> None:
    """One link of a running batch's chain; it sends the next."""
    reset_connections()
    batch_advance(batch_id)


@shared_task(name=tasknames.FINALIZE_BATCH, ignore_result=True, **RETRY)
def finalize_batch(batch_id: str) -> None:
    reset_connections()
    batch_finalize(batch_id)


@shared_task(name=tasknames.SWEEP_BATCHES, ignore_result=True, **RETRY)
def sweep_batches() -> dict:
    """Beat: start due batches, expire overdue ones, finalize finished ones, restart lost
    chains (idempotent)."""
    reset_connections()
    return batches_sweep()


@shared_task(name=tasknames.START_SCHEDULED_BATCH, ignore_result=True, **RETRY)
def start_scheduled_batch(schedule_id: int) -> str | None:
    """A recurring batch's periodic task (django-celery-beat): one batch per firing."""
    reset_connections()
    batch = batch_from_schedule(int(schedule_id))
    return str(batch.pk) if batch else None

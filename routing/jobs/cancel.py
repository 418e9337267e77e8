"""Cancelling a job: queued or running, its reservation released (nothing charged); a
streamed answer (/v1/ chat with stream: true) is charged for what it had delivered."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from routing import quota
from routing.jobs.errors import JobNotCancellable
from routing.jobs.interactive import stream_settle
from routing.models import Job


def job_cancel(*, job: Job, at: dt.datetime | None = None) -> Job:
    """Cancel a queued or running job: its reservation is released, nothing charged,
    its slot freed. A running streamed answer is charged for the tokens its stream had
    delivered (routing.jobs.interactive.stream_settle), and its stream stops at its next
    event. Cancelling a cancelled job changes nothing."""
    at = at or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status == Job.Status.CANCELLED:
            return locked
        if locked.status not in Job.ACTIVE:
            raise JobNotCancellable(f"Job {locked.pk} has already {locked.status}.")
        if locked.status == Job.Status.RUNNING and locked.finishes_at and locked.finishes_at <= at:
            raise JobNotCancellable(f"Job {locked.pk} has finished; it is being settled.")
        if locked.status == Job.Status.RUNNING and locked.delivered_tokens is not None:
            return stream_settle(locked, at=at, status=Job.Status.CANCELLED)
        quota.quota_release(reservation_id=locked.reservation_id, at=at)
        locked.status = Job.Status.CANCELLED
        locked.cancelled_at = locked.finished_at = at
        locked.cost = Decimal(0)
        fields = ["status", "cancelled_at", "finished_at", "cost"]
        if locked.finishes_at and locked.finishes_at > at:
            locked.finishes_at = at  # the slot frees now
            fields.append("finishes_at")
        locked.save(update_fields=fields)
        return locked

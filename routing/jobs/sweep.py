"""Beat's safety net for jobs."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

from routing.jobs.submit import send_run
from routing.jobs.worker import job_finish
from routing.models import Job


def jobs_sweep(*, at: dt.datetime | None = None) -> dict[str, int]:
    """Beat's safety net: finish running jobs past their end (a finish message was
    lost with its worker) and send again queued jobs nobody claimed (the broker was
    down when they were accepted, or the message died with a worker)."""
    at = at or timezone.now()
    finished = 0
    for job_id in Job.objects.filter(status=Job.Status.RUNNING, finishes_at__lte=at).values_list(
        "pk", flat=True
    ):
        finished += job_finish(job_id, at=at) is not None
    stale = at - dt.timedelta(seconds=settings.JOB_RESEND_AFTER_SECONDS)
    resent = 0
    for job_id in Job.objects.filter(status=Job.Status.QUEUED, last_sent_at__lte=stale).values_list(
        "pk", flat=True
    ):
        # Claim the resend, so two sweepers do not both send it.
        if Job.objects.filter(pk=job_id, status=Job.Status.QUEUED, last_sent_at__lte=stale).update(
            last_sent_at=at
        ):
            send_run(job_id)
            resent += 1
    return {"finished": finished, "resent": resent}

"""Beat's safety net for jobs."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

from routing.jobs.interactive import stream_recover
from routing.jobs.submit import send_run
from routing.jobs.worker import job_finish
from routing.models import Job

# How long past its end a streamed job may still run before the sweeper takes it for
# one whose web process died (a live stream settles it within moments of its end).
STREAM_RECOVER_AFTER_SECONDS = 5.0


def jobs_sweep(*, at: dt.datetime | None = None) -> dict[str, int]:
    """Beat's safety net: finish running jobs past their end (a finish message was
    lost with its worker, or a streamed answer's web process died: charged for what it
    had delivered) and send again queued jobs nobody claimed (the broker was
    down when they were accepted, or the message died with a worker)."""
    at = at or timezone.now()
    finished = 0
    # A streamed answer's own web process settles it at its end; one still running
    # STREAM_RECOVER_AFTER_SECONDS later lost its process: charged for what it delivered.
    stale_stream = at - dt.timedelta(seconds=STREAM_RECOVER_AFTER_SECONDS)
    for job_id, delivered, ends in Job.objects.filter(
        status=Job.Status.RUNNING, finishes_at__lte=at
    ).values_list("pk", "delivered_tokens", "finishes_at"):
        if delivered is None:
            finished += job_finish(job_id, at=at) is not None
        elif ends <= stale_stream:
            finished += stream_recover(job_id, at=at) is not None
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

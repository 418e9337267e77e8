"""Cancelling a batch, and retrying the requests of an ended batch that did not complete."""

from __future__ import annotations

import datetime as dt
import json

from django.db import transaction
from django.utils import timezone

from routing.batches.create import batch_create
from routing.batches.errors import BatchError, BatchNotCancellable
from routing.batches.files import file_write
from routing.batches.finish import batch_end, requests_close
from routing.batches.send import send_advance
from routing.models import Batch, BatchRequest, File


def batch_cancel(*, batch: Batch, at: dt.datetime | None = None) -> Batch:
    """Cancel: requests not started are cancelled at once (their credits released when
    the batch ends), requests in flight finish and are billed, then the batch is
    `cancelled`. Cancelling a cancelling or cancelled batch changes nothing."""
    at = at or timezone.now()
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.status in (Batch.Status.CANCELLING, Batch.Status.CANCELLED):
            return locked
        if locked.status not in (Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS):
            raise BatchNotCancellable(
                f"Batch {locked.pk} has already {locked.status.replace('_', ' ')}.",
                code="batch-not-cancellable",
            )
        locked.status = Batch.Status.CANCELLING
        locked.cancelling_at = at
        locked.next_advance_at = at
        locked.save(update_fields=["status", "cancelling_at", "next_advance_at"])
        requests_close(
            batch=locked,
            requests=locked.requests.filter(status=BatchRequest.Status.QUEUED),
            status=BatchRequest.Status.CANCELLED,
            code="batch_cancelled",
            message="The batch was cancelled before this request started.",
            at=at,
        )
        if not locked.requests.filter(status=BatchRequest.Status.RUNNING).exists():
            locked.refresh_from_db()
            batch_end(batch=locked, status=Batch.Status.CANCELLED, at=at)
        else:
            transaction.on_commit(lambda: send_advance(locked.pk))
    locked.refresh_from_db()
    return locked


def batch_retry_failed(*, batch: Batch, at: dt.datetime | None = None) -> Batch:
    """A new batch of the requests that did not complete (failed, expired, cancelled),
    from their original lines, with the same endpoint and window."""
    at = at or timezone.now()
    if batch.status not in Batch.TERMINAL:
        raise BatchError(
            f"Batch {batch.pk} is still {batch.status}; retry when it has ended.",
            code="batch-not-ended",
        )
    if batch.validated_at is None:
        # Ended before its file was read (cancelled while validating, a broken file):
        # the retry is the whole input again.
        input_file_id = batch.input_file_id
        if input_file_id is None:
            raise BatchError(
                f"Batch {batch.pk} ended before its file was read, and its input file "
                "has been deleted since: nothing to retry from.",
                code="nothing-to-retry",
            )
    else:
        rows = batch.requests.exclude(status=BatchRequest.Status.COMPLETED).order_by("line")
        if not rows.exists():
            raise BatchError(f"Batch {batch.pk} has no failed requests.", code="nothing-to-retry")
        input_file_id = file_write(
            account=batch.account,
            purpose=File.Purpose.BATCH,
            filename=f"retry_of_{batch.pk.hex}.jsonl",
            lines=(
                json.dumps(r).encode()
                for r in rows.values_list("request", flat=True).iterator(chunk_size=2000)
            ),
        ).id
    return batch_create(
        account=batch.account,
        input_file_id=input_file_id,
        endpoint=batch.endpoint,
        completion_window=batch.completion_window,
        metadata=batch.metadata,
        retry_of=batch,
        at=at,
    )

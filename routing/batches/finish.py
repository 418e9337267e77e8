"""Ending a batch: requests closed with a reason, completed requests charged from their
reservations, what is still held released, the output and error files written, and the
final status (completed, expired, cancelled or failed) with its time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from routing import quota
from routing.batches.files import file_write
from routing.batches.output import error_lines, output_lines
from routing.core.formats import iso
from routing.models import Batch, BatchRequest, File, QuotaReservation
from routing.webhooks.events import event_emit

_END_FIELD = {
    Batch.Status.COMPLETED: "completed_at",
    Batch.Status.EXPIRED: "expired_at",
    Batch.Status.CANCELLED: "cancelled_at",
}


def batch_finalize(batch_id, *, at: dt.datetime | None = None) -> Batch | None:
    """Write the files of a batch whose requests are all done and complete it.
    Idempotent: only a `finalizing` batch is finalized."""
    at = at or timezone.now()
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update()
            .filter(pk=batch_id, status=Batch.Status.FINALIZING)
            .first()
        )
        if batch is None:
            return None
        batch_end(batch=batch, status=Batch.Status.COMPLETED, at=at)
        return batch


def batch_end(*, batch: Batch, status: str, at: dt.datetime) -> str:
    """End a batch (under its lock): release what is still held, write the output and
    error files, set the final status and its time."""
    refs = set(
        QuotaReservation.objects.filter(
            reference__startswith=f"batch:{batch.pk}:", state=QuotaReservation.State.HELD
        ).values_list("reference", flat=True)
    )
    for ref in refs:
        quota.quota_release(reference=ref, at=at)
    batch.refresh_from_db()
    batch.output_file = (
        file_write(
            account=batch.account,
            purpose=File.Purpose.BATCH_OUTPUT,
            filename=f"batch_{batch.pk.hex}_output.jsonl",
            lines=output_lines(batch),
        )
        if batch.completed
        else None
    )
    errors = batch.requests.exclude(status=BatchRequest.Status.COMPLETED).exists()
    batch.error_file = (
        file_write(
            account=batch.account,
            purpose=File.Purpose.BATCH_ERROR,
            filename=f"batch_{batch.pk.hex}_errors.jsonl",
            lines=error_lines(batch),
        )
        if errors
        else None
    )
    batch.status = status
    setattr(batch, _END_FIELD[status], at)
    batch.next_advance_at = None
    batch.save(
        update_fields=["status", _END_FIELD[status], "output_file", "error_file", "next_advance_at"]
    )
    batch_event_emit(batch, at)
    return status


def batch_fail(
    *, batch: Batch, errors: list[dict], at: dt.datetime, also: Iterable[str] = ()
) -> Batch:
    """Fail a batch (under its lock) with `errors`; requests it validated and that have
    not run fail with the first error's reason. `also` names more fields to save."""
    if batch.pk and batch.validated_at:
        first = errors[0] if errors else {}
        batch.failed += requests_close(
            batch=batch,
            requests=batch.requests.filter(status=BatchRequest.Status.QUEUED),
            status=BatchRequest.Status.FAILED,
            code=first.get("code", "batch_failed"),
            message=first.get("message", "The batch failed."),
            at=at,
        )
    batch.status = Batch.Status.FAILED
    batch.failed_at = at
    batch.errors = errors
    batch.save(update_fields=["status", "failed_at", "errors", "failed", *also])
    batch_event_emit(batch, at)
    return batch


_EVENTS = {
    Batch.Status.COMPLETED: "batch.completed",
    Batch.Status.FAILED: "batch.failed",
    Batch.Status.EXPIRED: "batch.expired",
}


def batch_event_emit(batch: Batch, at: dt.datetime) -> None:
    """The webhook event of a batch that ended completed, failed or expired (in the
    transaction that ended it; once per batch and status)."""
    kind = _EVENTS.get(batch.status)
    if kind is None:
        return
    event_emit(
        account_id=batch.account_id,
        type=kind,
        key=f"{kind}:{batch.pk}",
        data={
            "id": str(batch.pk),
            "object": "batch",
            "status": batch.status,
            "endpoint": batch.endpoint,
            "input_file_id": batch.input_file_id,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "request_counts": {
                "total": batch.total,
                "completed": batch.completed,
                "failed": batch.failed,
            },
            "errors": batch.errors or None,
            "created_at": iso(batch.created_at),
            "ended_at": iso(at),
            "metadata": batch.metadata,
        },
    )


def requests_close(
    *, batch: Batch, requests, status: str, code: str, message: str, at: dt.datetime
) -> int:
    """End `requests` (a queryset of the batch's) with `status` and an error; they count
    as failed."""
    ids = list(requests.values_list("pk", flat=True))
    for i in range(0, len(ids), 5000):
        BatchRequest.objects.filter(pk__in=ids[i : i + 5000]).update(
            status=status, finished_at=at, error={"code": code, "message": message}
        )
    if ids:
        Batch.objects.filter(pk=batch.pk).update(failed=F("failed") + len(ids))
    return len(ids)


def requests_charge(*, batch: Batch, charges: dict[int, list[Decimal]]) -> Decimal:
    """Charge the requests completed in a chain link from their reservations (one ledger
    row per reservation, noting how many requests it pays for)."""
    total = Decimal(0)
    if not charges:
        return total
    refs = dict(
        QuotaReservation.objects.filter(pk__in=list(charges)).values_list("pk", "reference")
    )
    for rid, costs in charges.items():
        amount = sum(costs, Decimal(0))
        total += quota.quota_draw(
            reference=refs[rid], amount=amount, note=f"batch {batch.pk}: {len(costs)} requests"
        )
    return total

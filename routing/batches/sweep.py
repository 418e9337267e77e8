"""Beat's safety net for batches: every step a lost message or a dead worker left
undone is taken again (each step is idempotent). Each batch is isolated: a step that
raises is logged and counted (`errors`) and the sweep goes on with the others; a batch
whose validation raises is failed with an error rather than left `validating`."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from django.db.models import Q
from django.utils import timezone

from routing.batches.finish import batch_finalize
from routing.batches.planning import ACTIVE, batch_start
from routing.batches.runner import batch_advance
from routing.batches.validation import batch_validate, batch_validation_crashed
from routing.models import Batch

logger = logging.getLogger(__name__)

STALE_ADVANCE = dt.timedelta(seconds=5)  # a step this late was lost: take it again


def batches_sweep(*, at: dt.datetime | None = None) -> dict[str, int]:
    """Beat's batch work: validate what a lost message left `validating`, start due
    batches, expire overdue ones (through their chain link), finalize finished ones, and
    restart a chain whose next link is late (its message died with a worker)."""
    at = at or timezone.now()
    out = {"validated": 0, "started": 0, "advanced": 0, "finalized": 0, "errors": 0}
    stale = at - STALE_ADVANCE

    def each(step: str, pk, call: Callable[[], object]) -> bool:
        """Whether `call` (one batch's step) did something; an exception is logged and
        counted, and the sweep goes on."""
        try:
            return call() is not None
        except Exception as exc:
            out["errors"] += 1
            logger.exception("Batch sweep: %s of batch %s failed", step, pk)
            if step == "validate":
                try:
                    batch_validation_crashed(pk, exc, at=at)
                except Exception:
                    logger.exception("Batch sweep: failing batch %s failed too", pk)
            return False

    for pk in Batch.objects.filter(
        status=Batch.Status.VALIDATING, validated_at__isnull=True, created_at__lte=stale
    ).values_list("pk", flat=True):
        out["validated"] += each("validate", pk, lambda pk=pk: batch_validate(pk, at=at))
    for pk in Batch.objects.filter(
        status=Batch.Status.VALIDATING, validated_at__isnull=False, start_at__lte=at
    ).values_list("pk", flat=True):
        out["started"] += each("start", pk, lambda pk=pk: batch_start(pk, at=at))
    for pk in (
        Batch.objects.filter(status__in=ACTIVE)
        .filter(
            Q(next_advance_at__lte=stale)
            | Q(next_advance_at__isnull=True)
            | Q(expires_at__lte=at, status=Batch.Status.IN_PROGRESS)
        )
        .values_list("pk", flat=True)
    ):
        out["advanced"] += each(
            "advance", pk, lambda pk=pk: batch_advance(pk, at=at, force=True) or True
        )
    for pk in Batch.objects.filter(status=Batch.Status.FINALIZING).values_list("pk", flat=True):
        out["finalized"] += each("finalize", pk, lambda pk=pk: batch_finalize(pk, at=at))
    return out

"""Beat's safety net for batches: every step a lost message or a dead worker left
undone is taken again (each step is idempotent)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q
from django.utils import timezone

from routing.batches.finish import batch_finalize
from routing.batches.planning import ACTIVE, batch_start
from routing.batches.runner import batch_advance
from routing.batches.validation import batch_validate
from routing.models import Batch

STALE_ADVANCE = dt.timedelta(seconds=5)  # a step this late was lost: take it again


def batches_sweep(*, at: dt.datetime | None = None) -> dict[str, int]:
    """Beat's batch work: validate what a lost message left `validating`, start due
    batches, expire overdue ones (through their chain link), finalize finished ones, and
    restart a chain whose next link is late (its message died with a worker)."""
    at = at or timezone.now()
    out = {"validated": 0, "started": 0, "advanced": 0, "finalized": 0}
    stale = at - STALE_ADVANCE
    for pk in Batch.objects.filter(
        status=Batch.Status.VALIDATING, validated_at__isnull=True, created_at__lte=stale
    ).values_list("pk", flat=True):
        out["validated"] += batch_validate(pk, at=at) is not None
    for pk in Batch.objects.filter(
        status=Batch.Status.VALIDATING, validated_at__isnull=False, start_at__lte=at
    ).values_list("pk", flat=True):
        out["started"] += batch_start(pk, at=at) is not None
    for pk in (
        Batch.objects.filter(status__in=ACTIVE)
        .filter(
            Q(next_advance_at__lte=stale)
            | Q(next_advance_at__isnull=True)
            | Q(expires_at__lte=at, status=Batch.Status.IN_PROGRESS)
        )
        .values_list("pk", flat=True)
    ):
        batch_advance(pk, at=at, force=True)
        out["advanced"] += 1
    for pk in Batch.objects.filter(status=Batch.Status.FINALIZING).values_list("pk", flat=True):
        out["finalized"] += batch_finalize(pk, at=at) is not None
    return out

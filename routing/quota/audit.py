"""The ledger audit: every package's balance equals its ledger, no job was charged twice
or charged while cancelled, every succeeded job was settled, and every batch was charged
exactly its completed requests and holds nothing once ended. `manage.py ledger_check`
prints it."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from django.db.models import Count, Q, Sum

from routing.models import Batch, BatchRequest, Job, LedgerEntry, QuotaReservation
from routing.quota.ledger import ledger_mismatches
from routing.quota.packages import credits


def ledger_audit() -> dict:
    """The report, in the order it is printed; `ok` is False on any mismatch."""
    mismatches = ledger_mismatches()
    settled_twice = list(
        LedgerEntry.objects.filter(kind=LedgerEntry.Kind.SETTLE)
        .values("reservation_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("reservation_id", flat=True)
    )
    # A stream cancelled after delivering tokens is charged for them (ledger_check's
    # stream check compares the charge with what it delivered).
    charged_cancelled = list(
        Job.objects.filter(status=Job.Status.CANCELLED)
        .exclude(delivered_tokens__gt=0)
        .filter(Q(cost__gt=0) | Q(reservation__state=QuotaReservation.State.SETTLED))
        .values_list("pk", flat=True)
    )
    unsettled_done = list(
        Job.objects.filter(status=Job.Status.SUCCEEDED)
        .exclude(reservation__state=QuotaReservation.State.SETTLED)
        .values_list("pk", flat=True)
    )
    counts = dict(Job.objects.values_list("status").annotate(n=Count("id")))
    batches = batch_mismatches()
    return {
        "ok": not (mismatches or settled_twice or charged_cancelled or unsettled_done or batches),
        "batch_mismatches": batches,
        "balance_mismatches": mismatches,
        "settled_twice": settled_twice,
        "charged_while_cancelled": [str(x) for x in charged_cancelled],
        "succeeded_not_settled": [str(x) for x in unsettled_done],
        "jobs": counts,
        "settlements": LedgerEntry.objects.filter(kind=LedgerEntry.Kind.SETTLE).count(),
    }


def ledger_charged(packages: list[int] | None = None) -> dict[int, Decimal]:
    """What the ledger charged each package for work: its settle and draw rows'
    `delta_spent` (resets and retirements move balances, they charge nothing). Usage
    (routing.quota.usage) sums to exactly this per package and per account."""
    qs = LedgerEntry.objects.filter(kind__in=[LedgerEntry.Kind.SETTLE, LedgerEntry.Kind.DRAW])
    if packages is not None:
        qs = qs.filter(package_id__in=packages)
    return {
        pk: credits(spent or 0)
        for pk, spent in qs.values("package_id")
        .annotate(spent=Sum("delta_spent"))
        .values_list("package_id", "spent")
    }


def batch_mismatches() -> list[dict]:
    """Batches whose charge differs from their completed requests' costs or from the
    ledger's draws on their reservations, or that still hold credits once ended (a few
    grouped queries, whatever the number of batches)."""
    done = {
        r["batch_id"]: r
        for r in BatchRequest.objects.filter(status=BatchRequest.Status.COMPLETED)
        .values("batch_id")
        .annotate(n=Count("id"), cost=Sum("cost"))
    }
    # Batch reservations are referenced "batch:<batch id>:<model>:<tier>[...]".
    drawn: dict[str, Decimal] = defaultdict(Decimal)
    for ref, spent in (
        LedgerEntry.objects.filter(
            kind=LedgerEntry.Kind.DRAW, reservation__reference__startswith="batch:"
        )
        .values("reservation__reference")
        .annotate(spent=Sum("delta_spent"))
        .values_list("reservation__reference", "spent")
    ):
        drawn[ref.split(":")[1]] += Decimal(str(spent))
    held: dict[str, int] = defaultdict(int)
    for ref in QuotaReservation.objects.filter(
        reference__startswith="batch:", state=QuotaReservation.State.HELD
    ).values_list("reference", flat=True):
        held[ref.split(":")[1]] += 1
    bad = []
    for pk, cost, status, completed in Batch.objects.values_list(
        "pk", "cost", "status", "completed"
    ):
        row = done.get(pk, {"n": 0, "cost": 0})
        key = str(pk)
        cost, req_cost, draws = credits(cost), credits(row["cost"] or 0), credits(drawn[key])
        ended = status in Batch.TERMINAL
        if cost != req_cost or cost != draws or row["n"] != completed or (ended and held[key]):
            bad.append(
                {
                    "batch": key,
                    "cost": cost,
                    "completed_requests_cost": req_cost,
                    "drawn": draws,
                    "completed": completed,
                    "completed_requests": row["n"],
                    "held_after_end": held[key],
                }
            )
    return bad

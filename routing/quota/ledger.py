"""The ledger: reservations, settlement, release, partial draws and period resets.

Balances change only here, by conditional UPDATEs, each in the same transaction as its
ledger row; the database's CheckConstraints refuse a negative remaining balance even if
a bug slipped past the WHERE clause.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.db.models.functions import Round
from django.utils import timezone

from routing.models import Account, LedgerEntry, QuotaPackage, QuotaReservation
from routing.quota.packages import (
    ZERO,
    QuotaError,
    QuotaExhausted,
    account_packages,
    choose_package,
    credits,
    earliest_reset,
)
from routing.quota.periods import next_period_start, period_start_for


def _exact(expression):
    """Balance arithmetic at the ledger's precision. PostgreSQL's numeric is exact
    already; SQLite (the quick start) computes decimals in floating point, where
    62.1 - 48.9 - 13.2 is -3.6e-15 and would trip the non-negative CheckConstraint."""
    return Round(expression, 6)


def quota_reserve(*, package_id: int, amount, reference: str, note: str = "") -> QuotaReservation:
    """Hold `amount` credits on one package; idempotent per `reference`.

    One conditional UPDATE (`limit - spent - reserved >= amount`): concurrent callers
    on PostgreSQL queue on the row lock and each re-checks the condition, so the
    package never goes past its limit.
    """
    amount = credits(amount)
    if amount < 0:
        raise QuotaError("A reservation cannot be negative.")
    # No look-up first: a repeated reference fails on its unique index, the savepoint
    # undoes the hold, and the existing reservation is returned.
    try:
        with transaction.atomic():
            updated = QuotaPackage.objects.filter(
                pk=package_id, limit__gte=F("spent") + F("reserved") + amount
            ).update(reserved=_exact(F("reserved") + amount))
            if updated != 1:
                package = QuotaPackage.objects.filter(pk=package_id).first()
                raise QuotaExhausted(
                    f"Package {package.name if package else package_id} has not enough "
                    f"credits for {amount}.",
                    next_reset_at=package.next_reset_at if package else None,
                )
            reservation = QuotaReservation.objects.create(
                package_id=package_id, reference=reference, amount=amount
            )
            LedgerEntry.objects.create(
                package_id=package_id,
                reservation=reservation,
                kind=LedgerEntry.Kind.RESERVE,
                delta_reserved=amount,
                note=note[:200],
            )
            return reservation
    except IntegrityError:
        # A concurrent call with the same reference won: return its reservation.
        existing = QuotaReservation.objects.filter(reference=reference).first()
        if existing is None:
            raise
        return existing


def quota_reserve_for(
    *,
    account: Account | int,
    model_id: int,
    family_id: int,
    tier_id: int,
    amount,
    reference: str,
    at: dt.datetime | None = None,
    note: str = "",
    packages: list | None = None,
) -> QuotaReservation:
    """Reserve on the first package that can pay, in payment order (see choose_package).
    `packages`: the account's packages as the caller read them already (a quote, same
    request); the conditional UPDATE of `quota_reserve` is still the guard."""
    at = at or timezone.now()
    amount = credits(amount)
    covering = choose_package(
        account_packages(account) if packages is None else packages,
        model_id=model_id,
        family_id=family_id,
        tier_id=tier_id,
        cost=amount,
        at=at,
    ).covering
    for p in covering:
        if p.remaining < amount:
            continue
        try:
            return quota_reserve(package_id=p.id, amount=amount, reference=reference, note=note)
        except QuotaExhausted:
            continue  # spent by someone else since we read it: try the next one
    raise QuotaExhausted(
        "No quota package covering this work has enough credits."
        if covering
        else "No quota package covers this model and tier.",
        next_reset_at=earliest_reset(covering),
    )


def quota_settle(*, reference: str, actual, at: dt.datetime | None = None) -> QuotaReservation:
    """Turn a held reservation into spend. Charges the actual cost, at most what was
    reserved (a client is never charged above its quote). Idempotent: a second call
    changes nothing."""
    reservation = _close_reservation(
        reference=reference, state=QuotaReservation.State.SETTLED, actual=actual, at=at
    )
    if reservation is None:
        raise QuotaError(f"No reservation {reference!r} to settle.")
    return reservation


def quota_release(*, reference: str, at: dt.datetime | None = None) -> QuotaReservation | None:
    """Give held credits back (cancelled or failed work). Idempotent."""
    return _close_reservation(
        reference=reference, state=QuotaReservation.State.RELEASED, actual=ZERO, at=at
    )


_CLOSING_KIND = {
    QuotaReservation.State.SETTLED: LedgerEntry.Kind.SETTLE,
    QuotaReservation.State.RELEASED: LedgerEntry.Kind.RELEASE,
}


def _close_reservation(
    *, reference: str, state: str, actual, at: dt.datetime | None
) -> QuotaReservation | None:
    # Settle and release are one move: the hold leaves `reserved`, the charge (zero on
    # release) enters `spent`, one ledger row records both, under the reservation's lock.
    at = at or timezone.now()
    with transaction.atomic():
        reservation = (
            QuotaReservation.objects.select_for_update().filter(reference=reference).first()
        )
        if reservation is None or reservation.state != QuotaReservation.State.HELD:
            return reservation
        # What was drawn already (a batch's requests) stays spent; the rest of the hold
        # leaves `reserved`.
        held = reservation.amount - reservation.drawn
        charge = min(credits(actual), held)
        QuotaPackage.objects.filter(pk=reservation.package_id).update(
            reserved=_exact(F("reserved") - held), spent=_exact(F("spent") + charge)
        )
        reservation.state = state
        reservation.charged = reservation.drawn + charge
        reservation.closed_at = at
        reservation.save(update_fields=["state", "charged", "closed_at"])
        LedgerEntry.objects.create(
            package_id=reservation.package_id,
            reservation=reservation,
            kind=_CLOSING_KIND[state],
            delta_reserved=-held,
            delta_spent=charge,
        )
        return reservation


def quota_draw(*, reference: str, amount, note: str = "") -> Decimal:
    """Charge part of a held reservation now (a batch's requests, as they finish); the
    reservation stays held for the rest. Charges at most what is still held, and
    returns what it charged. The caller draws in the same transaction as the work it
    pays for, so a repeated call for the same work is prevented by the caller's own
    conditional write (the request's status), not here."""
    amount = credits(amount)
    if amount < 0:
        raise QuotaError("A charge cannot be negative.")
    with transaction.atomic():
        reservation = (
            QuotaReservation.objects.select_for_update().filter(reference=reference).first()
        )
        if reservation is None or reservation.state != QuotaReservation.State.HELD:
            raise QuotaError(f"No held reservation {reference!r} to charge.")
        charge = min(amount, reservation.amount - reservation.drawn)
        if charge <= 0:
            return ZERO
        QuotaPackage.objects.filter(pk=reservation.package_id).update(
            reserved=_exact(F("reserved") - charge), spent=_exact(F("spent") + charge)
        )
        QuotaReservation.objects.filter(pk=reservation.pk).update(drawn=_exact(F("drawn") + charge))
        LedgerEntry.objects.create(
            package_id=reservation.package_id,
            reservation=reservation,
            kind=LedgerEntry.Kind.DRAW,
            delta_reserved=-charge,
            delta_spent=charge,
            note=note[:200],
        )
        return charge


def quota_reset_due(*, at: dt.datetime | None = None) -> int:
    """Start the new period of every package whose reset is due. Run twice, resets once:
    each package is claimed by a conditional UPDATE on its `next_reset_at`."""
    at = at or timezone.now()
    done = 0
    due = QuotaPackage.objects.filter(next_reset_at__lte=at).values_list(
        "pk", "next_reset_at", "period"
    )
    for pk, due_at, period in due:
        # Catch up over missed periods: the new period is the one containing `at`.
        start = period_start_for(period, at)
        nxt = next_period_start(period, start)
        with transaction.atomic():
            package = (
                QuotaPackage.objects.select_for_update().filter(pk=pk, next_reset_at=due_at).first()
            )
            if package is None:
                continue  # another run got there first
            spent = package.spent
            QuotaPackage.objects.filter(pk=pk).update(
                spent=ZERO, period_start=start, next_reset_at=nxt
            )
            LedgerEntry.objects.create(
                package_id=pk,
                kind=LedgerEntry.Kind.RESET,
                delta_spent=-spent,
                note=f"period from {start.isoformat()}",
            )
            done += 1
    return done


def ledger_mismatches(packages: Iterable[int] | None = None) -> list[dict]:
    """Packages whose balance columns differ from the sum of their ledger (none, ever)."""
    qs = QuotaPackage.objects.all()
    if packages is not None:
        qs = qs.filter(pk__in=list(packages))
    sums = {
        row["package_id"]: row
        for row in LedgerEntry.objects.filter(package__in=qs)
        .values("package_id")
        .annotate(reserved=Sum("delta_reserved"), spent=Sum("delta_spent"))
    }
    bad = []
    for p in qs:
        row = sums.get(p.pk, {"reserved": ZERO, "spent": ZERO})
        # SQLite sums decimals in floating point: compare at the ledger's precision.
        reserved, spent = credits(row["reserved"] or ZERO), credits(row["spent"] or ZERO)
        if reserved != p.reserved or spent != p.spent:
            bad.append(
                {
                    "package": p.pk,
                    "reserved": p.reserved,
                    "ledger_reserved": row["reserved"],
                    "spent": p.spent,
                    "ledger_spent": row["spent"],
                }
            )
    return bad

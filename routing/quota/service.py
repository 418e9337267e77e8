"""Quota: which package pays, reservations, settlement, release, period resets.

One rule, one place: the router's choice of paying package (`choose_package`) and the
reservation that really takes the credits (`quota_reserve_for`) use the same ordering
and coverage rules. Balances change only here, by conditional UPDATEs, each in the same
transaction as its ledger row; the database's CheckConstraints refuse a negative
remaining balance even if a bug slipped past the WHERE clause.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.db.models.functions import Round
from django.db.models.signals import m2m_changed
from django.utils import timezone

from routing.core.sql import as_decimal, as_utc
from routing.models import Account, LedgerEntry, QuotaPackage, QuotaReservation

ZERO = Decimal(0)
CREDIT_QUANTUM = Decimal("0.000001")


class QuotaError(Exception):
    pass


class QuotaExhausted(QuotaError):
    """No package covering the work has enough remaining credits."""

    def __init__(self, message: str, next_reset_at: dt.datetime | None = None):
        super().__init__(message)
        self.next_reset_at = next_reset_at


def _exact(expression):
    """Balance arithmetic at the ledger's precision. PostgreSQL's numeric is exact
    already; SQLite (the quick start) computes decimals in floating point, where
    62.1 - 48.9 - 13.2 is -3.6e-15 and would trip the non-negative CheckConstraint."""
    return Round(expression, 6)


def credits(value) -> Decimal:
    return Decimal(str(value)).quantize(CREDIT_QUANTUM)


# --- Periods ---------------------------------------------------------------------------


def period_start_for(period: str, at: dt.datetime) -> dt.datetime:
    """The calendar period (UTC) containing `at`: day, ISO week (Monday), month."""
    at = at.astimezone(dt.UTC)
    day = dt.datetime(at.year, at.month, at.day, tzinfo=dt.UTC)
    if period == QuotaPackage.Period.WEEK:
        return day - dt.timedelta(days=day.weekday())
    if period == QuotaPackage.Period.MONTH:
        return day.replace(day=1)
    return day


def first_period(period: str, *, at: dt.datetime) -> tuple[dt.datetime, dt.datetime | None]:
    """A new package's first period (start, next reset): the calendar period containing
    `at`, or from `at` on for a one-off package (which never resets)."""
    start = period_start_for(period, at) if period != QuotaPackage.Period.ONCE else at
    return start, next_period_start(period, start)


def next_period_start(period: str, start: dt.datetime) -> dt.datetime | None:
    if period == QuotaPackage.Period.ONCE:
        return None
    if period == QuotaPackage.Period.DAY:
        return start + dt.timedelta(days=1)
    if period == QuotaPackage.Period.WEEK:
        return start + dt.timedelta(days=7)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.replace(year=year, month=month, day=1)


# --- Read model used by the router ----------------------------------------------------


@dataclass(frozen=True)
class PackageView:
    """What the router needs to know of a package, loaded once per request."""

    id: int
    name: str
    scope: str
    family_id: int | None
    model_ids: frozenset[int]
    tier_ids: frozenset[int]
    remaining: Decimal
    order: int
    independent: bool
    valid_from: dt.datetime | None
    valid_until: dt.datetime | None
    next_reset_at: dt.datetime | None

    def covers(self, *, model_id: int, family_id: int, tier_id: int, at: dt.datetime) -> bool:
        if self.valid_from is not None and at < self.valid_from:
            return False
        if self.valid_until is not None and at >= self.valid_until:
            return False
        if self.tier_ids and tier_id not in self.tier_ids:
            return False
        if self.scope == QuotaPackage.Scope.FAMILY:
            return family_id == self.family_id
        if self.scope == QuotaPackage.Scope.MODELS:
            return model_id in self.model_ids
        return True


# A package's scope (its models and tiers) changes only in the admin; its balance
# changes all the time. Balances are read fresh on every call (one query); scopes are
# kept per process for a few seconds and dropped on a local change.
SCOPE_TTL_SECONDS = 5.0
_scopes: dict[int, tuple[float, frozenset[int], frozenset[int]]] = {}


def clear_scopes(**_kwargs) -> None:
    _scopes.clear()


def _package_scopes(ids: list[int]) -> dict[int, tuple[frozenset[int], frozenset[int]]]:
    now = time.monotonic()
    missing = [i for i in ids if i not in _scopes or now - _scopes[i][0] >= SCOPE_TTL_SECONDS]
    if missing:
        models: dict[int, set[int]] = {i: set() for i in missing}
        tiers: dict[int, set[int]] = {i: set() for i in missing}
        through_m = QuotaPackage.model_versions.through.objects.filter(quotapackage_id__in=missing)
        for pid, mid in through_m.values_list("quotapackage_id", "modelversion_id"):
            models[pid].add(mid)
        through_t = QuotaPackage.tiers.through.objects.filter(quotapackage_id__in=missing)
        for pid, tid in through_t.values_list("quotapackage_id", "tier_id"):
            tiers[pid].add(tid)
        for i in missing:
            _scopes[i] = (now, frozenset(models[i]), frozenset(tiers[i]))
    return {i: _scopes[i][1:] for i in ids}


# Read on every quote: a hand-written query (the ORM's query building cost more than
# the query). Balances come back as Decimals on every backend through the converters
# below.
_PACKAGES_SQL = (
    'SELECT id, name, scope, family_id, "limit", spent, reserved, "order", independent, '
    f"valid_from, valid_until, next_reset_at FROM {QuotaPackage._meta.db_table} "
    "WHERE account_id = %s"
)


def account_packages(account: Account | int) -> list[PackageView]:
    account_id = account if isinstance(account, int) else account.pk
    with connection.cursor() as cur:
        cur.execute(_PACKAGES_SQL, [account_id])
        rows = cur.fetchall()
    scopes = _package_scopes([r[0] for r in rows])
    return [
        PackageView(
            id=pk,
            name=name,
            scope=scope,
            family_id=family_id,
            model_ids=scopes[pk][0],
            tier_ids=scopes[pk][1],
            remaining=as_decimal(limit) - as_decimal(spent) - as_decimal(reserved),
            order=order,
            independent=bool(independent),
            valid_from=as_utc(valid_from),
            valid_until=as_utc(valid_until),
            next_reset_at=as_utc(next_reset_at),
        )
        for (
            pk,
            name,
            scope,
            family_id,
            limit,
            spent,
            reserved,
            order,
            independent,
            valid_from,
            valid_until,
            next_reset_at,
        ) in rows
    ]


m2m_changed.connect(
    clear_scopes, sender=QuotaPackage.model_versions.through, dispatch_uid="scope-m"
)
m2m_changed.connect(clear_scopes, sender=QuotaPackage.tiers.through, dispatch_uid="scope-t")


def payment_order(packages: Iterable[PackageView]) -> list[PackageView]:
    """Main packages by `order` first, then the independent spare tanks."""
    return sorted(packages, key=lambda p: (p.independent, p.order, p.id))


@dataclass(frozen=True)
class PackageChoice:
    package: PackageView | None
    reason: str
    covering: tuple[PackageView, ...]


def choose_package(
    packages: Sequence[PackageView],
    *,
    model_id: int,
    family_id: int,
    tier_id: int,
    cost: Decimal,
    at: dt.datetime,
    presorted: bool = False,
) -> PackageChoice:
    """The package that would pay: the first main package in order that covers the work
    and has enough remaining; a spare tank only when no main package can pay.
    `presorted`: the packages are already in `payment_order` (the router sorts once)."""
    ordered = packages if presorted else payment_order(packages)
    covering = tuple(
        p
        for p in ordered
        if p.covers(model_id=model_id, family_id=family_id, tier_id=tier_id, at=at)
    )
    if not covering:
        return PackageChoice(None, "no quota package covers this model and tier", covering)
    for p in covering:
        if p.remaining >= cost:
            return PackageChoice(p, f"paid from {p.name}", covering)
    return PackageChoice(
        None,
        f"not enough credits: needs {cost:.4f}, most remaining {max(p.remaining for p in covering):.4f}",
        covering,
    )


def earliest_reset(packages: Iterable[PackageView]) -> dt.datetime | None:
    resets = [p.next_reset_at for p in packages if p.next_reset_at is not None]
    return min(resets) if resets else None


# --- Writes ------------------------------------------------------------------------------


@transaction.atomic
def package_create(
    *,
    account: Account,
    name: str,
    limit: Decimal | float | str,
    period: str = QuotaPackage.Period.MONTH,
    scope: str = QuotaPackage.Scope.ALL,
    family=None,
    model_versions: Iterable = (),
    tiers: Iterable = (),
    order: int = 100,
    independent: bool = False,
    valid_from: dt.datetime | None = None,
    valid_until: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> QuotaPackage:
    start, next_reset_at = first_period(period, at=now or timezone.now())
    package = QuotaPackage.objects.create(
        account=account,
        name=name,
        limit=credits(limit),
        period=period,
        scope=scope,
        family=family,
        order=order,
        independent=independent,
        valid_from=valid_from,
        valid_until=valid_until,
        period_start=start,
        next_reset_at=next_reset_at,
    )
    package.model_versions.set(model_versions)
    package.tiers.set(tiers)
    return package


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
) -> QuotaReservation:
    """Reserve on the first package that can pay, in payment order (see choose_package)."""
    at = at or timezone.now()
    amount = credits(amount)
    covering = choose_package(
        account_packages(account),
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


def quota_settle(*, reference: str, actual, now: dt.datetime | None = None) -> QuotaReservation:
    """Turn a held reservation into spend. Charges the actual cost, at most what was
    reserved (a client is never charged above its quote). Idempotent: a second call
    changes nothing."""
    reservation = _close_reservation(
        reference=reference, state=QuotaReservation.State.SETTLED, actual=actual, now=now
    )
    if reservation is None:
        raise QuotaError(f"No reservation {reference!r} to settle.")
    return reservation


def quota_release(*, reference: str, now: dt.datetime | None = None) -> QuotaReservation | None:
    """Give held credits back (cancelled or failed work). Idempotent."""
    return _close_reservation(
        reference=reference, state=QuotaReservation.State.RELEASED, actual=ZERO, now=now
    )


_CLOSING_KIND = {
    QuotaReservation.State.SETTLED: LedgerEntry.Kind.SETTLE,
    QuotaReservation.State.RELEASED: LedgerEntry.Kind.RELEASE,
}


def _close_reservation(
    *, reference: str, state: str, actual, now: dt.datetime | None
) -> QuotaReservation | None:
    # Settle and release are one move: the hold leaves `reserved`, the charge (zero on
    # release) enters `spent`, one ledger row records both, under the reservation's lock.
    now = now or timezone.now()
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
        reservation.closed_at = now
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


def quota_reset_due(*, now: dt.datetime | None = None) -> int:
    """Start the new period of every package whose reset is due. Run twice, resets once:
    each package is claimed by a conditional UPDATE on its `next_reset_at`."""
    now = now or timezone.now()
    done = 0
    due = QuotaPackage.objects.filter(next_reset_at__lte=now).values_list(
        "pk", "next_reset_at", "period"
    )
    for pk, due_at, period in due:
        # Catch up over missed periods: the new period is the one containing `now`.
        start = period_start_for(period, now)
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

"""The ledger: reservations, settlement, release, partial draws and period resets.

Balances change only here, by conditional UPDATEs, each in the same transaction as its
ledger row; the database's CheckConstraints refuse a negative remaining balance even if
a bug slipped past the WHERE clause.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.db.models.functions import Round
from django.utils import timezone

from routing.models import Account, LedgerEntry, QuotaPackage, QuotaReservation
from routing.quota.alerts import package_alerts_check, thresholds_crossed
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


def quota_reserve(
    *, package_id: int, amount, reference: str, note: str = "", along: Alongside | None = None
) -> QuotaReservation:
    """Hold `amount` credits on one package; idempotent per `reference`.

    One conditional UPDATE (`limit - spent - reserved >= amount`): concurrent callers
    on PostgreSQL queue on the row lock and each re-checks the condition, so the
    package never goes past its limit. `along` (PostgreSQL): writes made in the same
    statement from the reservation it inserts (`Alongside`; elsewhere not run: its
    `done` stays False and the caller writes them itself).
    """
    amount = credits(amount)
    if amount < 0:
        raise QuotaError("A reservation cannot be negative.")
    if connection.vendor == "postgresql":
        reservation = _reserve_pg(package_id, amount, reference, note, along)
    else:
        reservation = _reserve_orm(package_id, amount, reference, note)
    if reservation is None:
        package = QuotaPackage.objects.filter(pk=package_id).first()
        raise QuotaExhausted(
            f"Package {package.name if package else package_id} has not enough "
            f"credits for {amount}.",
            next_reset_at=package.next_reset_at if package else None,
        )
    return reservation


# The hold, its reservation and its ledger row as one statement (PostgreSQL): the
# conditional UPDATE is the over-spend guard (it takes the package's row lock and
# re-checks the condition after waiting), the reservation and the ledger row are
# inserted only from the row it updated. A repeated reference inserts nothing
# (ON CONFLICT waits for a concurrent insert of it to end): the caller then gives the
# hold back under the same lock and returns the existing reservation.
_PKG = QuotaPackage._meta.db_table
_RES = QuotaReservation._meta.db_table
_LEDGER = LedgerEntry._meta.db_table


@dataclass
class Alongside:
    """Writes that ride in a ledger statement's own round trip (PostgreSQL): `ctes`
    (SQL, each `name AS (...)`, comma-led) run after the reservation's (they may select
    FROM `res`: the reservation inserted, one row, none when nothing was held) or after
    the closing's (FROM `r`: the reservation closed); `gate`: a condition the closing
    needs besides the reservation being held; `select`: output expressions (with
    `joins`: `LEFT JOIN x ON true` items) read back into `row`. `params` are merged
    into the statement's own. The statement is atomic: the caller's transaction rolls
    back the whole of it when it raises afterwards."""

    ctes: str = ""
    before: str = ""  # closing only: CTEs before it (the gate may read them)
    select: str = ""
    joins: str = ""
    params: dict = field(default_factory=dict)
    gate: str = ""
    row: tuple = ()
    done: bool = False  # the reservation (closing) was written, and with it `ctes`


def _reserve_sql(along: Alongside | None) -> str:
    extra = f", {along.select}" if along is not None and along.select else ""
    return f"""
WITH hold AS (
    UPDATE {_PKG} SET reserved = ROUND(reserved + %(amount)s::numeric, 6)
    WHERE id = %(package)s AND "limit" >= spent + reserved + %(amount)s::numeric
    RETURNING id
), res AS (
    INSERT INTO {_RES} (package_id, reference, amount, drawn, charged, state, created_at,
        closed_at)
    SELECT id, %(reference)s, %(amount)s::numeric, 0, NULL, %(held)s, %(at)s::timestamptz, NULL
    FROM hold
    ON CONFLICT (reference) DO NOTHING
    RETURNING id, package_id
), entry AS (
    INSERT INTO {_LEDGER} (package_id, reservation_id, kind, delta_reserved, delta_spent,
        note, created_at)
    SELECT %(package)s, id, %(kind)s, %(amount)s::numeric, 0, %(note)s, %(at)s::timestamptz
    FROM res
){along.ctes if along is not None else ""}
SELECT (SELECT count(*) FROM hold), (SELECT id FROM res){extra}
FROM (SELECT 1) AS one {along.joins if along is not None else ""}
"""


_RESERVE_SQL = _reserve_sql(None)


def _reserve_pg(
    package_id: int, amount, reference: str, note: str, along: Alongside | None = None
) -> QuotaReservation | None:
    at = timezone.now()
    sql = _RESERVE_SQL if along is None else _reserve_sql(along)
    params = {
        "package": package_id,
        "amount": amount,
        "reference": reference,
        "held": QuotaReservation.State.HELD,
        "kind": LedgerEntry.Kind.RESERVE,
        "note": note[:200],
        "at": at,
    }
    if along is not None:
        params.update(along.params)
    # No savepoint (its two statements) inside a caller's transaction: nothing here is
    # expected to fail but the constraints, which fail the caller's transaction anyway.
    with transaction.atomic(savepoint=False), connection.cursor() as cur:
        cur.execute(sql, params)
        held, reservation_id, *extra = cur.fetchone()
        if along is not None:
            along.row, along.done = tuple(extra), bool(held) and reservation_id is not None
        if not held:
            return None
        if reservation_id is None:  # the reference exists: undo the hold, return it
            QuotaPackage.objects.filter(pk=package_id).update(
                reserved=_exact(F("reserved") - amount)
            )
            return QuotaReservation.objects.get(reference=reference)
    return QuotaReservation.from_db(
        connection.alias,
        ["id", "package_id", "reference", "amount", "drawn", "charged", "state", "created_at"]
        + ["closed_at"],
        [reservation_id, package_id, reference, amount, ZERO, None, "held", at, None],
    )


def _reserve_orm(package_id: int, amount, reference: str, note: str) -> QuotaReservation | None:
    # No look-up first: a repeated reference fails on its unique index, the savepoint
    # undoes the hold, and the existing reservation is returned.
    try:
        with transaction.atomic():
            updated = QuotaPackage.objects.filter(
                pk=package_id, limit__gte=F("spent") + F("reserved") + amount
            ).update(reserved=_exact(F("reserved") + amount))
            if updated != 1:
                return None
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
    along: Alongside | None = None,
) -> QuotaReservation:
    """Reserve on the first package that can pay, in payment order (see choose_package).
    `packages`: the account's packages as the caller read them already (a quote, same
    request); the conditional UPDATE of `quota_reserve` is still the guard. `along`:
    see quota_reserve (written with the reservation that succeeds)."""
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
            return quota_reserve(
                package_id=p.id, amount=amount, reference=reference, note=note, along=along
            )
        except QuotaExhausted:
            continue  # spent by someone else since we read it: try the next one
    raise QuotaExhausted(
        "No quota package covering this work has enough credits."
        if covering
        else "No quota package covers this model and tier.",
        next_reset_at=earliest_reset(covering),
    )


def quota_settle(
    *,
    reference: str | None = None,
    actual,
    at: dt.datetime | None = None,
    reservation_id: int | None = None,
) -> QuotaReservation:
    """Turn a held reservation (by `reference` or `reservation_id`) into spend. Charges
    the actual cost, at most what was reserved (a client is never charged above its
    quote). Idempotent: a second call changes nothing."""
    reservation = _close_reservation(
        reference=reference,
        reservation_id=reservation_id,
        state=QuotaReservation.State.SETTLED,
        actual=actual,
        at=at,
    )
    if reservation is None:
        raise QuotaError(f"No reservation {reference or reservation_id!r} to settle.")
    return reservation


def quota_release(
    *,
    reference: str | None = None,
    at: dt.datetime | None = None,
    reservation_id: int | None = None,
) -> QuotaReservation | None:
    """Give held credits back (cancelled or failed work). Idempotent."""
    return _close_reservation(
        reference=reference,
        reservation_id=reservation_id,
        state=QuotaReservation.State.RELEASED,
        actual=ZERO,
        at=at,
    )


_CLOSING_KIND = {
    QuotaReservation.State.SETTLED: LedgerEntry.Kind.SETTLE,
    QuotaReservation.State.RELEASED: LedgerEntry.Kind.RELEASE,
}


def _close_reservation(
    *,
    reference: str | None,
    reservation_id: int | None = None,
    state: str,
    actual,
    at: dt.datetime | None,
) -> QuotaReservation | None:
    # Settle and release are one move: the hold leaves `reserved`, the charge (zero on
    # release) enters `spent`, one ledger row records both, under the reservation's lock.
    if (reference is None) == (reservation_id is None):
        raise QuotaError("Name the reservation by reference or by id.")
    at = at or timezone.now()
    if connection.vendor == "postgresql":
        return _close_pg(reference, reservation_id, state, credits(actual), at)
    with transaction.atomic():
        by = {"reference": reference} if reference is not None else {"pk": reservation_id}
        reservation = QuotaReservation.objects.select_for_update().filter(**by).first()
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
        if charge > 0:
            package_alerts_check(reservation.package_id, at=at)
        return reservation


# Closing as one statement (PostgreSQL): the reservation is read once, by the UPDATE
# that closes it only while it is held (it takes the row lock and re-checks `state`
# after waiting, so a concurrent settle or release closes it once); the package and the
# ledger row are written from the row it returns. What was drawn already (a batch's
# requests) stays spent; the rest of the hold leaves `reserved`.
_RES_COLUMNS = ["id", "package_id", "reference", "amount", "drawn", "charged", "state"]
_RES_COLUMNS += ["created_at", "closed_at"]


def _close_sql(where: str, along: Alongside | None = None) -> str:
    a = along or Alongside()
    before = f"{a.before}, " if a.before else ""
    gate = f" AND ({a.gate})" if a.gate else ""
    extra = f", {a.select}" if a.select else ""
    return f"""
WITH {before}r AS (
    UPDATE {_RES} SET state = %(state)s,
        charged = drawn + LEAST(%(actual)s::numeric, amount - drawn),
        closed_at = %(at)s::timestamptz
    WHERE {where} AND state = %(held)s{gate}
    RETURNING {", ".join(_RES_COLUMNS)}
), p AS (
    UPDATE {_PKG} AS q SET reserved = ROUND(q.reserved - (r.amount - r.drawn), 6),
        spent = ROUND(q.spent + (r.charged - r.drawn), 6)
    FROM r WHERE q.id = r.package_id
    RETURNING q.spent - (r.charged - r.drawn) AS spent_before, q.spent AS spent_after,
        q."limit" AS spend_limit, q.alert_thresholds
), entry AS (
    INSERT INTO {_LEDGER} (package_id, reservation_id, kind, delta_reserved, delta_spent,
        note, created_at)
    SELECT package_id, id, %(kind)s, -(amount - drawn), charged - drawn, '', %(now)s::timestamptz
    FROM r
){a.ctes}
SELECT {", ".join("r." + c for c in _RES_COLUMNS)}, p.spent_before, p.spent_after,
    p.spend_limit, p.alert_thresholds{extra}
FROM (SELECT 1) AS one LEFT JOIN r ON true LEFT JOIN p ON true {a.joins}
"""


_CLOSE_BY = {
    "reference": _close_sql("reference = %(key)s"),
    "id": _close_sql("id = %(key)s"),
}


def _close_pg(
    reference, reservation_id, state, actual, at, along: Alongside | None = None
) -> QuotaReservation | None:
    by = "reference" if reference is not None else "id"
    sql = _CLOSE_BY[by] if along is None else _close_sql(f"{by} = %(key)s", along)
    params = {
        "key": reference if reference is not None else reservation_id,
        "state": state,
        "actual": actual,
        "at": at,
        "held": QuotaReservation.State.HELD,
        "kind": _CLOSING_KIND[state],
        "now": timezone.now(),
    }
    if along is not None:
        params.update(along.params)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    n = len(_RES_COLUMNS)
    if along is not None:
        along.row, along.done = tuple(row[n + 4 :]), row[0] is not None
    if row[0] is not None:
        reservation = QuotaReservation.from_db(connection.alias, _RES_COLUMNS, row[:n])
        # Budget alerts, only when this settlement took the spend over a threshold (the
        # spend before and after it, read under the package's row lock).
        if thresholds_crossed(*row[n : n + 4]):
            package_alerts_check(reservation.package_id, at=at)
        return reservation
    if along is not None:
        return None  # not closed: the caller reads what it needs
    # Not held (closed already: nothing to do) or not there.
    by = {"reference": reference} if reference is not None else {"pk": reservation_id}
    return QuotaReservation.objects.filter(**by).first()


def quota_settle_along(
    *, reservation_id: int, actual, at: dt.datetime, along: Alongside
) -> QuotaReservation | None:
    """Settle a held reservation with `along`'s writes in the same statement
    (PostgreSQL; the caller's transaction): its `before` CTEs, its `gate` (nothing is
    settled unless it holds), its `ctes` after the closing (FROM `r`, the reservation
    closed, e.g. its `charged`). None, `along.done` False, when nothing was settled
    (not held, or the gate refused): `along.row` says which."""
    return _close_pg(
        None, reservation_id, QuotaReservation.State.SETTLED, credits(actual), at, along
    )


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
        package_alerts_check(reservation.package_id)
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

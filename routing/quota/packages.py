"""Quota packages: credits arithmetic, the read model the router uses (which package
would pay), and creating a package.

One rule, one place: the router's choice of paying package (`choose_package`) and the
reservation that really takes the credits (`routing.quota.ledger.quota_reserve_for`)
use the same ordering and coverage rules.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.signals import m2m_changed
from django.utils import timezone

from routing.core import shared
from routing.core.shared import SharedMemo
from routing.core.sql import as_decimal, as_utc
from routing.models import Account, QuotaPackage
from routing.quota.periods import first_period

ZERO = Decimal(0)
CREDIT_QUANTUM = Decimal("0.000001")


class QuotaError(Exception):
    pass


class QuotaExhausted(QuotaError):
    """No package covering the work has enough remaining credits."""

    def __init__(self, message: str, next_reset_at: dt.datetime | None = None):
        super().__init__(message)
        self.next_reset_at = next_reset_at


def credits(value) -> Decimal:
    return Decimal(str(value)).quantize(CREDIT_QUANTUM)


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
    # The package's own rate limits (None: none), read with the balance so that
    # accepting work needs no second read of the package (routing.quota.ratelimits).
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

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
# kept per process while the shared generation "package-scopes" holds
# (routing.core.shared): a change of a package's models or tiers bumps it, so every
# replica reads the new scope on its next request (nothing kept without the cache).
SCOPES = "package-scopes"
MEMO = SharedMemo(SCOPES).register()  # package id -> (model ids, tier ids)


def clear_scopes(**_kwargs) -> None:
    """Drop this process's scopes and every other process's (a new generation)."""
    shared.clear_memos(SCOPES)


def connect_receivers() -> None:
    """A change of a package's models or tiers drops the scopes everywhere
    (RoutingConfig.ready)."""
    m2m_changed.connect(
        clear_scopes, sender=QuotaPackage.model_versions.through, dispatch_uid="scope-m"
    )
    m2m_changed.connect(clear_scopes, sender=QuotaPackage.tiers.through, dispatch_uid="scope-t")


def _package_scopes(ids: list[int]) -> dict[int, tuple[frozenset[int], frozenset[int]]]:
    now = time.monotonic()
    token = MEMO.sync(now)  # before the rows: a later bump reloads
    kept = {i: MEMO.get(i, now) for i in ids}
    missing = [i for i, scope in kept.items() if scope is None]
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
            kept[i] = (frozenset(models[i]), frozenset(tiers[i]))
            MEMO.put(i, kept[i], now, token)
    return kept


# Read on every quote: a hand-written query (the ORM's query building cost more than
# the query). Balances come back as Decimals on every backend through the converters
# below.
_PACKAGES_SQL = (
    'SELECT id, name, scope, family_id, "limit", spent, reserved, "order", independent, '
    "valid_from, valid_until, next_reset_at, requests_per_minute, tokens_per_minute "
    f"FROM {QuotaPackage._meta.db_table} "
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
            requests_per_minute=rpm,
            tokens_per_minute=tpm,
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
            rpm,
            tpm,
        ) in rows
    ]


def tied_packages(model) -> QuerySet[QuotaPackage]:
    """Packages tied to a model: scope "models" naming it (what its retirement touches)."""
    return QuotaPackage.objects.filter(scope=QuotaPackage.Scope.MODELS, model_versions=model)


def tied_pairs() -> set[tuple[int, int]]:
    """Every (package id, model id) a package is tied by: `tied_packages` for all models."""
    through = QuotaPackage.model_versions.through.objects.filter(
        quotapackage__scope=QuotaPackage.Scope.MODELS
    )
    return set(through.values_list("quotapackage_id", "modelversion_id"))


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
    at: dt.datetime | None = None,
) -> QuotaPackage:
    start, next_reset_at = first_period(period, at=at or timezone.now())
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

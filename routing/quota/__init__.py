"""Quota: packages (which one pays), periods, and the ledger (reserve, settle, release,
draw, reset). The package's public functions are re-exported here, so callers write
`from routing import quota` and `quota.quota_reserve_for(...)`."""

from routing.quota.ledger import (
    ledger_mismatches,
    quota_draw,
    quota_release,
    quota_reserve,
    quota_reserve_for,
    quota_reset_due,
    quota_settle,
)
from routing.quota.packages import (
    CREDIT_QUANTUM,
    ZERO,
    PackageChoice,
    PackageView,
    QuotaError,
    QuotaExhausted,
    account_packages,
    choose_package,
    clear_scopes,
    credits,
    earliest_reset,
    package_create,
    payment_order,
    tied_packages,
    tied_pairs,
)
from routing.quota.periods import first_period, next_period_start, period_start_for
from routing.quota.ratelimits import RateLimited

__all__ = [
    "CREDIT_QUANTUM",
    "ZERO",
    "PackageChoice",
    "PackageView",
    "QuotaError",
    "QuotaExhausted",
    "RateLimited",
    "account_packages",
    "choose_package",
    "clear_scopes",
    "credits",
    "earliest_reset",
    "first_period",
    "ledger_mismatches",
    "next_period_start",
    "package_create",
    "payment_order",
    "period_start_for",
    "quota_draw",
    "quota_release",
    "quota_reserve",
    "quota_reserve_for",
    "quota_reset_due",
    "quota_settle",
    "tied_packages",
    "tied_pairs",
]

"""What a key may do (issue 27): its scopes, checked where the work is asked for.

- `read_only`: only GET, HEAD and OPTIONS;
- `allow_batches`: may create batches;
- `allowed_models`: the model names (ids or aliases, as sent) it may ask for; empty: all;
- `allowed_tiers`: the tiers it may name, and the only ones the router may choose among
  when a request lets it choose (routing.router.quotes.quote_build); empty: all;
- `fallbacks`: models tried in order after the requested one when a request names no
  `models` list of its own (routing.jobs.interactive); at most MAX_FALLBACKS, each one
  the key may use and the catalog knows (`fallbacks_problem`, checked at save);
- `role`: an admin key may manage the account's keys (routing.api.keys) and sees the
  whole account's usage (any key's); a member key sees its own usage only
  (`usage_keys`);
- `spend_limit` per `spend_period` (UTC calendar day, ISO week, month): the credits
  its jobs may take (charged, or reserved while they run), checked when one is
  accepted (requests accepted at the same instant may pass it together, by their own
  cost at most);
- `requests_per_minute` / `tokens_per_minute`: counted with the account's and the
  package's for each accepted job or completion (routing.quota.ratelimits).

A refusal is `KeyNotAllowed` (403, its reason in the message and `code`).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import Case, DecimalField, F, Sum, Value, When

from catalog.lifecycle import resolve_model_reference
from routing.models import ApiKey, Job
from routing.quota.alerts import key_alerts_record
from routing.quota.periods import next_period_start, period_start_for

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class KeyNotAllowed(Exception):
    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def check_method(key: ApiKey, method: str) -> None:
    if key.read_only and method.upper() not in SAFE_METHODS:
        raise KeyNotAllowed(
            f"This API key ({key.name}) is read-only: {method.upper()} is not allowed.",
            "key-read-only",
        )


MAX_FALLBACKS = 5


def model_allowed(key: ApiKey, model: str) -> bool:
    return name_allowed(key.allowed_models, model)


def name_allowed(allowed_models, model: str) -> bool:
    """Whether an allow-list of model names (empty: all) lets `model` be asked for."""
    return not allowed_models or model.strip().lower() in {m.lower() for m in allowed_models}


def fallbacks_problem(allowed_models, fallbacks) -> str | None:
    """Why a key may not carry these fallbacks (None: it may): at most MAX_FALLBACKS,
    no repeats, each one its own `allowed_models` lets it use and the catalog knows
    (a slug or a family alias)."""
    if len(fallbacks) > MAX_FALLBACKS:
        return f"At most {MAX_FALLBACKS} fallbacks."
    seen = set()
    for name in fallbacks:
        if name.lower() in seen:
            return f"{name[:80]!r} is listed twice."
        seen.add(name.lower())
        if not name_allowed(allowed_models, name):
            return f"{name[:80]!r} is not among the key's models ({', '.join(allowed_models)})."
        if resolve_model_reference(name) is None:
            return f"{name[:80]!r} is not a model of the catalog."
    return None


def check_model(key: ApiKey, model: str) -> None:
    if not model_allowed(key, model):
        raise KeyNotAllowed(
            f"This API key ({key.name}) may not use model {model[:80]!r}; it may use "
            f"{', '.join(key.allowed_models)}.",
            "key-model-not-allowed",
        )


def check_tier(key: ApiKey, tier: str | None) -> None:
    allowed = key.allowed_tiers or []
    if tier is not None and allowed and tier not in allowed:
        raise KeyNotAllowed(
            f"This API key ({key.name}) may not use tier {tier}; it may use {', '.join(allowed)}.",
            "key-tier-not-allowed",
        )


def check_batches(key: ApiKey) -> None:
    if not key.allow_batches:
        raise KeyNotAllowed(
            f"This API key ({key.name}) may not create batches.", "key-batches-not-allowed"
        )


def check_manage_keys(key: ApiKey) -> None:
    if key.role != ApiKey.Role.ADMIN:
        raise KeyNotAllowed(
            f"This API key ({key.name}) may not manage keys: that takes an admin key.",
            "key-not-admin",
        )


def usage_keys(key: ApiKey, wanted: list[int] | None) -> list[int] | None:
    """The keys whose usage `key` may read, narrowed to `wanted` (None: every key of
    the account). An admin key: the whole account; a member key: its own only (asking
    for another key's is KeyNotAllowed)."""
    if key.role == ApiKey.Role.ADMIN:
        return wanted
    if wanted is not None and set(wanted) - {key.pk}:
        raise KeyNotAllowed(
            f"This API key ({key.name}) may read its own usage only: another key's "
            "takes an admin key.",
            "key-not-admin",
        )
    return [key.pk]


def key_spent(key_id: int, since: dt.datetime) -> Decimal:
    """Credits the key's jobs since `since` took: charged, or reserved while active."""
    taken = Case(
        When(cost__isnull=False, then=F("cost")),
        When(status__in=Job.ACTIVE, then=F("predicted_cost")),
        default=Value(Decimal(0)),
        output_field=DecimalField(max_digits=18, decimal_places=6),
    )
    total = Job.objects.filter(api_key_id=key_id, created_at__gte=since).aggregate(n=Sum(taken))
    return total["n"] or Decimal(0)


def check_spend(key: ApiKey | None, amount: Decimal, at: dt.datetime) -> None:
    """Refuse work that would take the key past its spending cap this period."""
    if key is None or key.spend_limit is None:
        return
    start = period_start_for(key.spend_period, at)
    spent = key_spent(key.pk, start)
    if spent + amount > key.spend_limit:
        raise KeyNotAllowed(
            f"This API key ({key.name}) has a cap of {key.spend_limit:.2f} credits per "
            f"{key.spend_period}; {spent:.2f} spent, this request needs {amount:.4f}.",
            "key-spend-limit",
        )


def key_alerts_check(key: ApiKey, at: dt.datetime) -> None:
    """Budget alerts of a key with a cap (routing.quota.alerts): the thresholds its
    spend this period (as its cap counts it) has reached, each told once. Run after a
    job it sent is accepted, on commit (so the last of concurrent acceptances sees them
    all)."""
    if key.spend_limit is None:
        return
    start = period_start_for(key.spend_period, at)
    key_alerts_record(
        key=key,
        spent=key_spent(key.pk, start),
        period_start=start,
        period_end=next_period_start(key.spend_period, start),
        at=at,
    )

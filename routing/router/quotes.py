"""Quotes: the router's answer for an account, with lifecycle and quota applied.

Used by POST /api/v1/quotes and, with a reservation added, by the jobs API.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from catalog import lifecycle
from routing.accounts import scopes
from routing.models import Account, ApiKey
from routing.quota import account_packages
from routing.router.resolve import ModelNotServing, Resolved, auto_candidates, resolve_for_routing
from routing.router.route import RouteDecision, RouteRequest, route
from routing.router.snapshot import model_option, pool_state

AUTO = "auto"


class AutoNeedsTask(ValueError):
    pass


@dataclass
class Quote:
    request: RouteRequest
    requested_model: str
    resolved: Resolved | None  # None for model "auto"
    decision: RouteDecision
    at: dt.datetime
    packages: list | None = None  # the account's packages as the quote read them


def route_request_from(data: dict) -> RouteRequest:
    """The router's request from validated input: the API's quote and job serializers,
    the admin's "Try a quote" form. Optional fields may be missing, None or blank."""
    return RouteRequest(
        input_tokens=data["input_tokens"],
        output_tokens=data["output_tokens"],
        turns=data["turns"],
        tool_seconds=data["tool_seconds"],
        deadline_seconds=data["deadline_seconds"],
        max_cost=data.get("max_cost"),
        tier=data.get("tier") or None,
        task=data.get("task") or None,
    )


def quote_build(
    *,
    account: Account,
    model: str,
    request: RouteRequest,
    at: dt.datetime,
    api_key: ApiKey | None = None,
) -> Quote:
    """The router's answer for the account. `api_key`: the key asking, whose scopes hold
    here (routing.accounts.scopes): a model or a tier it names must be allowed
    (KeyNotAllowed), and when the router chooses the tier it chooses among the key's
    `allowed_tiers` only."""
    if api_key is not None:
        request = key_request(api_key, model, request)
    packages = account_packages(account)
    pools = pool_state(at)
    if model == AUTO:
        if not request.task:
            raise AutoNeedsTask("model 'auto' needs a `task` class (e.g. swe-bench-pro).")
        options = [model_option(m) for m in auto_candidates(request.task, at)]
        decision = route(
            request,
            models=options,
            packages=packages,
            loads=pools.loads,
            own=pools.own,
            now=at,
            quality=True,
        )
        return Quote(request, model, None, decision, at, packages)
    resolved = resolve_for_routing(model, auto_migrate=account.auto_migrate, at=at)
    option = model_option(resolved.model)
    if not option.tiers:
        raise ModelNotServing(resolved.model, lifecycle.model_status(resolved.model, at))
    decision = route(
        request, models=[option], packages=packages, loads=pools.loads, own=pools.own, now=at
    )
    return Quote(request, model, resolved, decision, at, packages)


def key_request(key: ApiKey, model: str, request: RouteRequest) -> RouteRequest:
    """The request as the key may route it (read from the key in memory: no query)."""
    scopes.check_model(key, model)
    scopes.check_tier(key, request.tier)
    if request.tier is None and key.allowed_tiers:
        return replace(request, tiers=tuple(key.allowed_tiers))
    return request

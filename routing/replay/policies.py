"""The policies a replay compares, as what each asks the router for.

- `router`: ours, the request as a client sends it: the cheapest tier whose P90
  completion (queues included) meets the deadline, or a refusal up front;
- `standard`, `priority`, `ultrafast`: always that tier;
- `cheapest`: the cheapest tier whose *unloaded* time meets the deadline, ignoring
  queues (what a client would pick from the price list and the published speeds).

The fixed policies take every request (they never refuse: they ask for their tier with
no deadline, so what they miss shows as misses); the job still runs through the same
quote, reservation and slot booking, and its outcome is judged against the request's
real deadline.
"""

from __future__ import annotations

from routing.router.route import RouteRequest

POLICIES = ("router", "standard", "priority", "ultrafast", "cheapest")
FIXED_TIERS = {"standard": "standard", "priority": "priority", "ultrafast": "ultrafast"}
# The deadline a fixed policy asks for: any completion is accepted (about 31 years).
ACCEPT_ANY_SECONDS = 1e9


class PolicyError(ValueError):
    pass


def parse_policies(text: str | None, tiers: set[str]) -> list[str]:
    """The policies named in `text` (comma-separated; all by default), each known and
    runnable on a model with these `tiers`. Default: every policy the model can run."""
    if not text:
        return [p for p in POLICIES if FIXED_TIERS.get(p, "standard") in tiers]
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise PolicyError("--policies names no policy")
    for name in names:
        if name not in POLICIES:
            raise PolicyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
        if name in FIXED_TIERS and FIXED_TIERS[name] not in tiers:
            raise PolicyError(f"policy {name!r}: the model has no {FIXED_TIERS[name]} tier")
    return list(dict.fromkeys(names))


def policy_request(
    policy: str, *, input_tokens: int, output_tokens: int, deadline: float, floor_tier: str | None
) -> RouteRequest:
    """What `policy` asks the router for, for one request."""
    if policy == "router":
        return RouteRequest(input_tokens, output_tokens, deadline)
    tier = floor_tier if policy == "cheapest" else FIXED_TIERS[policy]
    return RouteRequest(input_tokens, output_tokens, ACCEPT_ANY_SECONDS, tier=tier)

"""Shared test helpers."""

import json

from django.test import Client


class ApiClient(Client):
    """A test client that sends a bearer key and JSON."""

    def __init__(self, key: str | None = None, **kwargs):
        if key:
            kwargs["HTTP_AUTHORIZATION"] = f"Bearer {key}"
        super().__init__(**kwargs)

    def post_json(self, path, data, **extra):
        body = data if isinstance(data, str) else json.dumps(data, default=str)
        return self.post(path, body, content_type="application/json", **extra)


# A GDP-Val-shaped task: 30 turns, 22k output tokens, 15 s of tools.
GDPVAL = {
    "model": "sol",
    "input_tokens": 8000,
    "output_tokens": 22000,
    "turns": 30,
    "tool_seconds": 15,
}


def tier_option(slug, rank, pool_id, device, nodes, price_in, price_out, **kw):
    """A router TierOption for pure router/planner tests (no database)."""
    from decimal import Decimal

    import simengine
    from routing.router.route import TierOption

    return TierOption(
        tier=slug,
        tier_id=rank + 1,
        rank=rank,
        pool=f"pool-{pool_id}",
        pool_id=pool_id,
        deployment=simengine.Deployment(device=device, nodes=nodes, tier=slug),
        price_input=Decimal(price_in),
        price_output=Decimal(price_out),
        **kw,
    )

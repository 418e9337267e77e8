"""Router decisions per second, in process, for a catalog of 50 models x 4 tiers.

Usage: .venv/bin/python bench/bench_router.py [--decisions N] [--shapes K]

Builds 50 synthetic model versions (architectures varied around the catalog's), each
with flex/standard/priority on a GPU pool and ultrafast on a wafer pool; sends random
requests (one of K task shapes, random deadline and pool loads) through the real
`routing.router.route`, and prints decisions/s. Baseline in the same process: a
price-only router (the cheapest tier, no prediction), the kind of gateway we replace.
Goal (issue 4): at least 20,000 decisions/s. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")

import django  # noqa: E402

django.setup()

import simengine  # noqa: E402
from routing.quota import PackageView  # noqa: E402
from routing.router.route import ModelOption, RouteRequest, TierOption, route  # noqa: E402

NOW = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)
TIERS = [
    ("flex", 0.5, "h200"),
    ("standard", 1, "h200"),
    ("priority", 2, "h200"),
    ("ultrafast", 6, "wse-3"),
]


def catalog(n_models: int, rng: random.Random) -> list[ModelOption]:
    base = simengine.load_catalog_models(ROOT / "catalog" / "data" / "catalog.toml")
    seeds = [base[s] for s in ("gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna", "gpt-5.3-codex")]
    models = []
    for i in range(n_models):
        seed = seeds[i % len(seeds)]
        scale = rng.uniform(0.6, 1.2)
        spec = simengine.ModelSpec(
            name=f"synthetic-{i}",
            total_params=seed.total_params * scale,
            active_params_prefill=seed.active_params_prefill * scale,
            active_params_decode=seed.active_params_decode * scale,
            layers=seed.layers,
            hidden_size=seed.hidden_size,
            bytes_per_param=seed.bytes_per_param,
            kv_bytes_per_token=seed.kv_bytes_per_token,
            context_window=seed.context_window,
        )
        price = Decimal(str(round(rng.uniform(0.5, 10), 2)))
        tiers = tuple(
            TierOption(
                tier=t,
                tier_id=k + 1,
                rank=k,
                pool=f"pool-{i % 5}-{dev}",
                pool_id=(i % 5) * 2 + (dev == "wse-3"),
                deployment=simengine.Deployment(
                    device=dev, nodes=4096 if dev == "h200" else 64, tier=t
                ),
                price_input=price * Decimal(str(mult)),
                price_output=price * 8 * Decimal(str(mult)),
            )
            for k, (t, mult, dev) in enumerate(TIERS)
        )
        models.append(
            ModelOption(
                id=i + 1,
                slug=f"synthetic-{i}",
                family_id=i % 7,
                spec=spec,
                context_window=spec.context_window,
                tiers=tiers,
            )
        )
    return models


def requests(k: int, rng: random.Random) -> list[dict]:
    shapes = []
    for _ in range(k):
        turns = rng.choice([1, 1, 2, 4, 8, 30])
        shapes.append(
            dict(
                input_tokens=rng.randint(500, 20_000),
                output_tokens=max(turns, rng.randint(200, 20_000)),
                turns=turns,
                tool_seconds=rng.choice([0, 5, 15, 60]),
            )
        )
    return shapes


def price_only(model: ModelOption, req: RouteRequest):
    return min(
        model.tiers,
        key=lambda t: req.input_tokens * t.price_input + req.output_tokens * t.price_output,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--shapes", type=int, default=200)
    ap.add_argument("--models", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(7)
    models = catalog(args.models, rng)
    shapes = requests(args.shapes, rng)
    packages = [
        PackageView(
            1,
            "main",
            "all",
            None,
            frozenset(),
            frozenset(),
            Decimal("1000000"),
            10,
            False,
            None,
            None,
            None,
        )
    ]
    work = []
    for _ in range(args.decisions):
        model = rng.choice(models)
        req = RouteRequest(deadline_seconds=rng.choice([30, 120, 600, 3600]), **rng.choice(shapes))
        loads = {p: rng.uniform(0.0, 0.95) for p in range(10)}
        work.append((model, req, loads))

    # Cold: every (model, tier, shape) predicted for the first time.
    t0 = time.perf_counter()
    cold = 0
    seen = set()
    for model, req, loads in work:
        key = (model.id, req)
        if key in seen:
            continue
        seen.add(key)
        route(req, models=[model], packages=packages, loads=loads, now=NOW)
        cold += 1
        if cold >= 2000:
            break
    cold_rate = cold / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    outcomes: dict[str, int] = {}
    for model, req, loads in work:
        d = route(req, models=[model], packages=packages, loads=loads, now=NOW)
        outcomes[d.outcome] = outcomes.get(d.outcome, 0) + 1
    warm = len(work) / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    for model, req, _ in work:
        price_only(model, req)
    baseline = len(work) / (time.perf_counter() - t0)

    print(
        f"catalog: {len(models)} models x {len(TIERS)} tiers; {len(shapes)} task shapes; "
        f"{len(work):,} decisions"
    )
    print(f"router, first sight of each (model, shape): {cold_rate:,.0f} decisions/s")
    print(
        f"router, steady state:                      {warm:,.0f} decisions/s "
        f"(goal 20,000/s: {'met' if warm >= 20_000 else 'NOT met'})"
    )
    print(
        f"baseline price-only choice (no deadline):  {baseline:,.0f} decisions/s "
        f"(router = {warm / baseline:.2f}x of it)"
    )
    print(f"outcomes: {outcomes}")


if __name__ == "__main__":
    main()

"""Replay speed: requests per second through the real path (issue 24's goal: 5,000
requests, one policy, in <= 3 minutes on this machine).

Usage: .venv/bin/python bench/bench_replay.py [--requests 5000] [--load 0.7]
       [--trace data/traces/azure-llm-2023-code.csv]

On a throwaway database (the configured DATABASE_URL's kind: SQLite by default, or
PostgreSQL), the first N requests of the trace are replayed under the `router` policy,
exactly as `manage.py replay` does (job_submit with the router's quote, the quota
reservation, the worker's claim with its slot booking, the finish with its settlement).
Baseline, same process, same requests: the same loop with each quote made beforehand on
empty pools (`routing.jobs.submit.quote_build` answers from a table: no pool-state read,
no routing), so the ratio is the router's share of the path. Prints wall seconds,
requests/s and the ratio. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from routing.jobs import submit  # noqa: E402
from routing.quota import account_packages  # noqa: E402
from routing.replay.database import replay_settings, throwaway_database  # noqa: E402
from routing.replay.simulate import native_load, plan, run_policy  # noqa: E402
from routing.replay.trace import read_trace  # noqa: E402
from routing.replay.world import (  # noqa: E402
    DEFAULT_MODEL,
    DEFAULT_POOL_SCALE,
    DEFAULT_START,
    account_for,
    account_forget,
    world_build,
)
from routing.router.quotes import Quote  # noqa: E402
from routing.router.route import RouteRequest, route  # noqa: E402

GOAL_SECONDS = 180.0


def timed_run(planned, *, account, rate, label):
    started = time.perf_counter()
    run = run_policy(
        planned,
        policy="router",
        model=DEFAULT_MODEL,
        account=account,
        start=DEFAULT_START,
        rate=rate,
        progress=_progress(label),
    )
    return time.perf_counter() - started, run


def _progress(label):
    started = time.perf_counter()
    shown = [started]

    def tick(done, total):
        now = time.perf_counter()
        if done == total or now - shown[0] >= 10:
            shown[0] = now
            print(
                f"  {label}: {done}/{total} ({done / (now - started):.0f}/s)",
                file=sys.stderr,
                flush=True,
            )

    return tick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--load", type=float, default=0.7)
    ap.add_argument("--trace", default=str(ROOT / "data/traces/azure-llm-2023-code.csv"))
    a = ap.parse_args()
    requests = read_trace(a.trace, limit=a.requests)
    with throwaway_database(), replay_settings():
        vendor = connection.vendor
        option = world_build(model=DEFAULT_MODEL, pool_scale=DEFAULT_POOL_SCALE, at=DEFAULT_START)
        planner = account_for("bench-plan", at=DEFAULT_START)
        planned = plan(requests, option, account=planner, seed=1, slack=None, at=DEFAULT_START)
        rate = a.load / native_load(planned, requests)

        account = account_for("bench-router", at=DEFAULT_START)
        real_s, run = timed_run(planned, account=account, rate=rate, label="router")
        account_forget(account)

        # Baseline: the quotes made beforehand on empty pools, handed back by a table.
        account = account_for("bench-no-router", at=DEFAULT_START)
        packages = account_packages(account)
        quotes = {}
        for p in planned:
            req = RouteRequest(p.input_tokens, p.output_tokens, p.deadline)
            decision = route(
                req, models=[option], packages=packages, loads={}, own={}, now=DEFAULT_START
            )
            quotes[(p.input_tokens, p.output_tokens, p.deadline)] = decision
        original = submit.quote_build

        def table_quote(*, account, model, request, at):
            d = quotes[(request.input_tokens, request.output_tokens, request.deadline_seconds)]
            return Quote(request, model, None, d, at, packages)

        submit.quote_build = table_quote
        try:
            base_s, base = timed_run(planned, account=account, rate=rate, label="no router")
        finally:
            submit.quote_build = original
        account_forget(account)

    n = len(planned)
    print(f"replay on {vendor}, {n} requests of the shipped trace, load {a.load}, router policy")
    print(
        f"  real path (quote with pool state + route, reserve, claim + slot booking, finish): "
        f"{real_s:.1f} s, {n / real_s:.0f} requests/s "
        f"(accepted {len(run.outcomes)}, refused {sum(run.refused.values())})"
    )
    print(
        f"  baseline, quotes made beforehand (no pool read, no routing): {base_s:.1f} s, "
        f"{n / base_s:.0f} requests/s"
    )
    print(f"  ratio real / baseline time: {real_s / base_s:.2f}x")
    scaled = real_s * 5000 / n
    verdict = "met" if scaled <= GOAL_SECONDS else "NOT met"
    print(f"  goal 5,000 requests in <= {GOAL_SECONDS:.0f} s: {scaled:.0f} s for 5,000 ({verdict})")


if __name__ == "__main__":
    main()

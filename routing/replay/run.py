"""A whole replay: a throwaway database, the world in it, the plan, every policy at
every load, the reports. What `manage.py replay` and the benchmark call."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from routing.replay.database import replay_settings, throwaway_database
from routing.replay.policies import parse_policies
from routing.replay.report import replay_report
from routing.replay.simulate import ProgressFn, native_load, plan, run_policy
from routing.replay.trace import TraceRequest
from routing.replay.world import account_for, account_forget, world_build

# A trace's arrivals are replayed `rate` times as frequent; with --load the rate is
# chosen for the load, within these bounds.
MIN_RATE, MAX_RATE = 1e-6, 1e6


class ReplayError(ValueError):
    pass


def replay_run(
    requests: Sequence[TraceRequest],
    *,
    model: str,
    loads: Sequence[float] | None = None,
    rate: float | None = None,
    seed: int = 1,
    slack: float | None = None,
    policies: str | None = None,
    pool_scale: float,
    start: dt.datetime,
    progress: Callable[[str], ProgressFn] | None = None,
) -> list[dict]:
    """One report per load (`loads`, else one at `rate` times the trace's own rate, 1 by
    default). `progress(label)` gives a callback for one policy's run (done, total)."""
    with throwaway_database(), replay_settings():
        option = world_build(model=model, pool_scale=pool_scale, at=start)
        names = parse_policies(policies, {t.tier for t in option.tiers})
        planner = account_for("replay-plan", at=start)
        planned = plan(requests, option, account=planner, seed=seed, slack=slack, at=start)
        native = native_load(planned, requests)
        if loads:
            rates = [(u, u / native) for u in loads]
        else:
            r = 1.0 if rate is None else rate
            rates = [(native * r, r)]
        for _, r in rates:
            if not MIN_RATE <= r <= MAX_RATE:
                raise ReplayError(
                    f"that load needs arrivals {r:.3g}x the trace's; the trace's own load "
                    f"is {native:.4g} of Standard's pool"
                )
        pools = sorted({t.pool for t in option.tiers})
        reports = []
        for load, r in rates:
            runs = []
            for name in names:
                label = f"load {load:.2f} {name}"
                account = account_for(f"replay-{name}", at=start)
                runs.append(
                    run_policy(
                        planned,
                        policy=name,
                        model=model,
                        account=account,
                        start=start,
                        rate=r,
                        progress=progress(label) if progress else None,
                    )
                )
                account_forget(account)
            reports.append(replay_report(planned, runs, load=load, pools=pools))
        return reports

"""A replay's figures: per policy, what it accepted and refused, the share of accepted
jobs that met their deadline (attainment) and that finished within their promised P90
(calibration), what it cost, how late the late ones were, its tier mix; the cost floor;
each pool's measured utilisation. As JSON, a Markdown table and a chart."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal

from routing.replay.simulate import Planned, PolicyRun

MONEY = Decimal("0.000001")


def _share(n: int, of: int) -> float | None:
    return round(n / of, 6) if of else None


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of `values`; 0 when empty."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def cost_floor(planned: Sequence[Planned]) -> Decimal:
    """Every request on the cheapest tier whose unloaded time (the router's P90 on empty
    pools) meets its deadline: what a policy that meets every deadline at its P90 pays
    at least (prices do not depend on load). A request no tier meets even unloaded
    counts at the fastest tier's price."""
    return sum((p.floor_cost for p in planned), Decimal(0))


def policy_summary(run: PolicyRun) -> dict:
    """The issue's per-policy object, plus `_extra` figures for the table (not in JSON)."""
    outs = run.outcomes
    accepted = len(outs)
    met = within = 0
    late: list[float] = []
    for o in outs:
        if o.completion is None:
            continue  # failed on the engine: neither met nor within its promise
        lateness = max(0.0, o.completion - o.planned.deadline)
        if lateness <= 0.0:
            met += 1
        else:
            late.append(lateness)
        if o.completion <= o.promised:
            within += 1
    tiers = Counter(o.tier for o in outs)
    cost = sum((o.cost for o in outs), Decimal(0))
    floor_accepted = sum((o.planned.floor_cost for o in outs), Decimal(0))
    # Per slack: [jobs, met, not on the floor's tier, cost, the floor's cost of them]
    by_slack: dict[float, list] = {}
    for o in outs:
        row = by_slack.setdefault(o.planned.slack, [0, 0, 0, Decimal(0), Decimal(0)])
        row[0] += 1
        row[1] += int(o.completion is not None and o.completion <= o.planned.deadline)
        row[2] += int(o.tier != o.planned.floor_tier)
        row[3] += o.cost
        row[4] += o.planned.floor_cost
    return {
        "accepted": accepted,
        "refused": sum(run.refused.values()),
        "attainment": _share(met, accepted),
        "promise_calibration": _share(within, accepted),
        "cost": float(cost.quantize(MONEY)),
        "late_p50_seconds": round(_percentile(late, 50), 3),
        "late_p99_seconds": round(_percentile(late, 99), 3),
        "tier_mix": {t: round(n / accepted, 6) for t, n in sorted(tiers.items())},
        "_extra": {
            "refused_by": dict(run.refused),
            "late": len(late),
            "floor_of_accepted": float(floor_accepted.quantize(MONEY)),
            "by_slack": by_slack,
        },
    }


def pool_utilisation(run: PolicyRun, pools: Sequence[str]) -> dict[str, float]:
    """Slot-seconds booked on each pool over the span of arrivals (a share of the pool;
    above 1: more work than the pool could do in that time, a queue that drains after)."""
    busy = dict.fromkeys(pools, 0.0)
    for o in run.outcomes:
        busy[o.pool] = busy.get(o.pool, 0.0) + o.busy_slot_seconds
    span = max(run.span_seconds, 1e-9)
    return {p: round(b / span, 4) for p, b in busy.items()}


def replay_report(
    planned: Sequence[Planned],
    runs: Sequence[PolicyRun],
    *,
    load: float,
    pools: Sequence[str],
) -> dict:
    """The issue's JSON object for one load (`_extra` keys hold what the table adds).
    `pools`: the utilisation measured under `router` (the first policy without it)."""
    policies = {r.policy: policy_summary(r) for r in runs}
    measured = next((r for r in runs if r.policy == "router"), runs[0] if runs else None)
    return {
        "requests": len(planned),
        "load": round(load, 4),
        "policies": policies,
        "cost_floor": float(cost_floor(planned).quantize(MONEY)),
        "pools": pool_utilisation(measured, pools) if measured else {},
        "_extra": {
            "pools_by_policy": {r.policy: pool_utilisation(r, pools) for r in runs},
            "floor_tiers": dict(Counter(p.floor_tier for p in planned)),
            "floor_unmet": sum(1 for p in planned if not p.floor_meets),
        },
    }


def public(report: dict) -> dict:
    """The report without the table's extras: exactly the issue's JSON shape."""
    if isinstance(report, dict):
        return {k: public(v) for k, v in report.items() if k != "_extra"}
    return report


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown(reports: Sequence[dict]) -> str:
    """One table for every load and policy: the README's table."""
    lines = [
        "| load | policy | accepted | refused | attainment | within P90 | cost | "
        "cost / floor | late p50 / p99 (s) | tier mix |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rep in reports:
        floor = rep["cost_floor"]
        for name, s in rep["policies"].items():
            mix = ", ".join(f"{t} {v:.0%}" for t, v in s["tier_mix"].items() if v >= 0.005)
            ratio = s["cost"] / floor if floor else float("nan")
            lines.append(
                f"| {rep['load']:.2f} | {name} | {s['accepted']} | {s['refused']} | "
                f"{_fmt(s['attainment'])} | {_fmt(s['promise_calibration'])} | "
                f"{s['cost']:.2f} | {ratio:.2f} | "
                f"{s['late_p50_seconds']:.2f} / {s['late_p99_seconds']:.2f} | {mix} |"
            )
        pools = ", ".join(f"{p} {u:.2f}" for p, u in rep["pools"].items())
        lines.append(
            f"| {rep['load']:.2f} | *floor* | {rep['requests']} | | | | "
            f"{floor:.2f} | 1.00 | | pools under router: {pools} |"
        )
    return "\n".join(lines)


def plot(reports: Sequence[dict], path: str) -> None:
    """Attainment and cost (as a multiple of the floor) against load, one line per
    policy, written as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = [r["load"] for r in reports]
    names = list(dict.fromkeys(n for r in reports for n in r["policies"]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    try:
        for name in names:
            att = [r["policies"].get(name, {}).get("attainment") for r in reports]
            cost = [
                (r["policies"][name]["cost"] / r["cost_floor"])
                if name in r["policies"] and r["cost_floor"]
                else None
                for r in reports
            ]
            style = {"marker": "o", "linewidth": 2.5 if name == "router" else 1.2}
            ax1.plot(loads, [math.nan if a is None else a for a in att], label=name, **style)
            ax2.plot(loads, [math.nan if c is None else c for c in cost], label=name, **style)
        ax1.set_title("Deadlines met (share of accepted jobs)")
        ax1.set_xlabel("offered load (share of Standard's pool)")
        ax1.set_ylim(0, 1.02)
        ax1.axhline(0.95, color="grey", linestyle=":", linewidth=1)
        ax2.set_title("Cost (x the cost floor)")
        ax2.set_xlabel("offered load (share of Standard's pool)")
        ax2.axhline(1.0, color="grey", linestyle=":", linewidth=1)
        ax2.set_ylim(bottom=0)
        ax2.legend(loc="best", fontsize=8)
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
            if len(loads) == 1:
                ax.set_xlim(loads[0] - 0.1, loads[0] + 0.1)
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)

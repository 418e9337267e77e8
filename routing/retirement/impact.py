"""What retiring a model does to the people using it: who used it (30 days before the
retirement, or before now), what moving them to the successor costs in latency and
credits (their recent traffic replayed on the successor with the engine), and whether
the successor's pool has room (utilisation before and after, wafers freed)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Sum
from django.utils import timezone

import simengine
from catalog import lifecycle
from catalog.engine import model_spec, predict_on
from catalog.models import Deployment, ModelVersion, Price, Tier
from routing.core.charts import png_figure
from routing.core.formats import change_text, duration_long
from routing.models import Batch, BatchRequest, Job, Notice, QuotaPackage
from routing.quota import tied_packages
from routing.router.route import tokens_cost
from routing.router.snapshot import pool_loads

WINDOW = dt.timedelta(days=30)


@dataclass
class AccountImpact:
    account: str
    jobs: int
    output_tokens: int
    latency_before: float  # mean simulated seconds per job, as served
    latency_after: float  # the same jobs on the successor's tier
    cost_before: Decimal
    cost_after: Decimal

    @property
    def latency_change(self) -> float:
        return self.latency_after / self.latency_before - 1 if self.latency_before else 0.0

    @property
    def cost_change(self) -> float:
        return float(self.cost_after / self.cost_before - 1) if self.cost_before else 0.0

    @property
    def latency_ratio(self) -> float | None:
        """after / before (None when there is no before or nothing was replayed)."""
        if not (self.latency_before and self.latency_after):
            return None
        return self.latency_after / self.latency_before

    @property
    def cost_ratio(self) -> float | None:
        if not (self.cost_before and self.cost_after):
            return None
        return float(self.cost_after / self.cost_before)


@dataclass
class Impact:
    model: ModelVersion
    successor: ModelVersion | None
    tier: Tier | None
    window_start: dt.datetime
    window_end: dt.datetime
    accounts: list[AccountImpact] = field(default_factory=list)
    packages: list[QuotaPackage] = field(default_factory=list)
    pool: str = ""
    utilisation_before: float = 0.0
    utilisation_after: float = 0.0
    wafers_freed: int = 0
    notices: dict[str, int] = field(default_factory=dict)  # delivery state (label) -> count
    batches: list[dict] = field(default_factory=list)  # batches with lines still to run on it
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.utilisation_after < 0.85

    @property
    def utilisation_before_pct(self) -> float:
        return 100 * self.utilisation_before

    @property
    def utilisation_after_pct(self) -> float:
        return 100 * self.utilisation_after


def _open_batches(model: ModelVersion) -> list[dict]:
    """Batches not yet ended with lines on the model that have not started: on the day
    these lines are planned again on the successor (routing.batches.reroute.batches_reroute)."""
    rows = (
        BatchRequest.objects.filter(
            model=model,
            status=BatchRequest.Status.QUEUED,
            batch__status__in=(Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS),
        )
        .values("batch_id", "batch__account__name", "batch__status", "batch__expires_at")
        .annotate(lines=Count("id"))
        .order_by("batch__expires_at")
    )
    return [
        {
            "id": r["batch_id"],
            "account": r["batch__account__name"],
            "status": r["batch__status"],
            "expires_at": r["batch__expires_at"],
            "lines": r["lines"],
        }
        for r in rows
    ]


def retirement_impact(
    *,
    model: ModelVersion,
    successor: ModelVersion | None = None,
    tier: Tier | None = None,
    at: dt.datetime | None = None,
) -> Impact:
    """What retiring `model` does: tied packages, open batches, notices, and the last
    30 days of its jobs replayed on the successor (latency, cost, pool utilisation)."""
    at = at or timezone.now()
    if successor is None and model.successor_id:
        successor = lifecycle.resolve_successor(model, at).model
        if successor.pk == model.pk:
            successor = None
    tier = tier or model.successor_tier or Tier.objects.filter(slug="standard").first()
    end = min(at, lifecycle.day_start(model.retires_on)) if model.retires_on else at
    impact = Impact(model, successor, tier, end - WINDOW, end)
    _what_it_touches(impact)
    target = _replay_target(impact)
    jobs = Job.objects.filter(model=model, created_at__gte=impact.window_start, created_at__lt=end)
    demand = _replay(impact, jobs, target)
    if target is not None:
        impact.pool = target[0].pool.slug
        impact.utilisation_before = pool_loads().get(target[0].pool_id, 0.0)
        seconds = WINDOW.total_seconds()
        impact.utilisation_after = impact.utilisation_before + demand / seconds
    return impact


def _what_it_touches(impact: Impact) -> None:
    """Tied packages, wafers freed, open batches and notices by delivery state."""
    model = impact.model
    impact.packages = list(
        tied_packages(model)
        .select_related("account", "migrate_tier")
        .order_by("account__name", "name")
    )
    impact.wafers_freed = _wafers_freed(model)
    impact.batches = _open_batches(model)
    labels = dict(Notice.Delivery.choices)
    impact.notices = {
        labels.get(state, state): n
        for state, n in Notice.objects.filter(model=model)
        .values_list("delivery")
        .annotate(n=Count("id"))
        .order_by("delivery")
    }


def _replay_target(impact: Impact) -> tuple[Deployment, Price | None] | None:
    """The successor's deployment and price on the tier the work moves to (None, with a
    note, when there is nothing to replay on)."""
    successor, tier = impact.successor, impact.tier
    if successor is None:
        impact.notes.append("No successor: nothing to replay.")
        return None
    target = (
        Deployment.objects.select_related("pool", "tier").filter(model=successor, tier=tier).first()
    )
    if target is None:
        impact.notes.append(f"{successor.slug} has no {tier.slug} tier: nothing to replay.")
        return None
    return target, Price.objects.filter(model=successor, tier=tier).first()


def _replay(impact: Impact, jobs, target: tuple[Deployment, Price | None] | None) -> float:
    """Replay the jobs by (account, shape) on the target (the engine times each distinct
    shape once); fills `impact.accounts` and returns the stream-seconds the replayed
    traffic needs on the successor's pool."""
    shapes = (
        jobs.values("account__name", "input_tokens", "output_tokens", "turns", "tool_seconds")
        .annotate(n=Count("id"), cost=Sum("cost"), before=Sum("predicted_cost"))
        .order_by("account__name")
    )
    per_account: dict[str, dict] = defaultdict(
        lambda: {
            "jobs": 0,
            "tokens": 0,
            "t_before": 0.0,
            "t_after": 0.0,
            "c_before": Decimal(0),
            "c_after": Decimal(0),
        }
    )
    served_time = _served_times(jobs)
    demand = 0.0
    for row in shapes:
        acc = per_account[row["account__name"]]
        n = row["n"]
        acc["jobs"] += n
        acc["tokens"] += n * row["output_tokens"]
        acc["c_before"] += row["cost"] if row["cost"] is not None else row["before"]
        key = (
            row["account__name"],
            row["input_tokens"],
            row["output_tokens"],
            row["turns"],
            row["tool_seconds"],
        )
        acc["t_before"] += served_time.get(key, 0.0)
        if target is None or target[1] is None:
            continue
        deployment, price = target
        try:
            pred = predict_on(
                impact.successor,
                deployment.pool,
                impact.tier.slug,
                input_tokens=row["input_tokens"],
                output_tokens=row["output_tokens"],
                turns=row["turns"],
                tool_seconds=row["tool_seconds"],
            )
        except simengine.SimEngineError as exc:
            impact.notes.append(
                f"{row['account__name']}: cannot run on {impact.successor.slug}: {exc}"
            )
            continue
        acc["t_after"] += n * pred.total_seconds
        acc["c_after"] += n * tokens_cost(
            row["input_tokens"],
            row["output_tokens"],
            price_input=price.input_per_million,
            price_output=price.output_per_million,
        )
        demand += n * pred.total_seconds / max(1, pred.stream_capacity)
    for name, acc in sorted(per_account.items(), key=lambda kv: -kv[1]["jobs"]):
        impact.accounts.append(
            AccountImpact(
                account=name,
                jobs=acc["jobs"],
                output_tokens=acc["tokens"],
                latency_before=acc["t_before"] / acc["jobs"],
                latency_after=acc["t_after"] / acc["jobs"] if acc["t_after"] else 0.0,
                cost_before=acc["c_before"].quantize(Decimal("0.01")),
                cost_after=acc["c_after"].quantize(Decimal("0.01")),
            )
        )
    return demand


def _served_times(jobs) -> dict[tuple, float]:
    """Total simulated seconds per (account, shape) as the jobs were served."""
    out: dict[tuple, float] = defaultdict(float)
    for j in jobs.values(
        "account__name",
        "input_tokens",
        "output_tokens",
        "turns",
        "tool_seconds",
        "simulated",
        "predicted",
    ):
        timings = j["simulated"] or j["predicted"] or {}
        key = (
            j["account__name"],
            j["input_tokens"],
            j["output_tokens"],
            j["turns"],
            j["tool_seconds"],
        )
        out[key] += float(timings.get("total_seconds", 0.0))
    return out


def _wafers_freed(model: ModelVersion) -> int:
    """Wafers the retired model's wafer deployments hold (freed on retirement)."""
    freed = 0
    for d in Deployment.objects.filter(model=model, pool__device="wse-3").select_related(
        "pool", "tier"
    ):
        try:
            place = simengine.placement(model_spec(model), "wse-3", d.pool.nodes)
        except simengine.SimEngineError:
            continue
        freed += (place.wafers_per_replica or 0) * (place.replicas or 0)
    return freed


def time_changes(rows: list[AccountImpact]) -> list[float]:
    """Each account's change in mean job time on the successor, in percent (+33 means a
    third slower): what the chart draws, so an account of short jobs whose time grows
    from 0.6 s to 0.8 s stands out as much as it matters, not as a sliver beside minutes.
    0 where there is nothing to compare."""
    return [(r.latency_ratio - 1.0) * 100.0 if r.latency_ratio else 0.0 for r in rows]


def impact_chart(impact: Impact) -> str:
    """A PNG (as a data: URI) per account: the change in mean job time (relative, see
    time_changes), and credits before and after."""
    rows = impact.accounts[:20]
    ys = list(range(len(rows)))[::-1]
    names = [r.account for r in rows]
    h = 0.38
    succ = impact.successor.slug if impact.successor else "successor"
    after_label = f"{succ} ({impact.tier.slug if impact.tier else ''})"
    out: list[str] = []
    size = (9.6, 1.4 + 0.35 * max(1, len(rows)))  # 960 px: the content column
    with png_figure(out, ncols=2, figsize=size, sharey=True) as (_fig, (ax1, ax2)):
        changes = time_changes(rows)
        ax1.barh(
            ys,
            changes,
            2 * h,
            color=["#c44e52" if c > 0 else "#3c8f4f" for c in changes],
        )
        ax1.axvline(0, color="#555", lw=0.8)
        for y, c, r in zip(ys, changes, rows, strict=True):
            ax1.annotate(
                f"{change_text(r.latency_ratio)} ({duration_long(r.latency_before)} -> "
                f"{duration_long(r.latency_after)})",
                (c, y),
                xytext=(3 if c >= 0 else -3, 0),
                textcoords="offset points",
                ha="left" if c >= 0 else "right",
                va="center",
                fontsize=7,
            )
        # Room for the labels beside the bars, on the side(s) the bars go.
        lo, hi = min([*changes, 0.0]), max([*changes, 0.0])
        span = max(hi - lo, 1.0)
        ax1.set_xlim(lo - span * (0.9 if lo < 0 else 0.05), hi + span * (0.9 if hi > 0 else 0.05))
        ax1.set_title(f"Mean job time on {after_label}: change (%)", fontsize=10)
        ax1.grid(axis="x", alpha=0.3)
        ax2.barh(
            [y + h / 2 for y in ys],
            [float(r.cost_before) for r in rows],
            h,
            label=impact.model.slug,
            color="#9aa5b1",
        )
        ax2.barh(
            [y - h / 2 for y in ys],
            [float(r.cost_after) for r in rows],
            h,
            label=after_label,
            color="#d8843b",
        )
        ax2.set_title("Credits, 30 days", fontsize=10)
        ax2.grid(axis="x", alpha=0.3)
        ax2.legend(fontsize=8, loc="lower right")
        ax1.set_yticks(ys, names, fontsize=8)
    return out[0]

"""Reading a batch's progress: counts for progress bars, and a chart of the run."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count

from catalog.models import Tier
from routing.core.charts import png_figure
from routing.core.clock import sim_scale
from routing.models import Batch, BatchRequest

TIER_COLOURS = {
    "flex": "#7a9cc6",
    "standard": "#4c72b0",
    "priority": "#dd8452",
    "ultrafast": "#c44e52",
}


def batch_progress(batch: Batch) -> dict:
    """Counts for progress bars: done, failed, running, queued, and the predicted finish."""
    counts = dict(batch.requests.values_list("status").annotate(n=Count("id")))
    S = BatchRequest.Status
    return {
        "total": batch.total,
        "completed": counts.get(S.COMPLETED, 0),
        "failed": sum(counts.get(s, 0) for s in (S.FAILED, S.EXPIRED, S.CANCELLED)),
        "running": counts.get(S.RUNNING, 0),
        "queued": counts.get(S.QUEUED, 0),
        "predicted_finish_at": batch.predicted_finish_at,
    }


def batch_chart(batch: Batch) -> str | None:
    """A PNG (data: URI) of the run: requests completed over simulated time since the
    start, per tier, against the plan's predicted makespan and the window's end."""
    if batch.in_progress_at is None or not batch.completed:
        return None
    tiers = dict(Tier.objects.values_list("pk", "slug"))
    ends: dict[str, list[float]] = defaultdict(list)
    for tier_id, finished in batch.requests.filter(
        status=BatchRequest.Status.COMPLETED
    ).values_list("tier_id", "finished_at"):
        ends[tiers.get(tier_id, "?")].append(
            (finished - batch.in_progress_at).total_seconds() * sim_scale() / 60
        )
    out: list[str] = []
    with png_figure(out, figsize=(8, 3.2)) as (_fig, ax):
        for tier, xs in sorted(ends.items()):
            xs.sort()
            ax.step(
                xs,
                range(1, len(xs) + 1),
                where="post",
                label=f"{tier} ({len(xs)})",
                color=TIER_COLOURS.get(tier),
            )
        plan = batch.plan or {}
        if plan.get("makespan_seconds"):
            ax.axvline(
                plan["makespan_seconds"] / 60, ls="--", color="#555", lw=1, label="predicted finish"
            )
        window_end = (batch.expires_at - batch.in_progress_at).total_seconds() * sim_scale() / 60
        ax.axvline(window_end, ls=":", color="#b00", lw=1, label="window ends")
        ax.set_xlabel("simulated minutes since start")
        ax.set_ylabel("requests completed")
        ax.set_xlim(
            left=0, right=max(window_end, max((max(v) for v in ends.values()), default=0)) * 1.02
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    return out[0]

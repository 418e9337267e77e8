"""Reading a batch's progress: counts for progress bars, and a chart of the run."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count

from catalog.models import Tier
from routing.core.charts import png_figure
from routing.core.clock import sim_scale
from routing.core.formats import duration_long
from routing.models import Batch, BatchRequest

TIER_COLOURS = {
    "flex": "#7a9cc6",
    "standard": "#4c72b0",
    "priority": "#dd8452",
    "ultrafast": "#c44e52",
}


def batch_progress(batch: Batch) -> dict:
    """Counts for progress bars: done, failed (cancelled and expired included), of those
    the cancelled, running, queued, and the predicted finish."""
    counts = dict(batch.requests.values_list("status").annotate(n=Count("id")))
    S = BatchRequest.Status
    return {
        "total": batch.total,
        "completed": counts.get(S.COMPLETED, 0),
        "failed": sum(counts.get(s, 0) for s in (S.FAILED, S.EXPIRED, S.CANCELLED)),
        "cancelled": counts.get(S.CANCELLED, 0),
        "running": counts.get(S.RUNNING, 0),
        "queued": counts.get(S.QUEUED, 0),
        "predicted_finish_at": batch.predicted_finish_at,
    }


# The window's end is drawn when it is within this many times the run's span of the
# start; further away it is only written (a 20 s run in an 8 h window stays readable).
WINDOW_MARK_FACTOR = 3.0


def _time_unit(span_seconds: float) -> tuple[float, str]:
    """Seconds per unit and its name, so the run's span reads in 1..120 units."""
    if span_seconds <= 120:
        return 1.0, "seconds"
    if span_seconds <= 7200:
        return 60.0, "minutes"
    return 3600.0, "hours"


def run_axis(last: float, predicted: float | None, window_end: float) -> tuple[float, bool]:
    """The x-axis of a run chart (simulated seconds since the start): its span covers the
    last finish and the predicted one, and the window's end only when that is near
    (within WINDOW_MARK_FACTOR times); (span, whether the window's end is drawn)."""
    span = max(last, predicted or 0.0, 1.0)
    if window_end <= WINDOW_MARK_FACTOR * span:
        return max(span, window_end), True
    return span, False


def batch_chart(batch: Batch) -> str | None:
    """A PNG (data: URI) of the run: requests completed over simulated time since the
    start, per tier, scaled to the run (start to the last finish or the predicted
    finish); the window's end is marked when near, written in the legend when far."""
    if batch.in_progress_at is None or not batch.completed:
        return None
    tiers = dict(Tier.objects.values_list("pk", "slug"))
    scale = sim_scale()
    ends: dict[str, list[float]] = defaultdict(list)
    for tier_id, finished in batch.requests.filter(
        status=BatchRequest.Status.COMPLETED
    ).values_list("tier_id", "finished_at"):
        ends[tiers.get(tier_id, "?")].append(
            max(0.0, (finished - batch.in_progress_at).total_seconds() * scale)
        )
    plan = batch.plan if isinstance(batch.plan, dict) else {}
    predicted = float(plan.get("makespan_seconds") or 0) or None
    last = max((max(v) for v in ends.values() if v), default=0.0)
    window_end = (batch.expires_at - batch.in_progress_at).total_seconds() * scale
    span, show_window = run_axis(last, predicted, window_end)
    unit, unit_name = _time_unit(span)
    out: list[str] = []
    with png_figure(out, figsize=(8, 3.2)) as (_fig, ax):
        for tier, xs in sorted(ends.items()):
            xs.sort()
            ax.step(
                [0.0] + [x / unit for x in xs],
                range(len(xs) + 1),
                where="post",
                label=f"{tier}: {len(xs):,} done, the last after {duration_long(xs[-1])}",
                color=TIER_COLOURS.get(tier),
            )
        if predicted:
            ax.axvline(
                predicted / unit,
                ls="--",
                color="#555",
                lw=1.5,
                zorder=3,
                label=f"predicted finish: {duration_long(predicted)}",
            )
        if show_window:
            ax.axvline(window_end / unit, ls=":", color="#b00", lw=1.5, label="window ends")
        else:
            ax.plot(
                [],
                [],
                ls=":",
                color="#b00",
                label=f"window ends after {duration_long(window_end)} (off the chart)",
            )
        ax.set_xlabel(f"simulated {unit_name} since the start")
        ax.set_ylabel("requests completed")
        ax.set_xlim(left=0, right=span * 1.05 / unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    return out[0]

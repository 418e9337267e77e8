"""Readable tables and a tier plot for predictions and calibration results."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .holdout import HoldoutResult, KindSummary, OwnHoldoutResult
from .perf import Prediction
from .results import CalibrationResult


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.{digits}g}"


def prediction_table(pred: Prediction) -> str:
    """A two-column table of a prediction plus its per-turn breakdown (first/last turns)."""
    where = (
        f"{pred.wafers} wafers/replica" if pred.wafers else f"{pred.gpus_per_replica} GPUs/replica"
    )
    head = [
        ("model", pred.model),
        (
            "deployment",
            f"{pred.device} {pred.tier} ({pred.transport} transport, sw {pred.software})",
        ),
        ("placement", f"{where}, {pred.replicas} replicas, {pred.stream_capacity} streams"),
        ("batch", _num(pred.batch)),
        ("tokens/s", _num(pred.tokens_per_second)),
        ("TTFT (s)", _num(pred.ttft_seconds)),
        ("generation (s)", _num(pred.generation_seconds)),
        ("  agent per-turn (s)", _num(pred.agent_seconds)),
        ("tools (s)", _num(pred.tool_seconds)),
        ("transport (s)", _num(pred.transport_seconds)),
        (
            "queue P90, task (s)",
            _num(pred.queue_seconds) + (" SATURATED" if pred.queue_saturated else ""),
        ),
        ("total (s)", _num(pred.total_seconds)),
    ]
    text = _table(["quantity", "value"], [(k, v) for k, v in head])
    turns = list(pred.turns)
    shown = turns if len(turns) <= 6 else turns[:3] + turns[-3:]
    rows = [
        (str(t.turn), str(t.new_tokens), str(t.cached_tokens), str(t.output_tokens),
         _num(t.wait), _num(t.transport), _num(t.ttft), _num(t.decode), _num(t.agent))
        for t in shown
    ]  # fmt: skip
    text += "\n\n" + _table(
        ["turn", "new", "cached", "out", "wait", "transport", "ttft", "decode", "agent"], rows
    )
    if len(turns) > 6:
        text += f"\n({len(turns) - 6} middle turns not shown)"
    return text


def calibration_table(result: CalibrationResult) -> str:
    """Targets (published vs model, residual, tolerance, pass) and fitted parameters."""
    rows = []
    for r in result.rows:
        target = (
            _num(r.target_low)
            if r.target_low == r.target_high
            else (f"{_num(r.target_low)}-{_num(r.target_high)}")
        )
        rows.append((
            r.name, r.published, target, _num(r.model_value), f"{r.residual:+.3f}",
            f"{r.tolerance:.0%}" if r.target_low == r.target_high else "range",
            "fit" if r.fitted else "check", "PASS" if r.passed else "FAIL",
        ))  # fmt: skip
    text = _table(
        ["target", "published", "value", "model", "residual", "tol", "use", "result"], rows
    )
    prow = [
        (p.name, _num(p.value), _num(p.prior), f"{p.data_share:.2f}", p.why)
        for p in result.parameters
    ]
    text += (
        "\n\nparameters "
        + result.params.version
        + (
            f" (fitted, {result.iterations} iterations, cost {result.cost:.3g})"
            if result.fitted
            else " (stored, not refitted)"
        )
    )
    text += "\n" + _table(["parameter", "value", "prior", "data share", "note"], prow)
    if result.fitted:
        text += (
            f"\nsensitivity rank {result.rank} for {len(result.parameters)} fitted parameters "
            f"({sum(r.fitted for r in result.rows)} fit targets; checks and input identities "
            "are not counted)"
        )
    text += "\n\n" + ("all targets PASS" if result.passed else f"{len(result.failures)} FAIL")
    return text


def holdout_table(result: HoldoutResult) -> str:
    """Hold-out figures (never fitted): figure, source, model, predicted, published, error."""
    rows = [
        (r.id, r.model, r.metric.replace("_seconds", " s").replace("_", " "),
         _num(r.predicted), _num(r.published), f"{r.error:+.1%}", f"{r.source[:48]} ({r.date})")
        for r in result.rows
    ]  # fmt: skip
    text = "hold-out figures (never used in the fit)\n" + _table(
        ["figure", "model", "metric", "predicted", "published", "error", "source"], rows
    )
    text += (
        f"\n\nhold-out: median |error| {result.median_abs_error:.1%}, "
        f"max |error| {result.max_abs_error:.1%} "
        f"({'PASS' if result.passed else 'FAIL'}: median <= 15 %, none > 30 %)"
    )
    return text


def unfitted_points_table(rows: Sequence[Any]) -> str:
    """GPU calibration points kept out of the fit: predicted, published, error, why."""
    if not rows:
        return "GPU points reported, not fitted (fit = false): none"
    table = _table(
        ["point", "predicted", "published", "error"],
        [(r.name, _num(r.predicted), _num(r.published), f"{r.error:+.1%}") for r in rows],
    )
    why = "".join(f"\n- {r.name}: {r.why}" for r in rows)
    return "GPU points reported, not fitted (fit = false)\n" + table + why


def run_shape_table(rows: Sequence[Any]) -> str:
    """Finite runs: when the engine's requests finish against the run's log."""
    table = _table(
        ["point", "quantile", "predicted s", "log s", "log / predicted"],
        [(r.point, r.quantile, f"{r.predicted:,.0f}", f"{r.logged:,.0f}", f"{r.ratio:.3f}")
         for r in rows],
    )  # fmt: skip
    return "Finite runs: completion times, engine against the run's log (not fitted)\n" + table


def ablation_table(rows: Sequence[Any]) -> str:
    """Server features on against off: the engine beside the published ablations
    (throughput on / off - 1, or eager decoding's extra ms per token), fitted or a
    check."""

    def fmt(r: Any, x: float) -> str:
        return f"{x * 1e3:.2f} ms" if r.measure == "eager_ms" else f"{x:+.1%}"

    def measure(r: Any) -> str:
        return "eager - graphs per token" if r.measure == "eager_ms" else "on / off - 1"

    table = _table(
        ["feature", "measure", "published", "engine", "use", "source"],
        [(r.name, measure(r), fmt(r, r.published), fmt(r, r.predicted),
          "fit" if r.fitted else "check", r.source) for r in rows],
    )  # fmt: skip
    return "Server features: the engine against published ablations\n" + table


def _pct(x: float | str | None) -> str:
    if x is None:
        return "-"
    return f"{x:+.1%}" if isinstance(x, float) else "n/a"


def kind_summary_table(summaries: Sequence[KindSummary]) -> str:
    """Median and max |error| per kind (gpu/wafer, dense/moe, latency/throughput)."""
    rows = [
        (f"{s.dimension}={s.value}", str(s.n),
         "-" if s.median_abs_error is None else f"{s.median_abs_error:.1%}",
         "-" if s.max_abs_error is None else f"{s.max_abs_error:.1%}")
        for s in summaries
    ]  # fmt: skip
    return _table(["kind", "n", "median |error|", "max |error|"], rows)


def own_holdout_table(result: OwnHoldoutResult) -> str:
    """Issue 28's own hold-out: each figure now and before, and the error by kind.

    Rows whose spec the engine cannot evaluate yet print as "not expressible yet" with
    the engine's reason underneath; ``before`` is the recorded pre-issue-28 error.
    """
    rows, reasons = [], []
    for r in result.rows:
        kind = "/".join(r.kind[d] for d in ("hardware", "model", "measure"))
        if r.error is None:
            now, err = "not expressible yet", "-"
            reasons.append(f"  {r.id}: {r.reason}")
        else:
            now, err = _num(r.predicted), _pct(r.error)
        rows.append((r.label, kind,
                     r.metric.replace("_seconds", " s").replace("_", " "),
                     _num(r.published), now, err, _pct(r.before_error), str(r.date)))  # fmt: skip
    text = "own hold-out (issue 28; frozen before its physics changed)\n" + _table(
        ["figure", "kind", "metric", "published", "predicted", "error", "before", "date"], rows
    )
    if any(r.amended for r in result.rows):
        text += (
            "\n* spec amended after the errors were seen (the figure's `amended` field says "
            "how; README, the second and fifth rounds)"
        )
    if reasons:
        text += "\nnot expressible yet:\n" + "\n".join(reasons)
    n = len(result.expressible)
    if n:
        text += (
            f"\n\nown hold-out: {n} of {len(result.rows)} expressible, median |error| "
            f"{result.median_abs_error:.1%}, max |error| {result.max_abs_error:.1%}"
        )
    else:
        text += f"\n\nown hold-out: none of {len(result.rows)} figures expressible yet"
    text += "\n\nerror by kind (now)\n" + kind_summary_table(result.by_kind())
    text += "\n\nerror by kind (before issue 28)\n" + kind_summary_table(result.before_by_kind())
    return text


def leave_one_out_table(checks: Mapping[str, Sequence[Any]]) -> str:
    """Leave-one-out refits: each left-out target, what the refit predicts, the error."""
    rows = [
        (group, r.name, _num(r.published), _num(r.predicted), f"{r.error:+.1%}")
        for group, group_rows in checks.items()
        for r in group_rows
    ]
    return "leave-one-out refits (target left out, then predicted)\n" + _table(
        ["check", "left out", "published", "refit predicts", "error"], rows
    )


def plot_tiers(
    path: str | Path, rows: Sequence[Mapping[str, Any]], *, title: str | None = None
) -> Path:
    """Write a PNG of tokens/s and task time by tier and model; `title` (e.g. the task
    simulated) heads the chart.

    ``rows`` are mappings with ``model``, ``tier``, ``tokens_per_second`` and
    ``total_seconds`` (e.g. ``Prediction.to_dict()`` results). Uses the Agg backend.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    tier_colours = {
        "flex": "#9aa5b1",
        "standard": "#3b7dd8",
        "priority": "#8a4fd8",
        "ultrafast": "#d8843b",
    }
    labels = [f"{r['model']} / {r['tier']}" for r in rows]
    colours = [tier_colours.get(r["tier"], "#555555") for r in rows]
    ys = list(range(len(rows)))[::-1]  # first row on top
    height = 1.2 + 0.32 * len(rows) + (0.4 if title else 0.0)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, height), sharey=True)
    for ax, key, heading, fmt in (
        (ax1, "tokens_per_second", "Decode speed per stream (tokens/s, log scale)", "{:,.0f}"),
        (ax2, "total_seconds", "Task time (s)", "{:,.1f}"),
    ):
        values = [r[key] for r in rows]
        ax.barh(ys, values, color=colours)
        for y, v in zip(ys, values, strict=True):
            ax.text(v, y, " " + fmt.format(v), va="center", fontsize=7)
        ax.set_title(heading, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.15)
    ax1.set_xscale("log")
    ax1.set_yticks(ys, labels, fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for t, c in tier_colours.items()]
    fig.legend(handles, list(tier_colours), loc="lower center", ncol=4, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# Marker colour of an own hold-out figure: hardware and model kind.
_KIND_COLOURS = {
    ("gpu", "dense"): "#3b7dd8",
    ("gpu", "moe"): "#8a4fd8",
    ("wafer", "dense"): "#d8843b",
    ("wafer", "moe"): "#c0392b",
}


def own_holdout_points(result: OwnHoldoutResult) -> list[tuple[str, float | None, float | None]]:
    """(label, predicted / published now, before) per figure, the largest error first;
    None where a figure is not expressible (now) or had no before value. What
    :func:`plot_own_holdout` draws."""
    rows = sorted(result.rows, key=lambda r: -abs(r.error) if r.error is not None else 0.0)
    points = []
    for r in rows:
        before = r.before_error if isinstance(r.before_error, float) else None
        points.append(
            (
                r.label,
                None if r.error is None else 1.0 + r.error,
                None if before is None else 1.0 + before,
            )
        )
    return points


def plot_own_holdout(path: str | Path, result: OwnHoldoutResult) -> Path:
    """Write a PNG of issue 28's own hold-out: one row per figure, predicted / published
    on a log axis, now (filled, coloured by GPU/wafer and dense/MoE) and before issue 28
    (hollow), with the goal's 12 % and 35 % bands. Uses the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    points = own_holdout_points(result)
    kinds = {r.label: r.kind for r in result.rows}
    ys = list(range(len(points)))[::-1]
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.24 * len(points)))
    ax.axvspan(1 / 1.35, 1.35, color="#e8f5e9", zorder=0)
    ax.axvspan(1 / 1.12, 1.12, color="#c8e6c9", zorder=0)
    ax.axvline(1.0, color="#2e7d32", lw=0.8)
    for y, (label, now, before) in zip(ys, points, strict=True):
        kind = kinds[label]
        colour = _KIND_COLOURS[(kind["hardware"], kind["model"])]
        if before is not None:
            ax.plot(before, y, "o", mfc="none", mec="#9aa5b1", ms=6)
        if now is not None:
            if before is not None:
                ax.plot([before, now], [y, y], color="#d0d4d9", lw=0.8, zorder=1)
            ax.plot(now, y, "o", color=colour, ms=6, zorder=3)
    ax.set_xscale("log")
    ticks = [
        t
        for t in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
        if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]
    ]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks], fontsize=8)
    ax.minorticks_off()
    ax.set_yticks(ys, [p[0] for p in points], fontsize=7)
    ax.set_xlabel("predicted / published (log); bands: within 12 % and 35 %", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    med, top = result.median_abs_error, result.max_abs_error
    summary = "" if med is None else f": median |error| {med:.1%}, max {top:.1%}"
    ax.set_title(f"Issue 28's own hold-out, {len(points)} figures{summary}", fontsize=10)
    handles = [
        plt.Line2D([], [], marker="o", ls="", color=c, label=f"{h} / {m}")
        for (h, m), c in _KIND_COLOURS.items()
    ]
    handles.append(
        plt.Line2D([], [], marker="o", ls="", mfc="none", mec="#9aa5b1", label="before issue 28")
    )
    ax.legend(handles=handles, fontsize=7, loc="upper left", frameon=True)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

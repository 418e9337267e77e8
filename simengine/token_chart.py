"""A chart of where a stream's time per output token goes (``predict --plot``).

The parts are :func:`simengine.perf.token_parts`; this module only draws them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# Colours of the parts of a token's time (simengine.perf.token_parts), GPU and wafer.
_PART_COLOURS = {
    "attention": "#3b7dd8", "weight_gemms": "#8a4fd8", "collectives": "#2e9e6b",
    "kernel_launches": "#9aa5b1", "drafting": "#d8843b", "host_beyond_gpu": "#c0392b",
    "prefill_riding": "#e0b341", "transport": "#555555", "weights": "#8a4fd8",
    "kv_read": "#3b7dd8", "pipeline_pass": "#2e9e6b", "speculation": "#d8843b",
}  # fmt: skip


def plot_token_parts(
    path: str | Path, rows: Sequence[tuple[str, Mapping[str, float]]], *, title: str | None = None
) -> Path:
    """Write a PNG of where a stream's time per output token goes: one stacked bar per
    row (``rows``: (label, ``time_per_output_token_parts``), e.g. one per concurrency),
    each part in ms. Uses the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    parts = [p for p in _PART_COLOURS if any(r[1].get(p, 0.0) > 0 for r in rows)]
    ys = list(range(len(rows)))[::-1]  # first row on top
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.4 * len(rows) + (0.4 if title else 0.0)))
    left = [0.0] * len(rows)
    for part in parts:
        widths = [r[1].get(part, 0.0) * 1e3 for r in rows]
        ax.barh(ys, widths, left=left, color=_PART_COLOURS[part], label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in zip(ys, left, strict=True):
        ax.text(total, y, f" {total:,.3g} ms", va="center", fontsize=7)
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=8)
    ax.set_xlabel("time per output token (ms)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.12)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(rows) > 3 else -0.35),
              ncol=min(len(parts), 5), fontsize=8, frameon=False)  # fmt: skip
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

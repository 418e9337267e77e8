"""PNG charts as data: URIs for admin pages (matplotlib, headless)."""

from __future__ import annotations

import base64
import io
from contextlib import contextmanager


@contextmanager
def png_figure(result: list[str], **subplots):
    """`with png_figure(out, figsize=...) as (fig, axes):` draws on a new figure and
    appends its PNG, as a data: URI, to `out` when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        result.append("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    finally:
        plt.close(fig)

"""How times, durations and credits are written, for the API and for people."""

from __future__ import annotations

import datetime as dt


def iso(value: dt.datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z` (the API's timestamps); None stays None."""
    return value.isoformat().replace("+00:00", "Z") if value else None


def duration_text(seconds: float) -> str:
    """83 s, 12.5 min, 9.4 h: short enough for an error message."""

    def num(x: float) -> str:
        return f"{x:.1f}".rstrip("0").rstrip(".")

    if seconds < 120:
        return f"{num(seconds)} s"
    if seconds < 7200:
        return f"{num(seconds / 60)} min"
    return f"{num(seconds / 3600)} h"

"""How times, durations and credits are written, for the API and for people."""

from __future__ import annotations

import datetime as dt
import math
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal

# Names echoed back in errors, bounded (defined in the catalog, which imports no routing).
from httpedge.text import ECHO_MAX, cut, echo  # noqa: F401


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


# --- For the API's JSON: one place for how a computed number is sent ------------------

# Significant digits of a computed float in the API's JSON: enough for any timing or
# rate the simulation can tell apart, and no `1.2000000000000002` from float arithmetic.
JSON_DIGITS = 6
# The format spec built once: a nested f-string spec costs 3x the formatting itself, and
# a quote sends ~70 numbers (bench/bench_accept.py measured it on the quote path).
_JSON_SPEC = f".{JSON_DIGITS}g"


def json_number(value):
    """A computed float as the API sends it: to JSON_DIGITS significant digits
    (1.2000000000000002 -> 1.2, 764.9315976 -> 764.932). Anything else (ints, None,
    bools, non-finite floats) as it is."""
    if type(value) is float and math.isfinite(value):
        return float(format(value, _JSON_SPEC))
    return value


def timings_json(timings: dict | None) -> dict | None:
    """A dict of timings (a prediction, a simulated run) as the API sends it: each float
    by json_number, and no `*_seconds` below 0 (a wait that is a difference of times
    can come out a hair negative). None stays None."""
    if timings is None:
        return None
    out = {}
    for key, value in timings.items():
        kind = type(value)
        if kind is float:
            if value < 0 and key.endswith("_seconds"):
                value = 0.0
            out[key] = json_number(value)
        elif kind is int and value < 0 and key.endswith("_seconds"):
            out[key] = 0.0
        else:
            out[key] = value
    return out


# --- For people (admin pages, charts): one place for how a number reads -----------------


def thousands(value: float | int | None, decimals: int = 0) -> str:
    """337786 -> '337,786'; with `decimals`, '1,234.5'. None reads '-'."""
    if value is None:
        return "-"
    return f"{float(value):,.{decimals}f}" if decimals else f"{round(float(value)):,}"


def credits_text(value) -> str:
    """Credits to 2 decimals with thousands separators: '1,234.50'. None reads '-'."""
    return "-" if value is None else f"{float(value):,.2f}"


def rows_to_total(parts: list, places: int = 2) -> tuple[list[Decimal], Decimal]:
    """Amounts of a table's rows rounded to `places` so that they add up to their exact
    sum rounded the same way (largest remainder: the rows nearest to rounding up take
    the leftover cents): (the rows, the total), for a table whose rows must sum to the
    total under them. 3 x 0.333 -> [0.34, 0.33, 0.33], 1.00 (not 3 x 0.33 over 1.00)."""
    step = Decimal(1).scaleb(-places)
    exact = [Decimal(str(p)) for p in parts]
    total = sum(exact, Decimal(0)).quantize(step, rounding=ROUND_HALF_UP)
    rows = [p.quantize(step, rounding=ROUND_FLOOR) for p in exact]
    leftover = int((total - sum(rows, Decimal(0))) / step)
    by_remainder = sorted(range(len(exact)), key=lambda i: (rows[i] - exact[i], i))
    for i in by_remainder[:leftover]:
        rows[i] += step
    return rows, total


def change_text(ratio: float | None) -> str:
    """A change as a ratio after/before: '+3 %', '-12 %', '0 %'; from twice as much on,
    a multiple ('2.5x', '17x'), since '+1613 %' reads badly. None (nothing before) is '-'."""
    if ratio is None:
        return "-"
    if ratio >= 10:
        return f"{ratio:,.0f}x"
    if ratio >= 2:
        return f"{ratio:.1f}".rstrip("0").rstrip(".") + "x"
    pct = round((ratio - 1) * 100)
    return f"{pct:+d} %" if pct else "0 %"


def duration_long(seconds: float | None) -> str:
    """Durations for people, to the second: '0.8 s', '44 s', '7 min 44 s', '2 h 5 min',
    '3 d 4 h'. None reads '-'."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 10:
        return f"{s:.1f}".rstrip("0").rstrip(".") + " s"
    total = round(s)
    if total < 60:
        return f"{total} s"
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min {secs} s" if secs else f"{minutes} min"


def percent_text(pct: float | None) -> str:
    """A percentage (already in percent): '85 %', '4.2 %', '< 0.1 %' for a trace, '0 %'."""
    if pct is None:
        return "-"
    p = float(pct)
    if p == 0:
        return "0 %"
    if abs(p) < 0.1:
        return "< 0.1 %"
    return (f"{p:.0f}" if abs(p) >= 10 else f"{p:.1f}") + " %"


def moment(value: dt.datetime | None) -> str:
    """A time for people, in UTC to the second: '2026-12-03 12:53:04 UTC'."""
    if value is None:
        return "-"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

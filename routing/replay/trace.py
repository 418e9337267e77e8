"""Reading a request trace in the Azure LLM inference trace format.

One line per request: ``TIMESTAMP`` (arrival, UTC, ``YYYY-MM-DD HH:MM:SS[.fraction]``,
any number of fractional digits), ``ContextTokens`` (the prompt), ``GeneratedTokens``
(the output). The format of the Azure Public Dataset's "Azure LLM inference trace 2023"
(github.com/Azure/AzurePublicDataset, CC-BY 4.0; data/traces/README.md).
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceError(ValueError):
    """The file is not a trace in this format (the message names the line)."""


@dataclass(frozen=True)
class TraceRequest:
    arrival: float  # seconds after the trace's first request
    input_tokens: int
    output_tokens: int


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch (UTC) of a trace timestamp, to the microsecond."""
    text = text.strip()
    whole, _, fraction = text.partition(".")
    try:
        base = dt.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        raise TraceError(f"bad TIMESTAMP {text!r} (want YYYY-MM-DD HH:MM:SS.fff)") from None
    if fraction and not fraction.isdigit():
        raise TraceError(f"bad TIMESTAMP {text!r} (want YYYY-MM-DD HH:MM:SS.fff)")
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return base.timestamp() + micros / 1e6


def _count(text: str, column: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise TraceError(f"{column} must be a whole number, got {text!r}") from None
    if value < 1:
        raise TraceError(f"{column} must be at least 1, got {value}")
    return value


def read_trace(path: str | Path, *, limit: int | None = None) -> list[TraceRequest]:
    """The first `limit` requests of the trace (all by default), by arrival, with
    arrivals in seconds after the first one. Raises TraceError naming the bad line."""
    requests: list[tuple[float, int, int]] = []
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header[:3]) != COLUMNS:
            raise TraceError(f"{path}: the first line must be {','.join(COLUMNS)}")
        for line_no, row in enumerate(reader, start=2):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 3:
                raise TraceError(f"{path} line {line_no}: want 3 columns, got {len(row)}")
            try:
                requests.append(
                    (
                        parse_timestamp(row[0]),
                        _count(row[1], "ContextTokens"),
                        _count(row[2], "GeneratedTokens"),
                    )
                )
            except TraceError as exc:
                raise TraceError(f"{path} line {line_no}: {exc}") from None
    if not requests:
        raise TraceError(f"{path}: no requests")
    requests.sort(key=lambda r: r[0])  # stable: equal arrivals keep the file's order
    if limit is not None:
        requests = requests[:limit]
    first = requests[0][0]
    return [TraceRequest(round(t - first, 6), i, o) for t, i, o in requests]


def span_seconds(requests: list[TraceRequest]) -> float:
    """From the first arrival to the last (at least one second: a burst still has a rate)."""
    return max(1.0, requests[-1].arrival - requests[0].arrival)

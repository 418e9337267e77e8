"""The arguments of a batch: completion window, start time, endpoint, metadata."""

from __future__ import annotations

import datetime as dt
import re

from routing.batches.errors import BatchError
from routing.core.formats import echo

ENDPOINTS = ("/v1/jobs", "/v1/chat/completions", "/v1/responses")
MIN_WINDOW_SECONDS = 60.0
MAX_WINDOW_SECONDS = 7 * 86400.0
MAX_START_AHEAD = dt.timedelta(days=31)

_WINDOW = re.compile(r"^([0-9]+)\s*([smhd])$")  # after strip() and lower()
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}

# The same rule as one regular expression, for the OpenAPI schema (issue 23: the schema
# tells the truth, so a schema-valid window is never refused): a whole number (leading
# zeros allowed) of seconds, minutes, hours or days from 1 minute to 7 days, any case,
# spaces around it or before the unit. tests/routing/batches/test_window_pattern.py checks
# it against parse_window.
_AMOUNTS = {
    "s": "[6-9][0-9]|[1-9][0-9]{2,4}|[1-5][0-9]{5}|60[0-3][0-9]{3}|604[0-7][0-9]{2}|604800",
    "m": "[1-9][0-9]{0,3}|100[0-7][0-9]|10080",
    "h": "[1-9][0-9]?|1[0-5][0-9]|16[0-8]",
    "d": "[1-7]",
}
WINDOW_PATTERN = (
    r"^\s*0*(?:"
    + "|".join(rf"(?:{amount})\s*[{unit}{unit.upper()}]" for unit, amount in _AMOUNTS.items())
    + r")\s*$"
)


def parse_window(text: str | None) -> tuple[str, float]:
    """'24h' -> ('24h', 86400.0). A whole number of s, m, h or d; from 1 minute to 7 days
    (WINDOW_PATTERN says the same)."""
    text = (text or "24h").strip().lower()
    m = _WINDOW.match(text)
    if not m:
        raise BatchError(
            f"completion_window {echo(text)} is not a duration like 30m, 8h, 24h or 2d "
            "(a whole number of s, m, h or d).",
            param="completion_window",
        )
    seconds = float(int(m.group(1)) * _UNIT[m.group(2)])
    if not MIN_WINDOW_SECONDS <= seconds <= MAX_WINDOW_SECONDS:
        raise BatchError(
            f"completion_window must be between 1m and 7d, got {text}.", param="completion_window"
        )
    return text, seconds


def parse_start(value, now: dt.datetime) -> dt.datetime:
    """None or 'now' -> now; an ISO 8601 time (UTC if no offset), at most 31 days ahead.
    A time in the past means now."""
    if value in (None, "", "now"):
        return now
    if isinstance(value, dt.datetime):
        at = value
    else:
        try:
            at = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise BatchError(
                f"start_at {echo(value)} is not an ISO 8601 time (2026-12-03T02:00:00Z) or 'now'.",
                param="start_at",
            ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    if at > now + MAX_START_AHEAD:
        raise BatchError("start_at is more than 31 days ahead.", param="start_at")
    return max(at, now)


def check_endpoint(endpoint: str) -> None:
    if endpoint not in ENDPOINTS:
        raise BatchError(
            f"endpoint {echo(endpoint)} is not batchable; use one of {', '.join(ENDPOINTS)}.",
            param="endpoint",
        )


def check_metadata(metadata, *, max_keys: int = 16) -> None:
    """OpenAI's rule: at most 16 string keys (64 characters) with string values (512)."""
    if metadata is not None and (
        not isinstance(metadata, dict)
        or len(metadata) > max_keys
        or any(
            not isinstance(k, str) or not isinstance(v, str) or len(k) > 64 or len(v) > 512
            for k, v in metadata.items()
        )
    ):
        raise BatchError(
            f"metadata is at most {max_keys} string keys (64 characters) with string values (512).",
            param="metadata",
        )

"""Values from hand-written queries (the hot paths skip the ORM): the same Python types
on PostgreSQL and SQLite."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal


def as_decimal(value) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def as_utc(value) -> dt.datetime | None:
    """An aware datetime: SQLite's cursor gives naive UTC datetimes (or text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)

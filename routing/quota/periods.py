"""Quota periods: the calendar period (UTC) a package's spend counts in."""

from __future__ import annotations

import datetime as dt

from routing.models import QuotaPackage


def period_start_for(period: str, at: dt.datetime) -> dt.datetime:
    """The calendar period (UTC) containing `at`: day, ISO week (Monday), month."""
    at = at.astimezone(dt.UTC)
    day = dt.datetime(at.year, at.month, at.day, tzinfo=dt.UTC)
    if period == QuotaPackage.Period.WEEK:
        return day - dt.timedelta(days=day.weekday())
    if period == QuotaPackage.Period.MONTH:
        return day.replace(day=1)
    return day


def next_period_start(period: str, start: dt.datetime) -> dt.datetime | None:
    if period == QuotaPackage.Period.ONCE:
        return None
    if period == QuotaPackage.Period.DAY:
        return start + dt.timedelta(days=1)
    if period == QuotaPackage.Period.WEEK:
        return start + dt.timedelta(days=7)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start.replace(year=year, month=month, day=1)

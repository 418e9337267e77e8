"""The status rule: a model version's status at an instant, derived from its dates.

Status is never stored. It follows from the dates (UTC calendar days):

- `upcoming`   before `released_on`
- `retired`    from 00:00 UTC on `retires_on`
- `deprecated` a retirement is scheduled and announced, the model still serves
- `preview`    released, not yet generally available (a preview kind without a GA date
               stays a preview)
- `active`     everything else

`model_status` (one object) and `status_q` (a queryset filter) implement the same rule;
a test checks they agree for every model on every boundary day.

This is the lowest module of `catalog`: it imports no other catalog module, so both
`catalog.models` (`ModelVersion.status`) and `catalog.lifecycle` (which re-exports every
name here) can use it without an import cycle.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from django.db.models import Q
from django.utils import timezone

from httpedge.text import echo

UPCOMING = "upcoming"
PREVIEW = "preview"
ACTIVE = "active"
DEPRECATED = "deprecated"
RETIRED = "retired"
STATUSES = (UPCOMING, PREVIEW, ACTIVE, DEPRECATED, RETIRED)

# The value of `ModelVersion.Kind.PREVIEW` (the model's choices are built from it).
PREVIEW_KIND = "preview"


class LifecycleError(ValueError):
    """A lifecycle change that cannot be: the message says why, for a person."""


class Dated(Protocol):
    """What the status rule reads of a model version (a `catalog.models.ModelVersion`)."""

    kind: str
    released_on: dt.date
    generally_available_on: dt.date | None
    retirement_announced_on: dt.date | None
    retires_on: dt.date | None


def utc_today(at: dt.datetime | None = None) -> dt.date:
    at = at or timezone.now()
    return at.astimezone(dt.UTC).date()


def day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC)


def model_status(model: Dated, at: dt.datetime | None = None) -> str:
    today = utc_today(at)
    if today < model.released_on:
        return UPCOMING
    if model.retires_on is not None and today >= model.retires_on:
        return RETIRED
    if model.retires_on is not None and (
        model.retirement_announced_on is None or model.retirement_announced_on <= today
    ):
        return DEPRECATED
    ga = model.generally_available_on
    if (ga is not None and today < ga) or (ga is None and model.kind == PREVIEW_KIND):
        return PREVIEW
    return ACTIVE


def status_q(status: str, at: dt.datetime | None = None) -> Q:
    """The queryset filter selecting models whose `model_status` is `status`."""
    today = utc_today(at)
    released = Q(released_on__lte=today)
    retired = Q(retires_on__lte=today)
    deprecated = Q(retires_on__gt=today) & (
        Q(retirement_announced_on__isnull=True) | Q(retirement_announced_on__lte=today)
    )
    preview = Q(generally_available_on__gt=today) | Q(
        generally_available_on__isnull=True, kind=PREVIEW_KIND
    )
    if status == UPCOMING:
        return ~released
    if status == RETIRED:
        return released & retired
    if status == DEPRECATED:
        return released & deprecated
    if status == PREVIEW:
        return released & ~retired & ~deprecated & preview
    if status == ACTIVE:
        return released & ~retired & ~deprecated & ~preview
    raise LifecycleError(f"Unknown status {echo(status)}; expected one of {', '.join(STATUSES)}.")


def is_serving(model: Dated, at: dt.datetime | None = None) -> bool:
    return model_status(model, at) in (PREVIEW, ACTIVE, DEPRECATED)

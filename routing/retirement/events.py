"""The retirement's webhook events, for each account told of it (its retirement notice,
routing.retirement.notices, which also emits `model.deprecated`):

- `model.retiring`: 7 days before the retirement date, and again the day before
  (`data.days_left`); an announcement made later than 7 days before sends the nearer
  one only;
- `model.retired`: on the retirement date (00:00 UTC), by the retirement day's work
  (routing.retirement.day, beat every minute, or the admin's retire-now).

Each once per account, model, date and milestone (the event's key)."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing.models import Notice, WebhookEvent
from routing.webhooks.events import event_emit

RETIRING_MILESTONES = (7, 1)  # days before the retirement date
RETIRED_WITHIN = dt.timedelta(days=2)  # how long after the date a missed event is sent


def retirement_event_data(model: ModelVersion, **extra) -> dict:
    return {
        "model": model.slug,
        "retires_on": model.retires_on.isoformat(),
        "successor": model.successor.slug if model.successor_id else None,
        "successor_tier": model.successor_tier.slug if model.successor_tier_id else None,
        **extra,
    }


def _emit_to_told(model: ModelVersion, kind: str, key: str, data: dict) -> int:
    """Emit to every account with a retirement notice of the model's date that has not
    had this event yet."""
    accounts = set(
        Notice.objects.filter(
            kind=Notice.RETIREMENT, model=model, retires_on=model.retires_on
        ).values_list("account_id", flat=True)
    )
    accounts -= set(
        WebhookEvent.objects.filter(account_id__in=accounts, key=key).values_list(
            "account_id", flat=True
        )
    )
    sent = 0
    for account_id in sorted(accounts):
        with transaction.atomic():
            sent += event_emit(account_id=account_id, type=kind, key=key, data=data) is not None
    return sent


def retirement_events_due(*, at: dt.datetime | None = None) -> int:
    """`model.retiring` for deprecated models inside a milestone, `model.retired` for
    models retired in the last RETIRED_WITHIN (beat; idempotent)."""
    at = at or timezone.now()
    today = lifecycle.utc_today(at)
    sent = 0
    retiring = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.DEPRECATED, at),
        retires_on__lte=today + dt.timedelta(days=max(RETIRING_MILESTONES)),
    ).select_related("successor", "successor_tier")
    for model in retiring:
        days_left = (model.retires_on - today).days
        milestone = min(m for m in RETIRING_MILESTONES if days_left <= m)
        key = f"model.retiring:{model.pk}:{model.retires_on}:{milestone}d"
        data = retirement_event_data(model, days_left=days_left)
        sent += _emit_to_told(model, "model.retiring", key, data)
    retired = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.RETIRED, at),
        retires_on__gte=today - RETIRED_WITHIN,
    ).select_related("successor", "successor_tier")
    for model in retired:
        sent += model_retired_emit(model=model)
    return sent


def model_retired_emit(*, model: ModelVersion) -> int:
    """`model.retired` to every account told of the retirement (once each)."""
    key = f"model.retired:{model.pk}:{model.retires_on}"
    return _emit_to_told(model, "model.retired", key, retirement_event_data(model))

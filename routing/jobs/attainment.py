"""Deadline attainment: what share of finished jobs met their deadline, and what share
finished within the P90 the router promised, per tier and model over a window. One
reading for `/metrics`, the admin home's "Needs attention" and the admin job list."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Count, F, Q
from django.utils import timezone

from routing.models import Job

WINDOW = dt.timedelta(hours=1)
# The router promises a P90 (simengine.PROMISE_QUANTILE): a tier or model whose jobs
# meet their deadline less often than this over the window did not keep its promise.
PROMISED_ATTAINMENT = 0.9
# Fewer finished jobs than this say nothing either way (one miss in three is noise).
MIN_JOBS = 10


@dataclass(frozen=True)
class Attainment:
    tier: str
    model: str
    tier_id: int
    model_id: int
    finished: int
    met: int
    within_promise: int

    @property
    def share_met(self) -> float:
        return self.met / self.finished if self.finished else 1.0

    @property
    def share_within_promise(self) -> float:
        return self.within_promise / self.finished if self.finished else 1.0

    @property
    def below_promise(self) -> bool:
        return self.finished >= MIN_JOBS and self.share_met < PROMISED_ATTAINMENT


def attainment(at: dt.datetime | None = None, window: dt.timedelta = WINDOW) -> list[Attainment]:
    """Per tier and model, the jobs that finished in `window` before `at` with an
    outcome (succeeded): how many met their deadline and how many finished within
    their promised P90."""
    at = at or timezone.now()
    rows = (
        Job.objects.filter(
            deadline_met__isnull=False, finished_at__gt=at - window, finished_at__lte=at
        )
        .values("tier_id", "model_id", "tier__slug", "model__slug")
        .annotate(
            n=Count("pk"),
            met=Count("pk", filter=Q(deadline_met=True)),
            within=Count("pk", filter=Q(completion_seconds__lte=F("promised_seconds"))),
        )
        .order_by("tier__slug", "model__slug")
    )
    return [
        Attainment(
            r["tier__slug"],
            r["model__slug"],
            r["tier_id"],
            r["model_id"],
            r["n"],
            r["met"],
            r["within"],
        )
        for r in rows
    ]

"""What needs an operator's attention now (the admin home page lists it): tiers or models
that did not keep their deadline promise over the last hour, retirements coming (flagged
when inside their notice period), pools near capacity, notices whose webhook delivery
failed, webhook deliveries that failed, budget thresholds crossed in the last day, and
batches at risk of missing their window. Reads only."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, F, Q
from django.utils import timezone

from catalog import lifecycle
from catalog.models import HardwarePool, ModelVersion, NoticePolicy
from routing.core.formats import duration_long
from routing.jobs.attainment import Attainment, attainment
from routing.models import Batch, BudgetAlert, Notice, WebhookDelivery
from routing.router.snapshot import pool_loads

NEAR_CAPACITY = 0.85  # the same line the retirement impact draws ("fits, under 85 %")
RETIREMENTS_AHEAD = dt.timedelta(days=180)


@dataclass(frozen=True)
class Retiring:
    model: ModelVersion
    days_left: int
    notice_days: int | None  # the least notice its kind gets (NoticePolicy), if any

    @property
    def inside_notice(self) -> bool:
        return self.notice_days is not None and self.days_left < self.notice_days


@dataclass(frozen=True)
class BusyPool:
    pool: HardwarePool
    utilisation: float


@dataclass(frozen=True)
class FailedNotices:
    model: ModelVersion
    count: int


@dataclass(frozen=True)
class BatchAtRisk:
    batch: Batch
    why: str


@dataclass
class Attention:
    retiring: list[Retiring]
    pools: list[BusyPool]
    failed_notices: list[FailedNotices]
    batches: list[BatchAtRisk]
    late: list[Attainment] = field(default_factory=list)
    budget_alerts: list[BudgetAlert] = field(default_factory=list)
    failed_deliveries: int = 0

    def __bool__(self) -> bool:
        return bool(
            self.retiring
            or self.pools
            or self.failed_notices
            or self.batches
            or self.late
            or self.budget_alerts
            or self.failed_deliveries
        )


def attention(at: dt.datetime | None = None) -> Attention:
    at = at or timezone.now()
    return Attention(
        retiring=_retiring(at),
        pools=_busy_pools(),
        failed_notices=_failed_notices(),
        batches=_batches_at_risk(at),
        late=[a for a in attainment(at) if a.below_promise],
        budget_alerts=_budget_alerts(at),
        failed_deliveries=WebhookDelivery.objects.filter(
            state=WebhookDelivery.State.FAILED
        ).count(),
    )


BUDGET_ALERTS_SHOWN = dt.timedelta(days=1)


def _budget_alerts(at: dt.datetime) -> list[BudgetAlert]:
    """Budget thresholds crossed in the last day: the highest per package or key."""
    recent = (
        BudgetAlert.objects.filter(created_at__gte=at - BUDGET_ALERTS_SHOWN)
        .select_related("account", "package", "api_key")
        .order_by("subject", "-threshold")
    )
    seen, out = set(), []
    for alert in recent[:200]:
        if alert.subject not in seen:
            seen.add(alert.subject)
            out.append(alert)
    return sorted(out, key=lambda a: -a.threshold)[:20]


def _retiring(at: dt.datetime) -> list[Retiring]:
    today = lifecycle.utc_today(at)
    notice = dict(NoticePolicy.objects.values_list("kind", "minimum_days"))
    models = ModelVersion.objects.filter(
        retires_on__gt=today, retires_on__lte=today + RETIREMENTS_AHEAD
    ).select_related("successor", "successor_tier")
    return [
        Retiring(m, (m.retires_on - today).days, notice.get(m.kind))
        for m in models.order_by("retires_on", "slug")
    ]


def _busy_pools() -> list[BusyPool]:
    loads = {pk: u for pk, u in pool_loads().items() if u >= NEAR_CAPACITY}
    pools = HardwarePool.objects.in_bulk(list(loads))
    return sorted(
        (BusyPool(pools[pk], u) for pk, u in loads.items() if pk in pools),
        key=lambda p: -p.utilisation,
    )


def _failed_notices() -> list[FailedNotices]:
    rows = (
        Notice.objects.filter(delivery=Notice.Delivery.FAILED)
        .values("model")
        .annotate(n=Count("id"))
        .order_by("-n")
    )
    models = ModelVersion.objects.in_bulk([r["model"] for r in rows])
    return [FailedNotices(models[r["model"]], r["n"]) for r in rows if r["model"] in models]


def _batches_at_risk(at: dt.datetime) -> list[BatchAtRisk]:
    """Running batches predicted to finish after their window ends, planned as not
    feasible, or whose window has already ended."""
    active = Batch.objects.filter(
        status__in=(Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS)
    ).select_related("account")
    risky = active.filter(
        Q(predicted_finish_at__gt=F("expires_at")) | Q(plan__feasible=False) | Q(expires_at__lte=at)
    ).order_by("expires_at")[:20]
    out = []
    for b in risky:
        if b.expires_at <= at:
            why = "window already ended"
        elif b.predicted_finish_at and b.predicted_finish_at > b.expires_at:
            late = (b.predicted_finish_at - b.expires_at).total_seconds()
            why = f"predicted to finish {duration_long(late)} after its window ends"
        else:
            why = "no plan fits its window"
        out.append(BatchAtRisk(b, why))
    return out

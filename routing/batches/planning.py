"""Planning a batch and starting it: its queued requests grouped by task shape, planned
(routing.batches.planner, pure) on the capacity the interactive load and the other
running batches leave; at start, planned again on the load of that moment, each lane's
cost reserved on the account's packages and the requests given their lanes."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from catalog.models import ModelVersion, Tier
from routing import quota
from routing.batches.errors import error_entry
from routing.batches.finish import batch_end, batch_fail, requests_close
from routing.batches.planner import BatchGroup, Plan, PlanError, plan_batch
from routing.batches.send import send_advance
from routing.core.clock import sim_scale, wall
from routing.core.formats import duration_text
from routing.models import Batch, BatchRequest
from routing.router.snapshot import model_option, pool_loads

BATCH_DISCOUNT = Decimal("0.5")  # of the Standard price, on Flex and Standard capacity
# Batches that hold streams of the pools (their plan's lanes).
ACTIVE = (Batch.Status.IN_PROGRESS, Batch.Status.CANCELLING)

GroupKey = tuple[int, int, int, int, float]  # model id, input, output, turns, tool s


def request_groups(requests) -> tuple[list[GroupKey], list[int]]:
    """The distinct task shapes of some requests (a queryset), with their counts."""
    rows = (
        requests.values("model_id", "input_tokens", "output_tokens", "turns", "tool_seconds")
        .annotate(n=Count("id"))
        .order_by("model_id", "input_tokens", "output_tokens", "turns", "tool_seconds")
    )
    keys, counts = [], []
    for r in rows:
        keys.append(
            (r["model_id"], r["input_tokens"], r["output_tokens"], r["turns"], r["tool_seconds"])
        )
        counts.append(r["n"])
    return keys, counts


def batch_loads(exclude: Batch | None = None) -> dict[int, float]:
    """Share of each pool taken before this batch: interactive work (outside traffic and
    our jobs, see routing.router.snapshot.pool_loads) plus the streams other running
    batches hold."""
    loads = dict(pool_loads())
    others = Batch.objects.filter(status__in=ACTIVE)
    if exclude is not None:
        others = others.exclude(pk=exclude.pk)
    for plan in others.values_list("plan", flat=True):
        for lane in (plan or {}).get("lanes", []):
            loads[lane["pool_id"]] = (
                loads.get(lane["pool_id"], 0.0) + lane["streams"] * lane["stream_share"]
            )
    return loads


def batch_plan(
    batch: Batch, *, at: dt.datetime, window_seconds: float, requests=None, loads=None
) -> Plan | None:
    """Plan the batch's queued requests (or `requests`, a queryset of them) for a window
    on the capacity `loads` leaves (default: batch_loads). None when none is queued."""
    if requests is None:
        requests = batch.requests.filter(status=BatchRequest.Status.QUEUED)
    keys, counts = request_groups(requests)
    if not keys:
        return None
    models = {m.pk: m for m in ModelVersion.objects.filter(pk__in={k[0] for k in keys})}
    groups = [
        BatchGroup(
            model=model_option(models[k[0]]),
            input_tokens=k[1],
            output_tokens=k[2],
            turns=k[3],
            tool_seconds=k[4],
            count=n,
        )
        for k, n in zip(keys, counts, strict=True)
    ]
    try:
        return plan_batch(
            groups,
            window_seconds=window_seconds,
            loads=batch_loads(exclude=batch) if loads is None else loads,
            batch_discount=BATCH_DISCOUNT,
            today=at.date(),
        )
    except PlanError as exc:
        return Plan.refused(window_seconds, str(exc))


def plan_json(*, plan: Plan, batch: Batch) -> dict:
    """The plan as stored and shown: per tier (lane) its streams, requests, cost and
    predicted makespan; the groups' assignments for the record."""
    body = plan.to_dict()
    lanes: dict[str, dict] = {}
    for a in plan.assignments:
        key = f"{a.model}/{a.tier}"
        lane = lanes.setdefault(
            key,
            {
                "key": key,
                "model": a.model,
                "tier": a.tier,
                "pool": a.pool,
                "pool_id": a.pool_id,
                "streams": a.streams,
                "stream_share": a.stream_share,
                "requests": 0,
                "cost": "0",
                "makespan_seconds": round(a.makespan_seconds, 3),
            },
        )
        lane["requests"] += a.count
        lane["cost"] = str(Decimal(lane["cost"]) + quota.credits(a.unit_cost) * a.count)
    body["lanes"] = list(lanes.values())
    body["time_scale"] = sim_scale()
    return body


def plan_refusal(*, plan: Plan) -> dict:
    """The error that fails a batch no plan fits: no capacity at all, or the window is
    shorter than the fastest plan."""
    if not math.isfinite(plan.fastest_makespan_seconds):
        return error_entry("no_capacity", plan.reason or "No pool has room for this batch.")
    return error_entry(
        "window_too_short",
        f"No plan finishes inside the window: the fastest plan needs "
        f"{duration_text(plan.fastest_makespan_seconds)} (predicted makespan "
        f"{plan.fastest_makespan_seconds:.0f} s); window {duration_text(plan.window_seconds)}.",
        param="completion_window",
    ) | {
        "fastest_makespan_seconds": round(plan.fastest_makespan_seconds, 3),
        "window_seconds": plan.window_seconds,
    }


# A batch validated and waiting for a `start_at` still to come: stored `validating`
# (OpenAI's status, which /v1 shows), shown `scheduled` on the native API.
SCHEDULED = "scheduled"


def waits_for_start(batch: Batch, at: dt.datetime | None = None) -> bool:
    """Whether the batch is validated and waits for its start (`scheduled`)."""
    return (
        batch.status == Batch.Status.VALIDATING
        and batch.validated_at is not None
        and batch.start_at > (at or timezone.now())
    )


def scheduled_q(at: dt.datetime | None = None) -> Q:
    """The batches `waits_for_start` is true of, as a filter."""
    return Q(
        status=Batch.Status.VALIDATING,
        validated_at__isnull=False,
        start_at__gt=at or timezone.now(),
    )


def batch_start(batch_id, *, at: dt.datetime | None = None) -> Batch | None:
    """Start a validated batch whose start time has come: plan again on the load of now
    and the time left, reserve the planned cost, give the requests their tiers.
    Idempotent: only a validated batch still `validating` starts."""
    at = at or timezone.now()
    with transaction.atomic():
        batch = (
            Batch.objects.select_for_update(of=("self",))
            .select_related("account")
            .filter(
                pk=batch_id,
                status=Batch.Status.VALIDATING,
                validated_at__isnull=False,
                start_at__lte=at,
            )
            .first()
        )
        if batch is None:
            return None
        if at >= batch.expires_at:  # beat was away past the whole window
            return _start_too_late(batch, at)
        left = (batch.expires_at - at).total_seconds() * sim_scale()
        plan = batch_plan(batch, at=at, window_seconds=max(left, 1e-3))
        if plan is not None and not plan.feasible:
            return batch_fail(batch=batch, errors=[plan_refusal(plan=plan)], at=at)
        if plan is not None:
            try:
                with transaction.atomic():
                    plan_assign(batch=batch, plan=plan, at=at)
            except quota.QuotaExhausted as exc:
                message = f"The plan costs {quota.credits(plan.cost)} credits: {exc}"
                return batch_fail(
                    batch=batch, errors=[error_entry("insufficient_quota", message)], at=at
                )
            batch.plan = plan_json(plan=plan, batch=batch)
            batch.predicted_cost = plan.cost
            batch.predicted_finish_at = at + wall(plan.makespan_seconds)
        batch.status = Batch.Status.IN_PROGRESS
        batch.in_progress_at = at
        batch.next_advance_at = at
        batch.save(
            update_fields=[
                "status",
                "in_progress_at",
                "plan",
                "predicted_cost",
                "predicted_finish_at",
                "next_advance_at",
            ]
        )
        transaction.on_commit(lambda: send_advance(batch.pk))
    return batch


def _start_too_late(batch: Batch, at: dt.datetime) -> Batch:
    """A batch whose whole window passed before it could start expires (under its lock)."""
    requests_close(
        batch=batch,
        requests=batch.requests.filter(status=BatchRequest.Status.QUEUED),
        status=BatchRequest.Status.EXPIRED,
        code="batch_expired",
        message="The batch's window ended before it could start.",
        at=at,
    )
    batch.refresh_from_db()
    batch_end(batch=batch, status=Batch.Status.EXPIRED, at=at)
    return batch


def _reference(batch: Batch, model: str, tier: str, suffix: str = "") -> str:
    return f"batch:{batch.pk}:{model}:{tier}{suffix}"


def plan_assign(
    *,
    batch: Batch,
    plan: Plan,
    at: dt.datetime,
    requests=None,
    suffix: str = "",
    rerouted_from: str = "",
) -> None:
    """Reserve each lane's cost and write the lane on its requests (the plan's counts per
    group, in line order). Raises QuotaExhausted (the caller's savepoint undoes all)."""
    if requests is None:
        requests = batch.requests.filter(status=BatchRequest.Status.QUEUED)
    keys, _ = request_groups(requests)
    tiers = {t.slug: t for t in Tier.objects.all()}
    models = {
        m.slug: m for m in ModelVersion.objects.filter(slug__in={a.model for a in plan.assignments})
    }
    reservations = _lanes_reserve(batch, plan, at, models, tiers, suffix)
    taken: dict[int, int] = defaultdict(int)  # group -> requests assigned so far
    group_ids: dict[int, list[int]] = {}
    parts = defaultdict(int)  # group -> assignments (a group split over tiers has several)
    for a in plan.assignments:
        parts[a.group] += 1

    def of_group(g: int):
        k = keys[g]
        return requests.filter(
            model_id=k[0], input_tokens=k[1], output_tokens=k[2], turns=k[3], tool_seconds=k[4]
        )

    for a in plan.assignments:
        update = {
            "tier_id": tiers[a.tier].pk,
            "pool_id": a.pool_id,
            "unit_cost": quota.credits(a.unit_cost),
            "slot_share": a.stream_share,
            "reservation": reservations[(a.model, a.tier)],
        }
        if rerouted_from:
            update |= {"model": models[a.model], "rerouted_from": rerouted_from}
        if parts[a.group] == 1:  # the whole group on one tier: one UPDATE
            of_group(a.group).update(**update)
            continue
        if a.group not in group_ids:  # split in line order
            group_ids[a.group] = list(
                of_group(a.group).order_by("line").values_list("pk", flat=True)
            )
        ids = group_ids[a.group][taken[a.group] : taken[a.group] + a.count]
        taken[a.group] += a.count
        for i in range(0, len(ids), 5000):
            BatchRequest.objects.filter(pk__in=ids[i : i + 5000]).update(**update)


def _lanes_reserve(batch: Batch, plan: Plan, at: dt.datetime, models, tiers, suffix: str):
    """One reservation per lane (model and tier) for its planned cost: {(model, tier): it}."""
    lane_cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for a in plan.assignments:
        lane_cost[(a.model, a.tier)] += quota.credits(a.unit_cost) * a.count
    reservations = {}
    for (model_slug, tier_slug), amount in lane_cost.items():
        m = models[model_slug]
        reservations[(model_slug, tier_slug)] = quota.quota_reserve_for(
            account=batch.account_id,
            model_id=m.pk,
            family_id=m.family_id,
            tier_id=tiers[tier_slug].pk,
            amount=amount,
            reference=_reference(batch, model_slug, tier_slug, suffix),
            at=at,
            note=f"batch {batch.pk}: {model_slug} {tier_slug}",
        )
    return reservations

"""A model's retirement day for batches: lines not yet started on the retired model move
to its successor and are planned again (the retirement domain calls batches_reroute)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing import quota
from routing.batches.planner import Plan
from routing.batches.planning import batch_loads, batch_plan, plan_assign, plan_json
from routing.core.clock import sim_scale
from routing.core.formats import iso
from routing.models import Batch, BatchRequest


def batches_reroute(*, model: ModelVersion, at: dt.datetime | None = None) -> dict[str, int]:
    """On a model's retirement day: batch lines not yet started on it move to its
    successor and are planned again. A batch not yet started keeps its lines on the
    successor for its own plan at start; a running batch gets a plan for the moved lines
    on the time it has left and reservations for it (the retired lanes' unused credits
    are released when the batch ends). Lines the successor cannot take in time (or the
    account cannot pay for) stay and run on the retired model, like accepted jobs.
    Idempotent: only queued lines still on the retired model are touched."""
    at = at or timezone.now()
    out = {"batches": 0, "moved": 0, "kept": 0}
    if lifecycle.model_status(model, at) != lifecycle.RETIRED:
        return out
    res = lifecycle.resolve_successor(model, at)
    successor = res.model
    if successor.pk == model.pk or not lifecycle.is_serving(successor, at):
        return out
    batch_ids = (
        BatchRequest.objects.filter(model=model, status=BatchRequest.Status.QUEUED)
        .filter(batch__status__in=(Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS))
        .values_list("batch_id", flat=True)
    )
    for batch_id in sorted(set(batch_ids)):
        with transaction.atomic():
            batch = Batch.objects.select_for_update().filter(pk=batch_id).first()
            lines = batch.requests.filter(model=model, status=BatchRequest.Status.QUEUED)
            n = lines.count()
            if not n:
                continue
            out["batches"] += 1
            if batch.status == Batch.Status.VALIDATING:
                lines.update(model=successor, rerouted_from=model.slug)
                out["moved"] += n
                continue
            if batch.status != Batch.Status.IN_PROGRESS:
                continue
            moved = _replan_lines(batch, lines, model, successor, at)
            out["moved"] += moved
            out["kept"] += n - moved
    return out


class _Keep(Exception):
    """No plan on the successor fits: the lines stay on the retired model."""


def _replan_lines(batch: Batch, lines, model: ModelVersion, successor: ModelVersion, at) -> int:
    """Move a running batch's queued `lines` to `successor` with a plan and reservations
    of their own (in a savepoint); 0 when they must stay."""
    ids = list(lines.values_list("pk", flat=True))
    try:
        with transaction.atomic():
            BatchRequest.objects.filter(pk__in=ids).update(model=successor)
            moving = BatchRequest.objects.filter(pk__in=ids)
            plan = _moved_plan(batch, moving, model, at)
            if plan is None or not plan.feasible:
                raise _Keep()
            plan_assign(
                batch=batch,
                plan=plan,
                at=at,
                requests=moving,
                suffix=f":from:{model.slug}",
                rerouted_from=model.slug,
            )
            _plan_merge(batch, plan, model, successor, len(ids), at)
    except (_Keep, quota.QuotaExhausted):
        return 0
    return len(ids)


def _moved_plan(batch: Batch, moving, model: ModelVersion, at) -> Plan | None:
    """A plan for the moved lines: they take over the retired lanes' share of the pools
    once the requests running there end (a conservative plan: it starts them then)."""
    wave_end = batch.requests.filter(status=BatchRequest.Status.RUNNING, model=model).aggregate(
        end=Max("finishes_at")
    )["end"]
    begin = max(at, wave_end or at)
    left = (batch.expires_at - begin).total_seconds() * sim_scale()
    loads = batch_loads(exclude=batch)
    for lane in (batch.plan or {}).get("lanes", []):
        if lane["model"] != model.slug:
            pool = lane["pool_id"]
            loads[pool] = loads.get(pool, 0.0) + lane["streams"] * lane["stream_share"]
    return batch_plan(batch, at=at, window_seconds=max(left, 1e-3), requests=moving, loads=loads)


def _plan_merge(
    batch: Batch, plan: Plan, model: ModelVersion, successor: ModelVersion, n: int, at
) -> None:
    """Fold the moved lines' plan into the batch's: the retired lanes get no new work,
    the successor's lanes are added (or grown), and the re-plan is recorded."""
    lanes = {x["key"]: x for x in (batch.plan or {}).get("lanes", [])}
    for lane in lanes.values():
        if lane["model"] == model.slug:  # no new work there: running ones finish
            lane["streams"], lane["retired"] = 0, True
    for new in plan_json(plan=plan, batch=batch)["lanes"]:
        if new["key"] in lanes:
            old = lanes[new["key"]]
            old["streams"] += new["streams"]
            old["requests"] += new["requests"]
            old["cost"] = str(Decimal(old["cost"]) + Decimal(new["cost"]))
        else:
            lanes[new["key"]] = new
    batch.plan = {**(batch.plan or {}), "lanes": list(lanes.values())}
    batch.plan.setdefault("replans", []).append(
        {
            "at": iso(at),
            "from": model.slug,
            "to": successor.slug,
            "requests": n,
            "cost": str(plan.cost),
        }
    )
    batch.predicted_cost = (batch.predicted_cost or Decimal(0)) + plan.cost
    batch.save(update_fields=["plan", "predicted_cost"])

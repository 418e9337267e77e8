"""Running a batch: a chain of links (`batch_advance`, one per wave, plus beat's sweep as
a safety net). Each tier runs its requests on the streams the plan gave it, never more
than the pool has left after interactive work and other batches at that moment
(interactive jobs keep priority), in list-scheduling order: a stream that frees at time
t starts the next request at t. Requests that finished are marked completed and charged
from their reservation in the same transaction (nothing lost, nothing charged twice: a
request is charged only by the conditional write that completes it)."""

from __future__ import annotations

import datetime as dt
import heapq
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from catalog.engine import predict_on
from catalog.models import HardwarePool, ModelVersion, Tier
from routing.batches.finish import batch_end, requests_charge, requests_close
from routing.batches.planning import ACTIVE
from routing.batches.send import send_advance, send_finalize
from routing.core.clock import sim_scale, wall
from routing.models import Batch, BatchRequest
from routing.router.snapshot import pool_loads

ADVANCE_STEP = 5000  # requests started or completed per advance (one transaction)
MIN_ADVANCE_DELAY = 0.05  # wall seconds between two links of the chain
NO_ROOM_POLL = dt.timedelta(seconds=1)  # requests wait, nothing runs: look again this soon
_COUNTERS = ["completed", "cost", "last_advanced_at"]


@dataclass
class _Lane:
    key: str
    model_id: int
    tier_id: int
    pool_id: int
    streams: int
    share: float


def _lanes(batch: Batch) -> list[_Lane]:
    plan = batch.plan or {}
    lanes = plan.get("lanes", [])
    models = dict(
        ModelVersion.objects.filter(slug__in={x["model"] for x in lanes}).values_list("slug", "pk")
    )
    tiers = dict(Tier.objects.values_list("slug", "pk"))
    return [
        _Lane(
            x["key"],
            models[x["model"]],
            tiers[x["tier"]],
            x["pool_id"],
            int(x["streams"]),
            float(x["stream_share"]),
        )
        for x in lanes
        if x["model"] in models
    ]


def _live_streams(batch: Batch, lanes: list[_Lane]) -> dict[str, int]:
    """Streams each lane may use now: its planned streams, scaled down when interactive
    work and other batches leave its pool less than the plan assumed."""
    loads = dict(pool_loads())
    others = (
        BatchRequest.objects.filter(
            status=BatchRequest.Status.RUNNING, pool_id__in={x.pool_id for x in lanes}
        )
        .exclude(batch=batch)
        .values("pool_id")
        .annotate(share=Sum("slot_share"))
    )
    for r in others:
        loads[r["pool_id"]] = loads.get(r["pool_id"], 0.0) + (r["share"] or 0.0)
    planned: dict[int, float] = defaultdict(float)
    for x in lanes:
        planned[x.pool_id] += x.streams * x.share
    out = {}
    for x in lanes:
        room = max(0.0, 1.0 - loads.get(x.pool_id, 0.0))
        need = planned[x.pool_id]
        out[x.key] = (
            x.streams if need <= room + 1e-9 else int(math.floor(x.streams * room / need + 1e-9))
        )
    return out


class _Durations:
    """Run time of a request shape on a lane, from the engine (the worker's 'inference')."""

    def __init__(self, lanes: list[_Lane]):
        self.models = {
            m.pk: m for m in ModelVersion.objects.filter(pk__in={x.model_id for x in lanes})
        }
        self.pools = {
            p.pk: p for p in HardwarePool.objects.filter(pk__in={x.pool_id for x in lanes})
        }
        self.tiers = dict(Tier.objects.values_list("pk", "slug"))
        self.cache: dict[tuple, float] = {}

    def __call__(self, lane: _Lane, shape: tuple[int, int, int, float]) -> float:
        key = (lane.key, shape)
        if key not in self.cache:
            pred = predict_on(
                self.models[lane.model_id],
                self.pools[lane.pool_id],
                self.tiers[lane.tier_id],
                input_tokens=shape[0],
                output_tokens=shape[1],
                turns=shape[2],
                tool_seconds=shape[3],
            )
            self.cache[key] = pred.total_seconds
        return self.cache[key]


@dataclass
class _Link:
    """One link's work in progress, under the batch's row lock: the requests running at
    its start, and what it completed, started and must charge."""

    batch: Batch
    at: dt.datetime
    horizon: dt.datetime  # now, or the window's end when that came first
    step: int
    lanes: list[_Lane]
    running: list = field(default_factory=list)  # rows of _RUNNING_FIELDS, by end time
    charges: dict[int, list[Decimal]] = field(default_factory=lambda: defaultdict(list))
    next_free: list[dt.datetime] = field(default_factory=list)  # ends after the horizon
    started: list[BatchRequest] = field(default_factory=list)
    completed: int = 0


_RUNNING_FIELDS = (
    "pk",
    "model_id",
    "tier_id",
    "pool_id",
    "finishes_at",
    "unit_cost",
    "reservation_id",
)


def batch_advance(
    batch_id, *, at: dt.datetime | None = None, step: int = ADVANCE_STEP, force: bool = False
) -> dict:
    """One link of a running batch's chain (see the module doc). Returns what it did and
    when it wants to run again. Idempotent and safe to run concurrently: it works under
    the batch's row lock from the database state alone; a link arriving before the
    batch's `next_advance_at` (a duplicate) does nothing unless `force`.

    One transaction, in named steps: complete the requests that ended, start queued ones
    on the free streams, charge what completed, then end the batch or send the next link."""
    at = at or timezone.now()
    done = {"completed": 0, "started": 0, "expired": 0, "next_in": None, "status": None}
    with transaction.atomic():
        batch = Batch.objects.select_for_update().filter(pk=batch_id, status__in=ACTIVE).first()
        if batch is None:
            return done
        done["status"] = batch.status
        if (
            not force
            and batch.next_advance_at
            and batch.next_advance_at > at + dt.timedelta(milliseconds=20)
        ):
            return done  # another link of the chain is due later: this one is a duplicate
        expiring = batch.status == Batch.Status.IN_PROGRESS and at >= batch.expires_at
        starting = batch.status == Batch.Status.IN_PROGRESS and not expiring
        link = _Link(batch, at, min(at, batch.expires_at), step, _lanes(batch))
        streams = _live_streams(batch, link.lanes) if starting else {}
        durations = _Durations(link.lanes)
        _complete_ended(link)
        if starting:
            _start_queued(link, streams, durations)
        batch.completed = F("completed") + link.completed
        batch.cost = F("cost") + requests_charge(batch=batch, charges=link.charges)
        batch.last_advanced_at = at
        done.update(completed=link.completed, started=len(link.started))
        return done | _link_end(link, expiring=expiring)


def _complete_ended(link: _Link) -> None:
    """Mark completed the running requests that ended by the horizon (a conditional write:
    only a request still running), and note their charges."""
    link.running = list(
        link.batch.requests.filter(status=BatchRequest.Status.RUNNING)
        .order_by("finishes_at")
        .values_list(*_RUNNING_FIELDS, named=True)
    )
    ended = [r for r in link.running if r.finishes_at <= link.horizon]
    for r in ended:
        link.charges[r.reservation_id].append(r.unit_cost)
    ids = [r.pk for r in ended]
    for i in range(0, len(ids), 5000):
        BatchRequest.objects.filter(
            pk__in=ids[i : i + 5000], status=BatchRequest.Status.RUNNING
        ).update(
            status=BatchRequest.Status.COMPLETED,
            finished_at=F("finishes_at"),
            cost=F("unit_cost"),
        )
    link.completed += len(ended)
    link.next_free = [r.finishes_at for r in link.running if r.finishes_at > link.horizon]


def _start_queued(link: _Link, streams: dict[str, int], durations: _Durations) -> None:
    """Start queued requests, lane by lane, on the streams that are free now (at most
    `link.step` in all), and write them."""
    for lane in link.lanes:
        slots = _stream_ends(link, lane, streams.get(lane.key, 0))
        if not slots or slots[0] > link.at:
            continue
        _lane_start(link, lane, slots, durations)
    _write_started(link.started)
    link.completed += sum(1 for r in link.started if r.status == BatchRequest.Status.COMPLETED)


def _stream_ends(link: _Link, lane: _Lane, k: int) -> list[dt.datetime]:
    """A heap of when each of the lane's `k` streams frees: the k latest-finishing running
    requests' ends, the rest free now."""
    busy = sorted(
        r.finishes_at
        for r in link.running
        if (r.model_id, r.tier_id, r.pool_id) == (lane.model_id, lane.tier_id, lane.pool_id)
    )
    slots = busy[-k:] if k else []
    slots += [link.at] * max(0, k - len(busy))
    heapq.heapify(slots)
    return slots


def _lane_start(link: _Link, lane: _Lane, slots: list[dt.datetime], durations) -> None:
    """Give the lane's queued requests, in line order, the stream that frees first, while
    one is free now; a request that ends by the horizon is completed at once."""
    queued = link.batch.requests.filter(
        status=BatchRequest.Status.QUEUED,
        model_id=lane.model_id,
        tier_id=lane.tier_id,
        pool_id=lane.pool_id,
    ).order_by("line")[: max(0, link.step - len(link.started))]
    for req in queued.only(
        "pk",
        "input_tokens",
        "output_tokens",
        "turns",
        "tool_seconds",
        "unit_cost",
        "reservation_id",
        "batch_id",
    ):
        t = slots[0]
        if t > link.at:
            break
        seconds = durations(
            lane, (req.input_tokens, req.output_tokens, req.turns, req.tool_seconds)
        )
        end = t + wall(seconds)
        heapq.heapreplace(slots, end)
        req.started_at, req.finishes_at = t, end
        req.simulated = {
            "queue_seconds": round(
                max(0.0, (t - link.batch.in_progress_at).total_seconds()) * sim_scale(), 3
            ),
            "run_seconds": round(seconds, 3),
        }
        if end <= link.horizon:
            req.status, req.finished_at, req.cost = (
                BatchRequest.Status.COMPLETED,
                end,
                req.unit_cost,
            )
            link.charges[req.reservation_id].append(req.unit_cost)
        else:
            req.status = BatchRequest.Status.RUNNING
            link.next_free.append(end)
        link.started.append(req)
        if len(link.started) >= link.step:
            break


def _write_started(started: list[BatchRequest]) -> None:
    """Write the requests a link started (and maybe completed): one UPDATE per distinct
    set of values (a wave shares its start, a shape its duration), which is far cheaper
    than bulk_update's CASE per row."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for r in started:
        key = (r.status, r.started_at, r.finishes_at, json.dumps(r.simulated, sort_keys=True))
        groups[key].append(r.pk)
    for (status, started_at, finishes_at, simulated), ids in groups.items():
        values = {
            "status": status,
            "started_at": started_at,
            "finishes_at": finishes_at,
            "simulated": json.loads(simulated),
        }
        if status == BatchRequest.Status.COMPLETED:
            values |= {"finished_at": finishes_at, "cost": F("unit_cost")}
        for i in range(0, len(ids), 5000):
            BatchRequest.objects.filter(
                pk__in=ids[i : i + 5000], status=BatchRequest.Status.QUEUED
            ).update(**values)


def _link_end(link: _Link, *, expiring: bool) -> dict:
    """Save the link's counters, then end the batch (expired, cancelled, or on to
    finalizing) or send the next link. Returns what to add to the link's result."""
    batch, at = link.batch, link.at
    remaining = batch.requests.filter(
        status__in=(BatchRequest.Status.QUEUED, BatchRequest.Status.RUNNING)
    )
    if expiring:
        expired = requests_close(
            batch=batch,
            requests=remaining,
            status=BatchRequest.Status.EXPIRED,
            code="batch_expired",
            message="The batch expired before this request finished.",
            at=at,
        )
        batch.save(update_fields=_COUNTERS)
        return {
            "expired": expired,
            "status": batch_end(batch=batch, status=Batch.Status.EXPIRED, at=at),
        }
    if batch.status == Batch.Status.CANCELLING:
        # In-flight requests finish (and are billed); then the batch is cancelled.
        if not batch.requests.filter(status=BatchRequest.Status.RUNNING).exists():
            batch.save(update_fields=_COUNTERS)
            return {"status": batch_end(batch=batch, status=Batch.Status.CANCELLED, at=at)}
    elif not remaining.exists():
        batch.status = Batch.Status.FINALIZING
        batch.finalizing_at = at
        batch.next_advance_at = None
        batch.save(update_fields=[*_COUNTERS, "status", "finalizing_at", "next_advance_at"])
        transaction.on_commit(lambda: send_finalize(batch.pk))
        return {"status": Batch.Status.FINALIZING}
    delay = _next_delay(link)
    batch.next_advance_at = at + dt.timedelta(seconds=delay)
    batch.save(update_fields=[*_COUNTERS, "next_advance_at"])
    transaction.on_commit(lambda: send_advance(batch.pk, delay))
    return {"next_in": delay}


def _next_delay(link: _Link) -> float:
    """Wall seconds until the next link: the next end of a running request, or at once
    when this link stopped at its step size, or at expiry."""
    at, expires_at = link.at, link.batch.expires_at
    if len(link.started) >= link.step:
        nxt = at
    elif link.next_free:
        nxt = min(min(link.next_free), expires_at)
    else:
        # Requests wait but nothing runs: the pools have no room for the batch now
        # (interactive work has them). Look again soon.
        nxt = min(expires_at, at + NO_ROOM_POLL)
    return max(MIN_ADVANCE_DELAY, (nxt - at).total_seconds())

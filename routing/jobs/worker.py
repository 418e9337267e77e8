"""The worker's side of a job: claim and run it on the simulated hardware (a slot of
its pool booked), finish it (settle, one transaction).

Simulated time: a job's timings are simulated seconds; SIM_TIME_SCALE simulated
seconds pass per wall second. A worker never sleeps through a job: it computes the
job's simulated run with the engine, books a slot of its pool from `started_at` to
`finishes_at` (wall) and schedules the finish; queues form because a full pool's next
slot starts only when enough running jobs end. Every step is a conditional write on
the job row, so a redelivered or repeated message does nothing twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

import simengine
from catalog.engine import predict_on
from catalog.models import HardwarePool, ModelVersion, Tier
from routing import quota
from routing.core import dispatch, metrics, tasknames
from routing.core.clock import sim_scale, wall
from routing.core.formats import iso
from routing.core.shared import SharedMemo
from routing.models import Job, PoolOccupancy, QuotaReservation
from routing.router import occupancy, snapshot, timing
from routing.webhooks.events import event_emit

logger = logging.getLogger(__name__)

FINISH_TASK = tasknames.FINISH_JOB


def send_finish(job_id, at: dt.datetime) -> None:
    """Finish the job at `at` (wall); a lost message is the sweeper's to finish.

    A finish further away than BROKER_MAX_COUNTDOWN_SECONDS is sent as a check-in that
    far ahead, which sends itself again (job_finish_when_due): a worker holds a
    countdown message unacked, and a broker tolerates that only so long (RabbitMQ's
    consumer_timeout closes the channel, Redis redelivers after its visibility timeout)."""
    delay = (at - timezone.now()).total_seconds()
    delay = min(delay, settings.BROKER_MAX_COUNTDOWN_SECONDS)
    dispatch.send_now(FINISH_TASK, str(job_id), countdown=delay)


def slot_start(pool_id: int, share: float, at: dt.datetime) -> dt.datetime:
    """When a stream of `share` fits the pool (routing.router.timing.next_slot's rule:
    now if there is room, else when enough running jobs have ended), without reading
    the pool's running jobs while there is room: the pool's running share comes from its counters (every running job, those
    past their end and not yet finished included, so it is never below the jobs still
    holding slots). Only a full pool walks its running jobs by end (index order, in
    chunks) until enough of them have ended (tests/routing/jobs/test_occupancy.py holds
    it equal to reading them all)."""
    busy = occupancy.running_share(pool_id)
    if busy + share <= 1.0 + 1e-9:
        return at
    ordered = (
        Job.objects.filter(pool_id=pool_id, status=Job.Status.RUNNING)
        .order_by("finishes_at")
        .values_list("finishes_at", "slot_share")
    )
    for ends, s in ordered.iterator(chunk_size=256):
        busy -= s
        if busy + share <= 1.0 + 1e-9:
            return max(ends, at)
    return at


def job_run(job_id, *, at: dt.datetime | None = None) -> Job | None:
    """Claim a queued job, simulate it, book its slot. Idempotent: only a queued job is
    claimed (a conditional write under the row lock).

    One task per job where simulated time allows: a job whose simulated run has ended
    already when it is claimed (a slot free at once and a run shorter than the claim
    itself takes in wall time: a large SIM_TIME_SCALE) is settled in the claim's
    transaction, SUCCEEDED with no finish message. Any other job gets one finish message
    with a countdown to its end. The end is compared with the clock at the claim's
    write (with `at` given, with `at`: a caller's simulated now)."""
    fixed_now = at
    at = at or timezone.now()
    with transaction.atomic():
        job = job_claim(job_id, at=at, finish_by=fixed_now or timezone.now)
        if job is not None and job.status == Job.Status.RUNNING:
            transaction.on_commit(lambda: send_finish(job.pk, job.finishes_at))
        elif job is not None and job.status == Job.Status.SUCCEEDED:
            _observe_on_commit(job)
    return job


def job_claim(
    job_id, *, at: dt.datetime, finish_by=None, job: Job | None = None, also: dict | None = None
) -> Job | None:
    """The claim itself (inside the caller's transaction): a queued job simulated and
    its slot booked (RUNNING, `started_at`..`finishes_at`), or FAILED when the engine
    cannot run it. None when the job is not queued. The caller decides who finishes
    it: the worker schedules a finish message, or passes `finish_by` (a time, or a
    callable giving the time at the write) to have a job whose run ends by then
    settled here, SUCCEEDED in the same write; an interactive request (the /v1/ chat
    endpoints) finishes it itself when its answer has been generated.

    `job`: the queued job as its caller wrote it in this transaction, its pool locked
    (routing.jobs.submit with `lock_pool`: model spec and pool device read), so it is
    not read again. `also`: more columns written with the claim when the job runs (a
    stream's delivered tokens).

    On PostgreSQL the claim is two statements: the job read and locked with its pool
    (the lock order: the job, then its pool, then the occupancy rows its write moves),
    then one write that books the slot only while the pool has room (now), and settles
    the job in it when its run has ended already. A full pool is booked the long way
    (`slot_start`: when enough running jobs have ended)."""
    pool_locked = job is not None
    if job is None:
        job = _claim_read(job_id)
        if job is None:
            return None  # done, cancelled, or claimed by another delivery
        pool_locked = connection.vendor == "postgresql"
    try:
        # The engine at the outside load the router saw (routing.router.timing): the
        # same prediction the promise was made from.
        pred = predict_on(
            job.model,
            job.pool,
            job.tier.slug,
            input_tokens=job.input_tokens,
            output_tokens=job.output_tokens,
            turns=job.turns,
            tool_seconds=job.tool_seconds,
            load=(job.predicted or {}).get("load"),
        )
    except simengine.SimEngineError as exc:
        job.status, job.error, job.finished_at = Job.Status.FAILED, str(exc), at
        job.attempts += 1
        job.save(update_fields=["status", "error", "finished_at", "attempts"])
        quota.quota_release(reservation_id=job.reservation_id, at=at)
        job_failed_emit(job)
        return job
    # One slot booking at a time per pool: the pool row locked (PostgreSQL).
    if not pool_locked:
        occupancy.pool_lock(job.pool_id)
    # This job's draw of wait (outside load) + run, fixed by its id.
    outside_wait, run = timing.job_draw(pred, job.turns, job.pk)
    attempts = job.attempts + 1
    if connection.vendor == "postgresql":
        # The slot now, if the pool has room: checked by the write itself.
        fields = _place(job, pred, at, outside_wait, run, attempts, also)
        now = finish_by() if callable(finish_by) else finish_by
        settle_at = now if now is not None and job.finishes_at <= now else None
        if _book_pg(job, fields, settle_at):
            return job
    start = slot_start(job.pool_id, job.slot_share, at)
    fields = _place(job, pred, start, outside_wait, run, attempts, also)
    now = finish_by() if callable(finish_by) else finish_by
    if now is not None and job.finishes_at <= now:
        fields += _settle(job, now)  # ended already: settled in the same write
    job.save(update_fields=fields)
    return job


def _place(job: Job, pred, start, outside_wait, run, attempts, also) -> list[str]:
    """The claimed job's slot and simulated run from `start` (not saved; the fields)."""
    slot_wait = max(0.0, (start - job.created_at).total_seconds()) * sim_scale()
    queue_seconds = slot_wait + outside_wait
    job.status = Job.Status.RUNNING
    job.started_at = start
    job.finishes_at = start + wall(outside_wait + run)
    job.attempts = attempts
    job.simulated = {
        "queue_seconds": queue_seconds,
        "ttft_seconds": pred.ttft_seconds,
        "generation_seconds": pred.generation_seconds,
        "transport_seconds": pred.transport_seconds,
        "tool_seconds": pred.tool_seconds,
        "run_seconds": run,
        "run_median_seconds": simengine.run_median_seconds(pred),
        "total_seconds": queue_seconds + run,
        "tokens_per_second": pred.tokens_per_second,
    }
    for name, value in (also or {}).items():
        setattr(job, name, value)
    return ["status", "started_at", "finishes_at", "attempts", "simulated", *(also or {})]


# The booking's write (PostgreSQL): the job's claimed columns, only while the pool's
# running share (its counters, read under the pool's lock) leaves room for its stream
# (slot_start's rule); with the settlement when the run has ended already.
_OCC = PoolOccupancy._meta.db_table
_FIT = (
    f"fit AS (SELECT 1 WHERE GREATEST(COALESCE((SELECT SUM(running_share) FROM {_OCC} "
    "WHERE pool_id = %(b_pool)s), 0), 0) + %(b_share)s <= 1.000000001)"
)


def _set_sql(fields: list[str]) -> str:
    return ", ".join(f'"{Job._meta.get_field(f).column}" = %(f_{f})s' for f in fields)


def _set_params(job: Job, fields: list[str]) -> dict:
    out = {}
    for name in fields:
        f = Job._meta.get_field(name)
        out[f"f_{name}"] = f.get_db_prep_save(getattr(job, f.attname), connection)
    return out


def _book_pg(job: Job, fields: list[str], settle_at: dt.datetime | None) -> bool:
    """Write the claim if the pool has room now (settled too with `settle_at`); False:
    nothing written (the pool is full; or, settling, the reservation was not held)."""
    params = {"b_pool": job.pool_id, "b_share": job.slot_share, "b_job": job.pk}
    if settle_at is None:
        params.update(_set_params(job, fields))
        with connection.cursor() as cur:
            cur.execute(
                f"WITH {_FIT} UPDATE {Job._meta.db_table} SET {_set_sql(fields)} "
                "WHERE id = %(b_job)s AND EXISTS (SELECT 1 FROM fit)",
                params,
            )
            return cur.rowcount == 1
    keep = {f: getattr(job, f) for f in _FINISH_KEEP}
    job.status, job.finished_at = Job.Status.SUCCEEDED, settle_at
    fields = [*fields, "finished_at", *_record_outcome(job)]
    params.update(_set_params(job, fields))
    along = quota.Alongside(
        before=_FIT,
        gate="EXISTS (SELECT 1 FROM fit)",
        ctes=(
            f", j AS (UPDATE {Job._meta.db_table} AS jj SET {_set_sql(fields)}, "
            "cost = r.charged FROM r WHERE jj.id = %(b_job)s)"
        ),
        params=params,
    )
    reservation = quota.quota_settle_along(
        reservation_id=job.reservation_id, actual=job.predicted_cost, at=settle_at, along=along
    )
    if reservation is None:  # not written: the claim the long way
        for name, value in keep.items():
            setattr(job, name, value)
        return False
    job.cost = reservation.charged
    return True


# The claim reads the job under its row lock with what the engine needs of its
# catalog rows (catalog.engine.predict_on: the model's spec, the pool's device and
# nodes, the tier's slug), not the rows whole; hand-written, as the ORM's query
# building cost more than the query. The job row is locked, and the pool's as
# routing.router.occupancy.pool_lock locks it (one slot booking at a time per pool).
MODEL_SPEC = (
    "slug",
    "total_params",
    "active_params_prefill",
    "active_params_decode",
    "layers",
    "hidden_size",
    "bytes_per_param",
    "kv_bytes_per_token",
    "context_window",
)
_POOL_READ = ("slug", "device", "nodes")
_TIER_READ = ("slug",)


def _claim_sql(lock_of: bool) -> str:
    job_cols = ", ".join(f'j."{f.column}"' for f in Job._meta.concrete_fields)
    extra = [f'm."{c}" AS "m_{c}"' for c in MODEL_SPEC]
    extra += [f'p."{c}" AS "p_{c}"' for c in _POOL_READ]
    extra += [f't."{c}" AS "t_{c}"' for c in _TIER_READ]
    return (
        f"SELECT {job_cols}, {', '.join(extra)} FROM {Job._meta.db_table} j "
        f"JOIN {ModelVersion._meta.db_table} m ON m.id = j.model_id "
        f"JOIN {HardwarePool._meta.db_table} p ON p.id = j.pool_id "
        f"JOIN {Tier._meta.db_table} t ON t.id = j.tier_id "
        "WHERE j.id = %s AND j.status = %s"
        + (" FOR UPDATE OF j FOR NO KEY UPDATE OF p" if lock_of else "")
    )


_CLAIM_SQL: dict[bool, str] = {}


def _claim_read(job_id) -> Job | None:
    """The queued job, locked, with its model, pool and tier as far as the engine needs
    them (any other field of those is read on first use, as a deferred field is)."""
    lock_of = connection.features.has_select_for_update_of
    sql = _CLAIM_SQL.get(lock_of) or _CLAIM_SQL.setdefault(lock_of, _claim_sql(lock_of))
    pk = Job._meta.pk
    key = pk.get_db_prep_value(pk.to_python(job_id), connection)
    rows = list(Job.objects.raw(sql, [key, Job.Status.QUEUED]))
    if not rows:
        return None
    job = rows[0]
    job.model = _partial(ModelVersion, job, "m", job.model_id, MODEL_SPEC)
    job.pool = _partial(HardwarePool, job, "p", job.pool_id, _POOL_READ)
    job.tier = _partial(Tier, job, "t", job.tier_id, _TIER_READ)
    return job


def _partial(model, job: Job, prefix: str, pk: int, names: tuple[str, ...]):
    """A catalog row with the fields the claim read (the others deferred)."""
    values = {"id": pk, **{c: getattr(job, f"{prefix}_{c}") for c in names}}
    fields = [f.attname for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(job._state.db, fields, [values[f] for f in fields])


def _settle(job: Job, at: dt.datetime) -> list[str]:
    """Charge a job whose run has ended and mark it SUCCEEDED at `at` (not saved: the
    caller writes the returned fields with its own)."""
    reservation = quota.quota_settle(
        reservation_id=job.reservation_id, actual=job.predicted_cost, at=at
    )
    job.status = Job.Status.SUCCEEDED
    job.finished_at = at
    job.cost = reservation.charged
    return ["status", "finished_at", "cost", *_record_outcome(job)]


def _record_outcome(job: Job) -> list[str]:
    """The job's outcome from its simulated completion (not saved; the fields written)."""
    total = (job.simulated or {}).get("total_seconds")
    if total is None:
        return []
    outcome = timing.deadline_outcome(total, job.deadline_seconds)
    job.completion_seconds = outcome.completion_seconds
    job.deadline_met = outcome.deadline_met
    job.late_by_seconds = outcome.late_by_seconds
    return ["completion_seconds", "deadline_met", "late_by_seconds"]


def _observe_on_commit(job: Job) -> None:
    tier_id, simulated = job.tier_id, job.simulated
    met, late = job.deadline_met, job.late_by_seconds
    within = (
        job.completion_seconds <= job.promised_seconds
        if job.completion_seconds is not None and job.promised_seconds is not None
        else None
    )
    transaction.on_commit(
        lambda: metrics.observe_job_finished(
            tier_slug(tier_id),
            simulated,
            deadline_met=met,
            late_by_seconds=late,
            within_promise=within,
        )
    )


def job_failed_emit(job: Job) -> None:
    """The `job.failed` webhook event of a job that just failed (in the transaction
    that failed it; once per job)."""
    event_emit(
        account_id=job.account_id,
        type="job.failed",
        key=f"job.failed:{job.pk}",
        data={
            "id": str(job.pk),
            "object": "job",
            "status": job.status,
            "model": job.requested_model,
            "requested_tier": job.requested_tier,
            "error": job.error,
            "created_at": iso(job.created_at),
            "finished_at": iso(job.finished_at),
            "cost": None if job.cost is None else f"{job.cost:.6f}",
            "api_key_id": job.api_key_id,
            "user": job.user,
            "metadata": job.metadata,
        },
    )


def job_finish(job_id, *, at: dt.datetime | None = None, job: Job | None = None) -> Job | None:
    """Settle a job whose simulated run has ended: result and charge in one
    transaction. Idempotent (only a running job past its end is finished). `job`: the
    job as its caller has it (an interactive request's, claimed by it), so it is not
    read again; the write still finishes it only while it runs (and returns None
    otherwise)."""
    at = at or timezone.now()
    with transaction.atomic():
        if job is None:
            job = _locked_running(job_id, at)
            if job is None:
                return None
        elif connection.vendor != "postgresql":
            fresh = _locked_running(job.pk, at)
            if fresh is None:
                return None
            fresh._state.fields_cache.update(job._state.fields_cache)  # model, tier as loaded
            job = fresh
        if connection.vendor == "postgresql":
            if not _finish_pg(job, at):
                return None
        else:
            # The reservation is read once, by the statement that settles it.
            job.save(update_fields=_settle(job, at))
        _observe_on_commit(job)
        return job


def _locked_running(job_id, at: dt.datetime) -> Job | None:
    """The job locked, if it runs past its end (`at`)."""
    return (
        Job.objects.select_for_update()
        .filter(pk=job_id, status=Job.Status.RUNNING, finishes_at__lte=at)
        .first()
    )


def _finish_pg(job: Job, at: dt.datetime) -> bool:
    """One statement: the job SUCCEEDED at `at` with its charge, if it runs past its end
    (its row first: the lock order of a cancel, job then reservation), then its
    reservation settled at the quoted cost. False: it no longer runs (nothing written)."""
    keep = {f: getattr(job, f) for f in _FINISH_KEEP}
    job.status, job.finished_at = Job.Status.SUCCEEDED, at
    fields = ["status", "finished_at", *_record_outcome(job)]
    params = {**_set_params(job, fields), "b_job": job.pk, "b_running": Job.Status.RUNNING}
    along = quota.Alongside(
        before=(
            f"j AS (UPDATE {Job._meta.db_table} AS jj SET {_set_sql(fields)}, cost = "
            f"(SELECT drawn + LEAST(%(actual)s::numeric, amount - drawn) FROM {_RES} "
            "WHERE id = jj.reservation_id) WHERE jj.id = %(b_job)s AND jj.status = "
            "%(b_running)s AND jj.finishes_at <= %(f_finished_at)s RETURNING jj.cost)"
        ),
        gate="EXISTS (SELECT 1 FROM j)",
        select="(SELECT cost FROM j)",
        params=params,
    )
    reservation = quota.quota_settle_along(
        reservation_id=job.reservation_id, actual=job.predicted_cost, at=at, along=along
    )
    cost = along.row[0] if along.row else None
    if reservation is None and cost is None:
        for name, value in keep.items():  # as it was: nothing written
            setattr(job, name, value)
        return False
    if reservation is None:  # finished, its reservation closed already: as it stands
        reservation = QuotaReservation.objects.get(pk=job.reservation_id)
        Job.objects.filter(pk=job.pk).update(cost=reservation.charged)
    job.cost = reservation.charged
    return True


_FINISH_KEEP = ("status", "finished_at", "completion_seconds", "deadline_met", "late_by_seconds")
_RES = QuotaReservation._meta.db_table


# Tier slugs for metric labels (a handful of tiers): kept while the catalog's generation
# holds (a tier renamed in the admin drops them; checked at most once a second).
TIER_SLUGS = SharedMemo(snapshot.CATALOG, check_seconds=1.0, keep_without_cache=True).register()


def tier_slug(tier_id: int) -> str:
    """A tier's slug for metric labels."""
    now = time.monotonic()
    token = TIER_SLUGS.sync(now)
    slug = TIER_SLUGS.get(tier_id, now)
    if slug is None:
        slug = Tier.objects.filter(pk=tier_id).values_list("slug", flat=True).first() or "?"
        TIER_SLUGS.put(tier_id, slug, now, token)
    return slug


def job_finish_when_due(job_id, *, at: dt.datetime | None = None) -> Job | None:
    """The finish message's work: finish the job, or, when the message came a hair
    early (or the job is done already), look again when it is due."""
    done = job_finish(job_id, at=at)
    if done is None:
        now = at or timezone.now()
        job = Job.objects.filter(pk=job_id, status=Job.Status.RUNNING).only("finishes_at").first()
        if job is not None and job.finishes_at and job.finishes_at > now:
            send_finish(job_id, job.finishes_at)
    return done

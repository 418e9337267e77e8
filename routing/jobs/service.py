"""Jobs: accept (quote + reservation, one transaction), run on the simulated hardware,
finish (settle, one transaction), cancel (release), sweep (re-send, finish overdue).

Simulated time: a job's timings are simulated seconds; SIM_TIME_SCALE simulated
seconds pass per wall second. A worker never sleeps through a job: it computes the
job's simulated run with the engine, books a slot of its pool from `started_at` to
`finishes_at` (wall) and schedules the finish; queues form because a full pool's next
slot starts only when enough running jobs end. Every step is a conditional write on
the job row, so a redelivered or repeated message does nothing twice.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import random
import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

import simengine
from catalog import lifecycle
from catalog.engine import engine_deployment, model_spec
from catalog.models import HardwarePool, ModelVersion
from routing.core import dispatch
from routing.models import Account, Job
from routing.quota import service as quota
from routing.router.quotes import Quote, quote_build
from routing.router.route import RouteRequest
from routing.router.snapshot import ModelRetired

logger = logging.getLogger(__name__)


class JobError(Exception):
    pass


class IdempotencyConflict(JobError):
    """Another request with this Idempotency-Key is being processed right now."""


class IdempotencyMismatch(JobError):
    """The Idempotency-Key was used before with a different request body."""


class JobNotCancellable(JobError):
    pass


class NoTierChosen(JobError):
    def __init__(self, quote: Quote):
        self.quote = quote
        super().__init__(quote.decision.outcome)


def sim_scale() -> float:
    return settings.SIM_TIME_SCALE


def wall(seconds_simulated: float) -> dt.timedelta:
    return dt.timedelta(seconds=seconds_simulated / sim_scale())


def fingerprint(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Submission:
    job: Job
    created: bool  # False: an Idempotency-Key replay
    quote: Quote | None


def job_submit(
    *,
    account: Account,
    payload: dict,
    request: RouteRequest,
    prompt: str = "",
    idempotency_key: str | None = None,
    at: dt.datetime | None = None,
) -> Submission:
    """Quote, then write the job and its quota reservation in one transaction; the
    worker's task is sent after commit. Raises NoTierChosen, quota.QuotaExhausted,
    ModelRetired (and the quote's other refusals), IdempotencyConflict/Mismatch."""
    at = at or timezone.now()
    digest = fingerprint({**payload, "prompt": prompt})
    if idempotency_key:
        replay = _replay(account, idempotency_key, digest)
        if replay is not None:
            return Submission(replay, False, None)
    q = quote_build(account=account, model=payload["model"], request=request, at=at)
    chosen = q.decision.chosen
    if chosen is None:
        raise NoTierChosen(q)
    try:
        with transaction.atomic():
            if idempotency_key:
                _lock_idempotency_key(account, idempotency_key)
            # The quote read a cached catalog: re-check the lifecycle on the row itself.
            model = ModelVersion.objects.select_related("successor").get(slug=chosen.model)
            if not lifecycle.is_serving(model, at):
                res = lifecycle.resolve_successor(model, at)
                raise ModelRetired(model, res.model if res.model.pk != model.pk else None, res.tier)
            job_id = uuid.uuid4()
            reservation = quota.quota_reserve_for(
                account=account,
                model_id=model.pk,
                family_id=model.family_id,
                tier_id=chosen.tier_id,
                amount=chosen.cost,
                reference=f"job:{job_id}",
                at=at,
                note=f"job {job_id}",
            )
            job = _create_job(
                job_id,
                account,
                payload,
                request,
                prompt,
                idempotency_key,
                digest,
                q,
                model,
                reservation,
                at,
            )
            transaction.on_commit(lambda: send_run(job.pk))
    except IntegrityError:
        if idempotency_key:
            replay = _replay(account, idempotency_key, digest)
            if replay is not None:
                return Submission(replay, False, None)
        raise
    return Submission(job, True, q)


def _replay(account: Account, key: str, digest: str) -> Job | None:
    job = Job.objects.filter(account=account, idempotency_key=key).first()
    if job is not None and job.request_fingerprint != digest:
        raise IdempotencyMismatch(
            "This Idempotency-Key was used with a different request body; use a new key."
        )
    return job


def idempotency_lock_id(account_id: int, key: str) -> int:
    """The PostgreSQL advisory lock held while a request with this key is processed."""
    digest = hashlib.sha256(f"{account_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_idempotency_key(account: Account, key: str) -> None:
    # A concurrent duplicate is told 409 at once rather than waiting on the unique
    # index (pretix's pattern). Row locks and advisory locks exist on PostgreSQL only;
    # elsewhere the unique constraint still prevents a second job.
    if connection.vendor != "postgresql":
        return
    lock_id = int.from_bytes(
        hashlib.sha256(f"{account.pk}:{key}".encode()).digest()[:8], "big", signed=True
    )
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_id])
        if not cur.fetchone()[0]:
            raise IdempotencyConflict("A request with this Idempotency-Key is in progress.")
    if Job.objects.filter(account=account, idempotency_key=key).exists():
        raise IntegrityError("idempotency key taken")  # finished meanwhile: replay it


def placement_fields(c, reservation, at: dt.datetime) -> dict:
    """Where a job runs and what it was promised, from the router's chosen candidate and
    the reservation that pays for it (used when a job is created and when it is moved)."""
    pred = c.prediction
    return {
        "tier_id": c.tier_id,
        "pool_id": c.pool_id,
        "predicted": pred,
        "predicted_cost": c.cost,
        "predicted_start_at": at + wall(pred["queue_seconds"]),
        "predicted_completion_at": at + wall(pred["total_seconds"]),
        "slot_share": 1.0 / max(1, pred["stream_capacity"]),
        "reservation": reservation,
        "package_id": reservation.package_id,
    }


def _create_job(
    job_id, account, payload, request, prompt, key, digest, q: Quote, model, reservation, at
) -> Job:
    return Job.objects.create(
        id=job_id,
        account=account,
        idempotency_key=key,
        request_fingerprint=digest,
        requested_model=payload["model"],
        model=model,
        requested_tier=request.tier,
        input_tokens=request.input_tokens,
        output_tokens=request.output_tokens,
        turns=request.turns,
        tool_seconds=request.tool_seconds,
        deadline_seconds=request.deadline_seconds,
        max_cost=request.max_cost,
        prompt=prompt,
        last_sent_at=at,
        **placement_fields(q.decision.chosen, reservation, at),
    )


RUN_TASK = "routing.run_job"
FINISH_TASK = "routing.finish_job"


def send_run(job_id) -> None:
    """Hand the job to a worker. A broker that is down loses nothing: the job stays
    queued in the database and the sweeper sends it again."""
    dispatch.send_now(RUN_TASK, str(job_id), retry=True)


def send_finish(job_id, at: dt.datetime) -> None:
    """Finish the job at `at` (wall); a lost message is the sweeper's to finish."""
    dispatch.send_now(FINISH_TASK, str(job_id), countdown=(at - timezone.now()).total_seconds())


# --- The worker's side ------------------------------------------------------------------


def pool_occupancy(pool_id: int, at: dt.datetime) -> list[tuple[dt.datetime, float]]:
    """(finishes_at, share) of the jobs holding slots of a pool at `at`."""
    return list(
        Job.objects.filter(pool_id=pool_id, status=Job.Status.RUNNING, finishes_at__gt=at)
        .order_by("finishes_at")
        .values_list("finishes_at", "slot_share")
    )


def next_slot(
    holding: list[tuple[dt.datetime, float]], share: float, at: dt.datetime
) -> dt.datetime:
    """When a stream of `share` fits the pool: now if there is room, else when enough
    of the running jobs (sorted by end) have finished."""
    busy = sum(s for _, s in holding)
    if busy + share <= 1.0 + 1e-9:
        return at
    for ends, s in holding:
        busy -= s
        if busy + share <= 1.0 + 1e-9:
            return ends
    return at


def job_run(job_id, *, at: dt.datetime | None = None) -> Job | None:
    """Claim a queued job, simulate it, book its slot. Idempotent: only a queued job is
    claimed (a conditional write under the row lock)."""
    at = at or timezone.now()
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .select_related("model", "tier", "pool")
            .filter(pk=job_id, status=Job.Status.QUEUED)
            .first()
        )
        if job is None:
            return None  # done, cancelled, or claimed by another delivery
        try:
            pred = simengine.predict(
                model_spec(job.model),
                engine_deployment(job.pool, job.tier.slug),
                simengine.TaskProfile(
                    input_tokens=job.input_tokens,
                    output_tokens=job.output_tokens,
                    turns=job.turns,
                    tool_seconds=job.tool_seconds,
                ),
                breakdown=False,
            )
        except simengine.SimEngineError as exc:
            job.status, job.error, job.finished_at = Job.Status.FAILED, str(exc), at
            job.attempts += 1
            job.save(update_fields=["status", "error", "finished_at", "attempts"])
            quota.quota_release(reference=job.reservation.reference, now=at)
            return job
        # One slot booking at a time per pool: lock the pool row (PostgreSQL).
        HardwarePool.objects.select_for_update(no_key=True).filter(pk=job.pool_id).first()
        start = next_slot(pool_occupancy(job.pool_id, at), job.slot_share, at)
        run_seconds = pred.total_seconds  # no queue term: the real queue is the slot wait
        queue_seconds = (start - job.created_at).total_seconds() * sim_scale()
        job.status = Job.Status.RUNNING
        job.started_at = start
        job.finishes_at = start + wall(run_seconds)
        job.attempts += 1
        job.simulated = {
            "queue_seconds": queue_seconds,
            "ttft_seconds": pred.ttft_seconds,
            "generation_seconds": pred.generation_seconds,
            "transport_seconds": pred.transport_seconds,
            "tool_seconds": pred.tool_seconds,
            "total_seconds": queue_seconds + run_seconds,
            "tokens_per_second": pred.tokens_per_second,
        }
        job.save(update_fields=["status", "started_at", "finishes_at", "attempts", "simulated"])
        transaction.on_commit(lambda: send_finish(job.pk, job.finishes_at))
    return job


def job_finish(job_id, *, at: dt.datetime | None = None) -> Job | None:
    """Settle a job whose simulated run has ended: result and charge in one
    transaction. Idempotent (only a running job past its end is finished)."""
    at = at or timezone.now()
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .filter(pk=job_id, status=Job.Status.RUNNING, finishes_at__lte=at)
            .first()
        )
        if job is None:
            return None
        reservation = quota.quota_settle(
            reference=job.reservation.reference, actual=job.predicted_cost, now=at
        )
        job.status = Job.Status.SUCCEEDED
        job.finished_at = at
        job.cost = reservation.charged
        job.save(update_fields=["status", "finished_at", "cost"])
        return job


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


def job_cancel(*, job: Job, at: dt.datetime | None = None) -> Job:
    """Cancel a queued or running job: its reservation is released, nothing charged,
    its slot freed. Cancelling a cancelled job changes nothing."""
    at = at or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.status == Job.Status.CANCELLED:
            return locked
        if locked.status not in Job.ACTIVE:
            raise JobNotCancellable(f"Job {locked.pk} has already {locked.status}.")
        if locked.status == Job.Status.RUNNING and locked.finishes_at and locked.finishes_at <= at:
            raise JobNotCancellable(f"Job {locked.pk} has finished; it is being settled.")
        quota.quota_release(reference=locked.reservation.reference, now=at)
        locked.status = Job.Status.CANCELLED
        locked.cancelled_at = locked.finished_at = at
        locked.cost = Decimal(0)
        fields = ["status", "cancelled_at", "finished_at", "cost"]
        if locked.finishes_at and locked.finishes_at > at:
            locked.finishes_at = at  # the slot frees now
            fields.append("finishes_at")
        locked.save(update_fields=fields)
        return locked


def jobs_sweep(*, at: dt.datetime | None = None) -> dict[str, int]:
    """Beat's safety net: finish running jobs past their end (a finish message was
    lost with its worker) and send again queued jobs nobody claimed (the broker was
    down when they were accepted, or the message died with a worker)."""
    at = at or timezone.now()
    finished = 0
    for job_id in Job.objects.filter(status=Job.Status.RUNNING, finishes_at__lte=at).values_list(
        "pk", flat=True
    ):
        finished += job_finish(job_id, at=at) is not None
    stale = at - dt.timedelta(seconds=settings.JOB_RESEND_AFTER_SECONDS)
    resent = 0
    for job_id in Job.objects.filter(status=Job.Status.QUEUED, last_sent_at__lte=stale).values_list(
        "pk", flat=True
    ):
        # Claim the resend, so two sweepers do not both send it.
        if Job.objects.filter(pk=job_id, status=Job.Status.QUEUED, last_sent_at__lte=stale).update(
            last_sent_at=at
        ):
            send_run(job_id)
            resent += 1
    return {"finished": finished, "resent": resent}


def own_occupancy(at: dt.datetime) -> dict[int, float]:
    """Share of each pool held or awaited by this service's jobs (queued jobs count:
    they will need a slot; above 1.0 the pool has a queue)."""
    rows = (
        Job.objects.filter(
            Q(status=Job.Status.QUEUED) | Q(status=Job.Status.RUNNING, finishes_at__gt=at)
        )
        .values("pool_id")
        .annotate(share=Sum("slot_share"))
    )
    return {r["pool_id"]: r["share"] for r in rows}


# --- Output ------------------------------------------------------------------------------

_WORDS = (
    "the model reads the task plans a change edits the code runs the tests and reports "
    "what it found with a short summary of the result"
).split()


def synthetic_text(seed, words: int) -> str:
    """`words` deterministic words for a seed: the stand-in for a model's answer (one
    word per token), marked as simulated wherever it is shown."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def synthetic_output(job: Job) -> str:
    """A job's simulated answer: `output_tokens` words, seeded by the job id."""
    return synthetic_text(job.pk.int if hasattr(job.pk, "int") else str(job.pk), job.output_tokens)

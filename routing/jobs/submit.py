"""Accepting a job: quote, then the job row and its quota reservation in one
transaction (with Idempotency-Key replay), and the worker's task sent after commit."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from catalog import lifecycle
from catalog.models import HardwarePool, ModelVersion, Tier
from routing import quota
from routing.accounts import scopes
from routing.core import dispatch, tasknames
from routing.core.clock import sim_scale, wall
from routing.jobs.errors import IdempotencyConflict, IdempotencyMismatch, NoTierChosen
from routing.models import Account, ApiKey, Job, QuotaPackage
from routing.quota.ratelimits import take_for_work
from routing.router import occupancy
from routing.router.quotes import Quote, quote_build
from routing.router.resolve import ModelRetired
from routing.router.route import RouteRequest


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
    send: bool = True,
    job_id: uuid.UUID | None = None,
    route_model: str | None = None,
    api_key: ApiKey | None = None,
    lock_pool: bool = False,
) -> Submission:
    """Quote, then write the job and its quota reservation in one transaction; the
    worker's task is sent after commit (`send=False`: the caller runs the job itself,
    as an interactive request does). Raises NoTierChosen, quota.QuotaExhausted,
    ModelRetired (and the quote's other refusals), IdempotencyConflict/Mismatch.
    `job_id`: the new job's id (a replay gives seeded ids; random otherwise).
    `route_model`: the model to quote and run (default `payload["model"]`; a fallback
    tried in place of the model the payload names, which stays the fingerprint's).
    `api_key`: the key that sent it (its scopes checked: routing.accounts.scopes); the payload's `user` and `metadata` (bounded by
    the caller's validation) are recorded on the job too. `lock_pool`: lock the chosen
    pool's row first (routing.router.occupancy.pool_lock), for a caller that books the
    job's slot in the same transaction."""
    at = at or timezone.now()
    digest = fingerprint({**payload, "prompt": prompt})
    if idempotency_key:
        replay = _replay(account, idempotency_key, digest)
        if replay is not None:
            return Submission(replay, False, None)
    route_model = route_model or payload["model"]
    q = quote_build(account=account, model=route_model, request=request, at=at, api_key=api_key)
    chosen = q.decision.chosen
    if chosen is None:
        raise NoTierChosen(q)
    scopes.check_spend(api_key, chosen.cost, at)
    taken = None
    try:
        with transaction.atomic():
            if lock_pool and chosen.pool_id is not None:
                occupancy.pool_lock(chosen.pool_id)
            if idempotency_key:
                _lock_idempotency_key(account, idempotency_key)
            # The quote read a cached catalog: re-check the lifecycle on the row itself
            # (its dates only; the successors are read when it is not serving).
            model = ModelVersion.objects.only(*LIFECYCLE_READ).get(slug=chosen.model)
            if not lifecycle.is_serving(model, at):
                res = lifecycle.resolve_successor(model, at)
                raise ModelRetired(model, res.model if res.model.pk != model.pk else None, res.tier)
            job_id = job_id or uuid.uuid4()
            reservation = quota.quota_reserve_for(
                account=account,
                model_id=model.pk,
                family_id=model.family_id,
                tier_id=chosen.tier_id,
                amount=chosen.cost,
                reference=f"job:{job_id}",
                at=at,
                note=f"job {job_id}",
                packages=q.packages,
            )
            # Counted when accepted, across every replica: the account's tokens and the
            # paying package's requests and tokens (RateLimited rolls the job back).
            taken = take_for_work(
                account=account,
                key=api_key,
                package_id=reservation.package_id,
                tokens=request.input_tokens + request.output_tokens,
                package_limits=_limits_read(q, reservation.package_id),
            )
            job = _create_job(
                job_id,
                account,
                route_model,
                request,
                prompt,
                idempotency_key,
                digest,
                q,
                model,
                reservation,
                at,
                api_key.pk if api_key is not None else None,
                payload,
            )
            _related_from_memory(job, q)
            if send:
                transaction.on_commit(lambda: send_run(job.pk))
            if api_key is not None and api_key.spend_limit is not None:
                transaction.on_commit(lambda: scopes.key_alerts_check(api_key, at), robust=True)
    except IntegrityError:
        if taken is not None:
            taken.give_back()
        if idempotency_key:
            replay = _replay(account, idempotency_key, digest)
            if replay is not None:
                return Submission(replay, False, None)
        raise
    except BaseException:
        if taken is not None:
            taken.give_back()  # not written after all: the work was not accepted
        raise
    return Submission(job, True, q)


# What the lifecycle re-check reads of the model row (catalog.status.model_status),
# with what the job and its 202 use of it.
LIFECYCLE_READ = (
    "id",
    "slug",
    "family_id",
    "kind",
    "released_on",
    "generally_available_on",
    "retirement_announced_on",
    "retires_on",
    "successor_id",
    "successor_tier_id",
)


def _limits_read(q: Quote, package_id: int) -> tuple[int | None, int | None] | None:
    """The paying package's rate limits as the quote read them (None: not read)."""
    for p in q.packages or ():
        if p.id == package_id:
            return p.requests_per_minute, p.tokens_per_minute
    return None


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
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [idempotency_lock_id(account.pk, key)])
        if not cur.fetchone()[0]:
            raise IdempotencyConflict("A request with this Idempotency-Key is in progress.")
    if Job.objects.filter(account=account, idempotency_key=key).exists():
        raise IntegrityError("idempotency key taken")  # finished meanwhile: replay it


def placement_fields(
    c, reservation, at: dt.datetime, submitted_at: dt.datetime | None = None
) -> dict:
    """Where a job runs and what it was promised, from the router's chosen candidate and
    the reservation that pays for it (used when a job is created and when it is moved:
    a moved job's promise still counts from its submission, `submitted_at`)."""
    pred = c.prediction
    before = 0.0 if submitted_at is None else max(0.0, (at - submitted_at).total_seconds())
    return {
        "promised_seconds": before * sim_scale() + pred["total_seconds"],
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
    job_id,
    account,
    requested,
    request,
    prompt,
    key,
    digest,
    q: Quote,
    model,
    reservation,
    at,
    api_key_id=None,
    who: dict | None = None,
) -> Job:
    who = who or {}
    return Job.objects.create(
        id=job_id,
        account=account,
        api_key_id=api_key_id,
        user=who.get("user") or "",
        metadata=who.get("metadata") or {},
        idempotency_key=key,
        request_fingerprint=digest,
        requested_model=requested,
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
        created_at=at,
        **placement_fields(q.decision.chosen, reservation, at),
    )


def _related_from_memory(job: Job, q: Quote) -> None:
    """The tier, pool and package of a new job as the quote read them, so the 202 is
    built without reading the job back: only the fields the quote had are loaded (any
    other field is read from the database on first use, as a deferred field is)."""
    c, db = q.decision.chosen, job._state.db
    job.tier = Tier.from_db(db, ["id", "slug"], [c.tier_id, c.tier])
    job.pool = HardwarePool.from_db(db, ["id", "slug"], [c.pool_id, c.pool])
    for p in q.packages or ():
        if p.id == job.package_id:
            job.package = QuotaPackage.from_db(
                db, ["id", "name", "independent"], [p.id, p.name, p.independent]
            )


RUN_TASK = tasknames.RUN_JOB


def send_run(job_id) -> None:
    """Hand the job to a worker. A broker that is down loses nothing: the job stays
    queued in the database and the sweeper sends it again."""
    dispatch.send_now(RUN_TASK, str(job_id), retry=True)

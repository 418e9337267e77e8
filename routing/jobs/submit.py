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
from routing.jobs.worker import MODEL_SPEC
from routing.models import Account, ApiKey, Job, QuotaPackage
from routing.quota.ratelimits import take_for_work
from routing.router import occupancy
from routing.router.quotes import Quote, quote_build
from routing.router.resolve import ModelRetired
from routing.router.route import RouteRequest
from routing.router.snapshot import catalog_rows


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
    fields: dict | None = None,
    savepoint: bool = True,
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
    job's slot in the same transaction (the new job then comes with its pool's
    device and nodes, and its model's spec: what routing.jobs.worker.job_claim needs).
    `fields`: more of the new job's columns (an interactive answer's plan).
    `savepoint=False`: the caller's transaction ends (rolled back) on any exception
    from here, so no savepoint is needed inside it.

    On PostgreSQL the database work after the quote is one statement (with an
    Idempotency-Key, two): the pool locked, the model's lifecycle read, the hold, the
    reservation, its ledger row and the job row (ledger.Alongside)."""
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
        # Inside a caller's transaction: a savepoint (two statements) unless the caller
        # rolls back on whatever this raises (`savepoint=False`), and always where an
        # IntegrityError is handled here (a concurrent Idempotency-Key).
        with transaction.atomic(savepoint=savepoint or idempotency_key is not None):
            if idempotency_key:
                _lock_idempotency_key(account, idempotency_key)
            job_id = job_id or uuid.uuid4()
            # The quote read a cached catalog: the model's ids from it, its lifecycle
            # re-checked on the row itself (its dates only; the successors are read
            # when it is not serving), in the reservation's statement on PostgreSQL.
            known = _catalog_model(chosen.model)
            job = _new_job(
                job_id, account, route_model, request, prompt, idempotency_key, digest, q,
                known.pk, at, api_key.pk if api_key is not None else None, payload, fields,
            )  # fmt: skip
            pool_id = chosen.pool_id if lock_pool else None
            along = _insert_along(job, chosen.model, pool_id)
            try:
                reservation = quota.quota_reserve_for(
                    account=account,
                    model_id=known.pk,
                    family_id=known.family_id,
                    tier_id=chosen.tier_id,
                    amount=chosen.cost,
                    reference=f"job:{job_id}",
                    at=at,
                    note=f"job {job_id}",
                    packages=q.packages,
                    along=along,
                )
            except quota.QuotaExhausted:
                _lifecycle_check(_model_of(along) or _model_read(chosen.model), at)
                raise
            if along is not None and along.done:
                model = _model_of(along)
                if model is None or model.pk != known.pk:
                    raise ModelVersion.DoesNotExist(f"No model {chosen.model!r}.")
                _lifecycle_check(model, at)
            else:  # SQLite, or a reservation that existed already: the ORM's way
                if pool_id is not None:
                    occupancy.pool_lock(pool_id)
                model = _model_read(chosen.model)
                _lifecycle_check(model, at)
                job.model_id, job.package_id = model.pk, reservation.package_id
                job.reservation = reservation
                job.save(force_insert=True)
            job.model, job.reservation = model, reservation
            job.package_id = reservation.package_id
            job._state.adding, job._state.db = False, connection.alias
            if along is not None and along.done and pool_id is not None:
                job.pool = _pool_of(along, chosen)
            # Counted when accepted, across every replica: the account's tokens and the
            # paying package's requests and tokens (RateLimited rolls the job back).
            taken = take_for_work(
                account=account,
                key=api_key,
                package_id=reservation.package_id,
                tokens=request.input_tokens + request.output_tokens,
                package_limits=_limits_read(q, reservation.package_id),
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
    # One statement: the lock tried, and whether a job has the key already (a job
    # committed after this statement's snapshot is met by the unique index instead).
    with connection.cursor() as cur:
        cur.execute(_KEY_LOCK_SQL, [idempotency_lock_id(account.pk, key), account.pk, key])
        locked, taken = cur.fetchone()
    if not locked:
        raise IdempotencyConflict("A request with this Idempotency-Key is in progress.")
    if taken:
        raise IntegrityError("idempotency key taken")  # finished meanwhile: replay it


_KEY_LOCK_SQL = (
    "SELECT pg_try_advisory_xact_lock(%s), EXISTS (SELECT 1 FROM "
    f"{Job._meta.db_table} WHERE account_id = %s AND idempotency_key = %s)"
)


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
        "package_id": reservation.package_id if reservation is not None else None,
    }


def _new_job(
    job_id,
    account,
    requested,
    request,
    prompt,
    key,
    digest,
    q: Quote,
    model_id: int,
    at,
    api_key_id=None,
    who: dict | None = None,
    fields: dict | None = None,
) -> Job:
    """The new job in memory (not saved; its reservation is set when written)."""
    who = who or {}
    c = q.decision.chosen
    return Job(
        id=job_id,
        account=account,
        api_key_id=api_key_id,
        user=who.get("user") or "",
        metadata=who.get("metadata") or {},
        idempotency_key=key,
        request_fingerprint=digest,
        requested_model=requested,
        model_id=model_id,
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
        **placement_fields(c, None, at),
        **(fields or {}),
    )


def _catalog_model(slug: str) -> ModelVersion:
    """The model as the quote's cached catalog has it (its ids)."""
    for m in catalog_rows():
        if m.slug == slug:
            return m
    return _model_read(slug)


def _model_read(slug: str) -> ModelVersion:
    return ModelVersion.objects.only(*LIFECYCLE_READ, *MODEL_SPEC).get(slug=slug)


def _lifecycle_check(model: ModelVersion, at: dt.datetime) -> None:
    if not lifecycle.is_serving(model, at):
        res = lifecycle.resolve_successor(model, at)
        raise ModelRetired(model, res.model if res.model.pk != model.pk else None, res.tier)


# The job row written in the reservation's statement (PostgreSQL): every column from
# the job in memory, its reservation from `res`; with the model's row read (lifecycle
# and spec) and, for a caller that books the slot, the pool locked and read.
_JOB = Job._meta.db_table
_MODEL_READ = (*LIFECYCLE_READ, *(c for c in MODEL_SPEC if c not in LIFECYCLE_READ))
_POOL_READ = ("device", "nodes")


def _insert_ctes(lock: bool) -> tuple[str, str, str]:
    cols = [f for f in Job._meta.concrete_fields]
    from_res = {"reservation_id": "res.id", "package_id": "res.package_id"}
    values = ", ".join(from_res.get(f.attname, f"%(j_{f.attname})s") for f in cols)
    lk = (
        f", lk AS (SELECT id, {', '.join(_POOL_READ)} FROM {HardwarePool._meta.db_table} "
        "WHERE id = %(lock_pool)s FOR NO KEY UPDATE)"
        if lock
        else ""
    )
    columns = ", ".join(f'"{f.column}"' for f in cols)
    ctes = (
        f"{lk}, m AS (SELECT {', '.join(_MODEL_READ)} "
        f"FROM {ModelVersion._meta.db_table} WHERE slug = %(model_slug)s), "
        f"j AS (INSERT INTO {_JOB} ({columns}) "
        f"SELECT {values} FROM res)"
    )
    select = ", ".join([f"m.{c}" for c in _MODEL_READ] + [f"lk.{c}" for c in _POOL_READ if lock])
    joins = "LEFT JOIN m ON true" + (" LEFT JOIN lk ON true" if lock else "")
    return ctes, select, joins


_INSERT = {lock: _insert_ctes(lock) for lock in (False, True)}


def _insert_along(job: Job, slug: str, lock_pool: int | None) -> quota.Alongside | None:
    """The job's row (and the model's read, the pool's lock) in the statement that
    reserves its credits; None off PostgreSQL."""
    if connection.vendor != "postgresql":
        return None
    ctes, select, joins = _INSERT[lock_pool is not None]
    params = {
        f"j_{f.attname}": f.get_db_prep_save(getattr(job, f.attname), connection)
        for f in Job._meta.concrete_fields
        if f.attname not in ("reservation_id", "package_id")
    }
    params["model_slug"] = slug
    if lock_pool is not None:
        params["lock_pool"] = lock_pool
    return quota.Alongside(ctes=ctes, select=select, joins=joins, params=params)


def _model_of(along: quota.Alongside | None) -> ModelVersion | None:
    """The model's row as the reservation's statement read it."""
    if along is None or not along.row or along.row[0] is None:
        return None
    values = dict(zip(_MODEL_READ, along.row, strict=False))
    fields = [f.attname for f in ModelVersion._meta.concrete_fields if f.attname in values]
    return ModelVersion.from_db(connection.alias, fields, [values[f] for f in fields])


def _pool_of(along: quota.Alongside, c) -> HardwarePool:
    device, nodes = along.row[len(_MODEL_READ) :]
    return HardwarePool.from_db(
        connection.alias, ["id", "slug", "device", "nodes"], [c.pool_id, c.pool, device, nodes]
    )


def _related_from_memory(job: Job, q: Quote) -> None:
    """The tier, pool and package of a new job as the quote read them, so the 202 is
    built without reading the job back: only the fields the quote had are loaded (any
    other field is read from the database on first use, as a deferred field is)."""
    c, db = q.decision.chosen, job._state.db
    job.tier = Tier.from_db(db, ["id", "slug"], [c.tier_id, c.tier])
    if "pool" not in job._state.fields_cache:  # a booking caller's pool is read already
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

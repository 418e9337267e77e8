"""The replay's event loop: requests arrive in trace order at simulated times; each is
submitted through the production path (routing.jobs.submit.job_submit: the quote from
routing.router.route, the quota reservation, the job row), claimed by the worker's code
at once (routing.jobs.worker.job_claim: the engine's run, the slot booking on the
pool), and finished at its simulated end (routing.jobs.worker.job_finish: settlement).
Every call gets an explicit `at`; nothing waits on the wall clock. Finishes due by an
arrival run before it, in time order, so each quote sees the pools as they are then.
"""

from __future__ import annotations

import datetime as dt
import heapq
import random
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from django.db import transaction

import simengine
from routing.jobs.errors import NoTierChosen
from routing.jobs.submit import job_submit
from routing.jobs.worker import job_claim, job_finish
from routing.models import Account, Job
from routing.quota import account_packages
from routing.quota.packages import CREDIT_QUANTUM
from routing.replay.deadlines import draw_slacks
from routing.replay.policies import ACCEPT_ANY_SECONDS, policy_request
from routing.replay.trace import TraceRequest, span_seconds
from routing.router.route import ModelOption, RouteRequest, route


@dataclass(frozen=True)
class Planned:
    """A trace request made ready: its deadline, its job id (the same under every
    policy, so every policy's job draws the same run: common random numbers), and what
    the unloaded pools would give it."""

    index: int
    arrival: float  # trace seconds after the first request
    input_tokens: int
    output_tokens: int
    slack: float
    deadline: float
    job_id: uuid.UUID
    standard_run: float  # unloaded Standard: the typical run (the deadline's unit)
    standard_work: float  # slot-seconds of the Standard pool it would take
    floor_tier: str  # the cheapest tier whose unloaded time meets the deadline
    floor_cost: Decimal  # its price (the fastest tier's when none meets it), rounded down
    # to the credit's 6 decimals (a charge is rounded to them: the floor stays below)
    floor_meets: bool


def job_ids(n: int, *, seed: int) -> list[uuid.UUID]:
    rng = random.Random(f"replay-jobs:{seed}")
    return [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(n)]


def plan(
    requests: Sequence[TraceRequest],
    option: ModelOption,
    *,
    account: Account,
    seed: int,
    slack: float | None,
    at: dt.datetime,
) -> list[Planned]:
    """Deadlines and unloaded figures for every request, from the router itself on
    empty pools (no outside load, none of our jobs): the Standard candidate's typical
    run sets the deadline, and the router's choice with that deadline is the cheapest
    tier whose unloaded P90 meets it (the cost floor)."""
    packages = account_packages(account)
    slacks = draw_slacks(len(requests), seed=seed, slack=slack)
    ids = job_ids(len(requests), seed=seed)

    def unloaded(request: RouteRequest):
        return route(request, models=[option], packages=packages, loads={}, own={}, now=at)

    out = []
    for i, r in enumerate(requests):
        free = unloaded(RouteRequest(r.input_tokens, r.output_tokens, ACCEPT_ANY_SECONDS))
        std = next(
            (c for c in free.candidates if c.tier == "standard" and c.prediction is not None),
            None,
        )
        if std is None:
            raise simengine.SimEngineError(
                f"request {i + 1} ({r.input_tokens} + {r.output_tokens} tokens) cannot run on "
                f"Standard: {next((c.reason for c in free.candidates if c.tier == 'standard'), '')}"
            )
        run = std.prediction["run_seconds"]
        deadline = slacks[i] * run
        floor = unloaded(RouteRequest(r.input_tokens, r.output_tokens, deadline))
        chosen = floor.chosen or free.fastest
        out.append(
            Planned(
                index=i,
                arrival=r.arrival,
                input_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
                slack=slacks[i],
                deadline=deadline,
                job_id=ids[i],
                standard_run=run,
                standard_work=run / max(1, std.prediction["stream_capacity"]),
                floor_tier=chosen.tier,
                floor_cost=chosen.cost.quantize(CREDIT_QUANTUM, rounding=ROUND_FLOOR),
                floor_meets=floor.chosen is not None,
            )
        )
    return out


def native_load(planned: Sequence[Planned], requests: Sequence[TraceRequest]) -> float:
    """The offered load of the trace as recorded: the work it would give Standard's pool
    (each request's unloaded Standard run times the slot share of one Standard stream)
    per second of the trace, as a share of that pool."""
    return sum(p.standard_work for p in planned) / span_seconds(list(requests))


@dataclass
class JobOutcome:
    planned: Planned
    tier: str
    pool: str
    cost: Decimal
    promised: float
    completion: float | None
    busy_slot_seconds: float  # slot share x booked seconds
    promised_queue: float  # the wait for a slot the promise counted (own jobs ahead)
    queue: float | None  # the wait the run had


@dataclass
class PolicyRun:
    policy: str
    outcomes: list[JobOutcome]
    refused: Counter = field(default_factory=Counter)  # by the router's outcome
    span_seconds: float = 0.0  # simulated seconds from the first arrival to the last


ProgressFn = Callable[[int, int], None]


def run_policy(
    planned: Sequence[Planned],
    *,
    policy: str,
    model: str,
    account: Account,
    start: dt.datetime,
    rate: float,
    progress: ProgressFn | None = None,
) -> PolicyRun:
    """Replay every request under `policy` for `account` (a new one: see
    routing.replay.world), arrivals `rate` times as frequent as the trace's, from
    `start`; the account's jobs are read back at the end."""
    finishes: list[tuple[dt.datetime, int, uuid.UUID]] = []
    refused: Counter = Counter()
    total = len(planned)

    def finish_until(t: dt.datetime | None) -> None:
        while finishes and (t is None or finishes[0][0] <= t):
            ends, _, job_id = heapq.heappop(finishes)
            job_finish(job_id, at=ends)

    for n, p in enumerate(planned, start=1):
        at = start + dt.timedelta(seconds=p.arrival / rate)
        finish_until(at)
        request = policy_request(
            policy,
            input_tokens=p.input_tokens,
            output_tokens=p.output_tokens,
            deadline=p.deadline,
            floor_tier=p.floor_tier,
        )
        payload = {
            "model": model,
            "input_tokens": p.input_tokens,
            "output_tokens": p.output_tokens,
            "deadline_seconds": request.deadline_seconds,
            "tier": request.tier,
        }
        try:
            job_submit(
                account=account,
                payload=payload,
                request=request,
                at=at,
                send=False,
                job_id=p.job_id,
            )
        except NoTierChosen as exc:
            refused[exc.quote.decision.outcome] += 1
        else:
            # The worker's claim as it runs on delivery (job_run without the finish
            # message: the finish is this loop's event).
            with transaction.atomic():
                job = job_claim(p.job_id, at=at, finish_by=at)
            if job is not None and job.status == Job.Status.RUNNING:
                heapq.heappush(finishes, (job.finishes_at, p.index, job.pk))
        if progress is not None:
            progress(n, total)
    finish_until(None)
    span = (planned[-1].arrival - planned[0].arrival) / rate if planned else 0.0
    return PolicyRun(policy, _outcomes(account, planned), refused, span)


def _outcomes(account: Account, planned: Sequence[Planned]) -> list[JobOutcome]:
    by_id = {p.job_id: p for p in planned}
    rows = Job.objects.filter(account=account).values_list(
        "id",
        "tier__slug",
        "pool__slug",
        "cost",
        "promised_seconds",
        "completion_seconds",
        "slot_share",
        "started_at",
        "finishes_at",
        "predicted",
        "simulated",
    )
    out = []
    for row in rows:
        job_id, tier, pool, cost, promised, completion, share, started, ends, pred, sim = row
        booked = (ends - started).total_seconds() if started and ends else 0.0
        out.append(
            JobOutcome(
                planned=by_id[job_id],
                tier=tier,
                pool=pool,
                cost=cost if cost is not None else Decimal(0),
                promised=promised,
                completion=completion,
                busy_slot_seconds=share * booked,
                promised_queue=(pred or {}).get("queue_seconds", 0.0),
                queue=(sim or {}).get("queue_seconds"),
            )
        )
    out.sort(key=lambda o: o.planned.index)
    return out

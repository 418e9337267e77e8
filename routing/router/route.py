"""The deadline router: for every tier deployed for a model, predict completion time
(engine performance model + a P90 wait from the pool's load) and cost; keep the tiers
that meet the deadline, fit the context window, stay under `max_cost` and are paid for
by a quota package; choose the cheapest, ties to the faster.

`route` is a pure function of its inputs (a catalog snapshot, the account's packages,
pool loads, the time): views, the batch planner and the admin call it alike, and the
benchmark calls it in a loop. Loading those inputs from the database is
`routing.router.snapshot`' job.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import simengine
from routing.quota import PackageView, choose_package, earliest_reset, payment_order
from routing.router.timing import OwnSlots, own_wait_seconds, promise_seconds

MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class TierOption:
    """One deployment of a model: a tier on a pool, with its price."""

    tier: str
    tier_id: int
    rank: int
    pool: str
    pool_id: int
    deployment: simengine.Deployment
    price_input: Decimal  # per million tokens
    price_output: Decimal
    available_from: dt.date | None = None


@dataclass(frozen=True)
class Benchmark:
    name: str
    score: float  # percent
    duration_minutes: float | None


@dataclass(frozen=True)
class ModelOption:
    id: int
    slug: str
    family_id: int
    spec: simengine.ModelSpec
    context_window: int
    tiers: tuple[TierOption, ...]
    benchmarks: tuple[Benchmark, ...] = ()


@dataclass(frozen=True)
class RouteRequest:
    input_tokens: int
    output_tokens: int
    deadline_seconds: float
    turns: int = 1
    tool_seconds: float = 0.0
    max_cost: Decimal | None = None
    tier: str | None = None
    task: str | None = None
    # When no tier is forced: the tiers the router may choose among (an API key's
    # `allowed_tiers`, routing.router.quotes); empty: all.
    tiers: tuple[str, ...] = ()

    @property
    def task_profile(self) -> simengine.TaskProfile:
        return _task_profile(
            self.input_tokens, self.output_tokens, self.turns, float(self.tool_seconds)
        )


# Equal requests share one TaskProfile (frozen): built and checked once, its hash kept,
# and the engine's memos find their key by identity instead of comparing fields. Typed
# LRU of 4,096 entries (~1 MB); a task that fails its checks raises every time.
@functools.lru_cache(maxsize=4096, typed=True)
def _task_profile(
    input_tokens: int, output_tokens: int, turns: int, tool_seconds: float
) -> simengine.TaskProfile:
    return simengine.TaskProfile(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        turns=turns,
        tool_seconds=tool_seconds,
    )


@dataclass
class Candidate:
    model: str
    tier: str
    pool: str
    device: str
    load: float
    prediction: dict | None
    total_seconds: float  # math.inf when it cannot run
    cost: Decimal
    package: PackageView | None = None
    tier_id: int | None = None
    pool_id: int | None = None
    success_rate: float | None = None  # quality-aware choice only
    expected_seconds: float | None = None
    expected_cost: Decimal | None = None
    meets_deadline: bool = False
    eligible: bool = False
    chosen: bool = False
    reason: str = ""


@dataclass
class RouteDecision:
    """The router's answer. `outcome` says why nothing was chosen, if nothing was."""

    outcome: str  # ok | deadline | max_cost | quota | context | no_tier
    chosen: Candidate | None
    candidates: list[Candidate]
    fastest: Candidate | None = None
    next_reset_at: dt.datetime | None = None
    notes: list[str] = field(default_factory=list)


def tokens_cost(input_tokens: int, output_tokens: int, *, price_input, price_output) -> Decimal:
    """List price of so many tokens at per-million-token prices (1 credit = 1 USD)."""
    return (input_tokens * price_input + output_tokens * price_output) / MILLION


def task_cost(option: TierOption, req: RouteRequest) -> Decimal:
    """List price of the task on this tier."""
    return tokens_cost(
        req.input_tokens,
        req.output_tokens,
        price_input=option.price_input,
        price_output=option.price_output,
    )


def task_fits(model: ModelOption, req: RouteRequest) -> bool:
    return req.input_tokens + req.output_tokens <= model.context_window


def success_rate(model: ModelOption, task: str, deadline_seconds: float) -> float | None:
    """The best published success rate on `task` reachable within the deadline.

    A benchmark measured at a duration (SWE-Bench Pro at 1, 2, 3, 9, 16 minutes) only
    counts when that much time fits the deadline; one without a duration always counts.
    """
    wanted = normalise_task(task)
    best = None
    for b in model.benchmarks:
        if normalise_task(b.name) != wanted:
            continue
        if b.duration_minutes is not None and b.duration_minutes * 60 > deadline_seconds:
            continue
        best = b.score if best is None else max(best, b.score)
    return None if best is None else best / 100.0


def normalise_task(name: str) -> str:
    """Benchmark names compare without case, spaces or punctuation (`swe-bench-pro`)."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def route(
    req: RouteRequest,
    *,
    models: Sequence[ModelOption],
    packages: Sequence[PackageView],
    loads: Mapping[int, float],
    now: dt.datetime,
    quality: bool = False,
    own: Mapping[int, OwnSlots] | None = None,
) -> RouteDecision:
    """Evaluate every tier of every model given and choose.

    `loads`: each pool's outside load (PoolLoad; a pool without one runs at its tiers'
    published operating point). `own`: our own work on each pool (its slots; a full
    pool adds the wait for one). A candidate's `total_seconds` is the P90 completion
    promised (routing.router.timing), what the worker's simulation meets 9 times in 10.

    One model: the cheapest tier that meets the deadline. `quality=True` (model
    "auto"): the cheapest expected cost to a correct result (cost / success rate)
    among the options whose expected time to a correct result (time / success rate)
    meets the deadline; speed alone never wins, it only breaks ties.
    """
    task = req.task_profile
    today = now.date()
    ordered_packages = payment_order(packages)
    candidates: list[Candidate] = []
    fits_somewhere = False
    # Read once per request, not per tier (the loop below is the router's hot path).
    forced, deadline, max_cost = req.tier, req.deadline_seconds, req.max_cost
    allowed = None if forced else req.tiers
    n_input, n_output = Decimal(req.input_tokens), Decimal(req.output_tokens)  # exact
    predict, engine_error = simengine.predict, simengine.SimEngineError
    load_of = loads.get
    own_of = (own or {}).get
    turns = req.turns
    for model in models:
        fits = task_fits(model, req)
        fits_somewhere |= fits
        for option in model.tiers:
            # A pool without a measured outside load runs at the operating point the
            # published tier speeds describe (the engine's load=None); a measured one
            # sets the decode batch (continuous batching) and the replicas' queues.
            # Our own jobs are slots, not load (routing.router.timing).
            measured = load_of(option.pool_id)
            load = 0.0 if measured is None else measured
            # = task_cost(option, req), the same Decimal operations inline
            cost = (n_input * option.price_input + n_output * option.price_output) / MILLION
            cand = Candidate(
                model=model.slug,
                tier=option.tier,
                pool=option.pool,
                device=option.deployment.device,
                load=load,
                prediction=None,
                total_seconds=math.inf,
                cost=cost,
                tier_id=option.tier_id,
                pool_id=option.pool_id,
            )
            candidates.append(cand)
            if forced and option.tier != forced:
                cand.reason = f"not requested (tier {forced} was forced)"
                continue
            if allowed and option.tier not in allowed:
                cand.reason = f"not allowed for this API key (it may use {', '.join(allowed)})"
                continue
            if option.available_from and option.available_from > today:
                cand.reason = f"not available before {option.available_from}"
                continue
            if not fits:
                cand.reason = (
                    f"task of {req.input_tokens + req.output_tokens} tokens exceeds the "
                    f"context window of {model.context_window}"
                )
                continue
            if load >= 1.0:
                cand.reason = f"pool {option.pool} is saturated ({load:.0%} busy)"
                continue
            try:
                pred = predict(model.spec, option.deployment, task, load=measured, breakdown=False)
            except engine_error as exc:
                cand.reason = f"cannot run: {exc}"
                continue
            run = simengine.run_median_seconds(pred)
            own_wait = own_wait_seconds(
                own_of(option.pool_id), 1.0 / max(1, pred.stream_capacity), now, run
            )
            promised = promise_seconds(pred, turns, own_wait)
            summary = pred.summary()
            summary["queue_seconds"] = own_wait + pred.queue_seconds
            summary["total_seconds"] = promised
            summary["run_seconds"] = run
            summary["load"] = measured
            cand.prediction = summary
            cand.total_seconds = expected_seconds = promised
            if quality:
                p = success_rate(model, req.task or "", deadline)
                if not p:
                    cand.reason = f"no published {req.task} result within the deadline"
                    continue
                cand.success_rate = p
                cand.expected_seconds = expected_seconds = promised / p
                cand.expected_cost = (cost / Decimal(str(p))).quantize(Decimal("0.000001"))
            if expected_seconds > deadline:
                what = "expected time to a correct result" if quality else "predicted"
                cand.reason = (
                    f"misses the deadline: {what} {expected_seconds:.1f} s > {deadline:g} s"
                )
                continue
            cand.meets_deadline = True
            if max_cost is not None and cost > max_cost:
                cand.reason = f"over max_cost: {cost:.6f} > {max_cost}"
                continue
            choice = choose_package(
                ordered_packages,
                model_id=model.id,
                family_id=model.family_id,
                tier_id=option.tier_id,
                cost=cost,
                at=now,
                presorted=True,
            )
            if choice.package is None:
                cand.reason = choice.reason
                continue
            cand.package = choice.package
            cand.eligible = True
    return _decide(candidates, packages, fits_somewhere, quality)


def _decide(
    candidates: list[Candidate],
    packages: Sequence[PackageView],
    fits_somewhere: bool,
    quality: bool,
) -> RouteDecision:
    eligible = [c for c in candidates if c.eligible]
    runnable = [c for c in candidates if c.prediction is not None]
    fastest = min(runnable, key=lambda c: c.total_seconds, default=None)
    if eligible:

        def key(c: Candidate):
            return (c.expected_cost if quality else c.cost, c.total_seconds)

        chosen = min(eligible, key=key)
        chosen.chosen = True
        what = "expected cost to a correct result" if quality else "cost"
        chosen.reason = f"chosen: lowest {what} that meets the deadline"
        best = key(chosen)[0]
        for c in eligible:
            if c is not chosen:
                mine = key(c)[0]
                c.reason = (
                    f"meets the deadline but costs more ({mine:.6f} > {best:.6f})"
                    if mine > best
                    else "meets the deadline at the same cost but slower"
                )
        return RouteDecision("ok", chosen, candidates, fastest)
    if not candidates:
        return RouteDecision("no_tier", None, candidates)
    if not fits_somewhere:
        return RouteDecision("context", None, candidates)
    on_time = [c for c in candidates if c.meets_deadline]
    if not on_time:
        return RouteDecision("deadline", None, candidates, fastest)
    if all(c.package is None and c.reason.startswith("over max_cost") for c in on_time):
        cheapest = min(on_time, key=lambda c: c.cost)
        return RouteDecision("max_cost", None, candidates, cheapest)
    return RouteDecision("quota", None, candidates, fastest, next_reset_at=earliest_reset(packages))

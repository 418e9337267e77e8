"""The deadline router: for every tier deployed for a model, predict completion time
(engine performance model + a P90 wait from the pool's load) and cost; keep the tiers
that meet the deadline, fit the context window, stay under `max_cost` and are paid for
by a quota package; choose the cheapest, ties to the faster.

`route` is a pure function of its inputs (a catalog snapshot, the account's packages,
pool loads, the time): views, the batch planner and the admin call it alike, and the
benchmark calls it in a loop. Loading those inputs from the database is
`routing.router.snapshot`' job.

Its warm path reads two memos whose keys hold every input of what they keep, so they
change no answer (issue 29): a tier's timing per (model spec, deployment, task shape,
measured load) (`_TIMINGS`), and the paying package per account state (the packages
with their balances, and which validity windows hold now) and (model, tier, cost)
(`_PackageMemo`). `route(..., memo=False)` is the per-candidate engine path without
them, the oracle of tests/routing/router/test_router_memo.py and the "before" of
bench/bench_router.py.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import simengine
from routing.quota import (
    PackageChoice,
    PackageView,
    choose_package,
    earliest_reset,
    payment_order,
)
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


# The warm path's per-tier memo: a tier's timing for a (model spec, deployment, task,
# measured outside load), as one flat tuple: the prediction's summary values (keys
# _SUMMARY_KEYS), then the typical run, the promised P90 before our own slot wait, the
# queue's P90 and one stream's share of the pool's slots; or the reason it cannot run (a
# str). A warm decision reads it instead of building a Prediction per candidate. The key
# holds every input of the answer (the catalog's spec and deployment are frozen values:
# an edited model or pool is a new key; the engine's parameters are its DEFAULT_PARAMS,
# fixed for the process), so no entry goes stale. Only float loads (or None) are kept,
# so an int load never shares a float's entry. A plain dict (two objects kept per
# entry, fewer for the garbage collector to count than an LRU's), emptied when it
# reaches TIMING_MEMO_SIZE entries (~0.4 kB each with the key, ~25 MB at the bound):
# the loads come from one snapshot a second (routing.router.snapshot), so the
# decisions of that second share the entries.
TIMING_MEMO_SIZE = 65_536
_TIMINGS: dict[tuple, tuple | str] = {}
_SUMMARY_KEYS: tuple[str, ...] = ()  # Prediction.summary()'s keys, in order (first use)


def _tier_eval(
    spec: simengine.ModelSpec,
    deployment: simengine.Deployment,
    task: simengine.TaskProfile,
    measured: float | None,
) -> tuple | str:
    global _SUMMARY_KEYS
    try:
        pred = simengine.predict(spec, deployment, task, load=measured, breakdown=False)
    except simengine.SimEngineError as exc:
        return f"cannot run: {exc}"
    summary = pred.summary()
    _SUMMARY_KEYS = _SUMMARY_KEYS or tuple(summary)
    return (
        *summary.values(),
        simengine.run_median_seconds(pred),
        promise_seconds(pred, task.turns, 0.0),
        pred.queue_seconds,
        1.0 / max(1, pred.stream_capacity),
    )


def _remember(key: tuple) -> tuple | str:
    timed = _tier_eval(*key)
    if len(_TIMINGS) >= TIMING_MEMO_SIZE:
        _TIMINGS.clear()  # bounded: refilled by the next decisions
    _TIMINGS[key] = timed
    return timed


class _PackageMemo:
    """`choose_package` for one request's packages, memoised per account state.

    The state is the packages themselves (every field: balances, scopes, order) and,
    for each, whether `now` is inside its validity window: the only way `now` enters the
    choice. A spend, a top-up or any edit of a package is another state, so a memoised
    choice is never stale; equal states (the requests of an account between two
    spends) share the entries. One hash of the state per request, then small keys.
    """

    __slots__ = ("_version", "_packages", "_now", "_memo")

    def __init__(self, ordered: Sequence[PackageView], now: dt.datetime, memo: bool = True):
        self._packages, self._now, self._memo = ordered, now, memo
        if not memo:  # every choice made afresh: the oracle
            return
        state = tuple(
            (
                p,
                p.valid_from is None or now >= p.valid_from,
                p.valid_until is None or now < p.valid_until,
            )
            for p in ordered
        )
        self._version = _package_version(state)

    def choose(self, model_id: int, family_id: int, tier_id: int, cost: Decimal) -> PackageChoice:
        memo = self._memo
        key = (self._version, model_id, family_id, tier_id, cost) if memo else None
        choice = _CHOICES.get(key)  # no None key is stored: without the memo, always made
        if choice is None:
            choice = choose_package(
                self._packages,
                model_id=model_id,
                family_id=family_id,
                tier_id=tier_id,
                cost=cost,
                at=self._now,
                presorted=True,
            )
            if memo:
                if len(_CHOICES) >= CHOICE_MEMO_SIZE:
                    _CHOICES.clear()  # bounded: refilled by the next requests
                _CHOICES[key] = choice
        return choice


# Account states seen lately, each numbered once (a version: a state evicted and seen
# again gets a new number, its old choices unreachable until cleared), and the choices
# per (version, model, family, tier, cost). Bounded; both are per process.
CHOICE_MEMO_SIZE = 65_536
_CHOICES: dict[tuple, PackageChoice] = {}
_versions = itertools.count(1)


@functools.lru_cache(maxsize=4096)
def _package_version(state: tuple) -> int:
    return next(_versions)


@dataclass(slots=True)
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
    memo: bool = True,
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
    # memo=False: the per-candidate engine path, the oracle the memos are tested against.
    timings = _TIMINGS.get
    pay = _PackageMemo(ordered_packages, now, memo)
    load_of = loads.get
    own_of = (own or {}).get
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
            if memo and (measured is None or type(measured) is float):
                key = (model.spec, option.deployment, task, measured)
                timed = timings(key) or _remember(key)
            else:
                timed = _tier_eval(model.spec, option.deployment, task, measured)
            if type(timed) is str:
                cand.reason = timed
                continue
            n = len(_SUMMARY_KEYS)
            run, quantile, queue, share = timed[n], timed[n + 1], timed[n + 2], timed[n + 3]
            own_slots = own_of(option.pool_id)
            own_wait = 0.0 if own_slots is None else own_wait_seconds(own_slots, share, now, run)
            promised = own_wait + quantile  # = promise_seconds(pred, turns, own_wait)
            summary = dict(zip(_SUMMARY_KEYS, timed, strict=False))  # = pred.summary()
            summary["queue_seconds"] = own_wait + queue
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
            choice = pay.choose(model.id, model.family_id, option.tier_id, cost)
            if choice.package is None:
                cand.reason = choice.reason
                continue
            cand.package = choice.package
            cand.eligible = True
    return _decide(candidates, packages, fits_somewhere, quality)


_CHOSEN = {
    False: "chosen: lowest cost that meets the deadline",
    True: "chosen: lowest expected cost to a correct result that meets the deadline",
}


def _decide(
    candidates: list[Candidate],
    packages: Sequence[PackageView],
    fits_somewhere: bool,
    quality: bool,
) -> RouteDecision:
    # One pass each, no key functions: the first of equals wins, as min() would.
    fastest = None
    for c in candidates:
        if c.prediction is not None and (
            fastest is None or c.total_seconds < fastest.total_seconds
        ):
            fastest = c
    eligible = [c for c in candidates if c.eligible]
    if eligible:
        # The cheapest (expected cost to a correct result with `quality`), ties to the
        # faster: min() over (price, total_seconds).
        chosen = eligible[0]
        best = chosen.expected_cost if quality else chosen.cost
        for c in eligible:
            price = c.expected_cost if quality else c.cost
            if price < best or (price == best and c.total_seconds < chosen.total_seconds):
                chosen, best = c, price
        chosen.chosen = True
        chosen.reason = _CHOSEN[quality]
        best_text = f"{best:.6f}"
        for c in eligible:
            if c is not chosen:
                mine = c.expected_cost if quality else c.cost
                c.reason = (
                    f"meets the deadline but costs more ({mine:.6f} > {best_text})"
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

"""The batch planner: the cheapest mix of tiers whose predicted makespan fits a window.

A batch is planned before it starts against the capacity the interactive load leaves on
each pool (interactive work keeps priority on shared pools, so the batch only ever gets
the leftover). Batch pricing applies on Flex and Standard capacity (``batch_discount``
x the model's Standard price, about half); Priority and Ultrafast cost their list price
and are used only for the part of the batch that would otherwise miss the window. If no
plan fits, the caller refuses the batch with the fastest plan's predicted makespan.

Like `routing.router.route` this is a pure function of its inputs (the catalog snapshot
as `ModelOption`s, pool loads, the window): no database, no clock.

Capacity and makespan rule (conservative: every figure is an upper bound of a concrete
schedule, never a fluid average)
-------------------------------------------------------------------------------------
* A *tier* here is one deployment: (pool, model, tier). The engine gives, with no load,
  a request's duration ``d`` (``total_seconds``: turns, tools, transport; the stream is
  held for the whole task, tool time included) and the deployment's ``stream_capacity``
  ``c``. One stream of that tier takes ``1/c`` of the pool.
* The batch may use at most ``1 - load`` of a pool. Tiers on the same pool (Flex,
  Standard, Priority on the GPU pool; several models on one pool) split that leftover
  statically: the plan gives tier T ``k_T`` streams with ``sum(k_T / c_T) <= 1 - load``.
  Alone on its pool a tier therefore gets at most ``floor(c * (1 - load))`` streams;
  ``0`` means the tier has no room.
* Makespan of a tier with ``k`` streams:
  - one group of ``n`` identical requests: ``ceil(n / k) * d`` (waves; exact for any
    dispatcher that never leaves a stream idle while requests wait);
  - several groups (different durations): Graham's list-scheduling bound
    ``S / k + (1 - 1/k) * d_max`` with ``S = sum(n_g * d_g)``: it holds whatever order
    the dispatcher takes the requests in, provided it keeps the tier's k streams busy;
    with as many streams as requests it is ``d_max`` (never more streams than that).
  The plan's makespan is the largest tier makespan; streams are counted per tier, so no
  share is assumed that another tier (or the interactive load) holds.
* What it does not model: interactive load above the figure given (pass a P90 or a
  margin rather than the mean to protect against bursts), queueing between turns.

Choice
------
For a window W each tier needs ``k_T(W)``, the fewest streams whose makespan is <= W; a
pool is over when ``sum(k_T(W) / c_T) > 1 - load``. Every group starts on its cheapest
option that can finish one request within W (a batch-priced tier; among equal prices the
one that uses the least pool share per request, i.e. Flex when its longer request still
fits). While a pool is over, the greedy moves requests off it to another option of the
same group, taking the move with the lowest extra cost per unit of pool share freed
that the destination has room for, in counts (binary search on how many), never per
request. That is the classic greedy for a fractional min-cost cover; with several
binding pools it can miss chains of moves (A to pool 2 only after B leaves pool 2),
which the catalog's layouts (one GPU pool + one wafer pool per model) do not need.
Among plans of the minimal cost the earliest is reported (the window is tightened while
the cost stays the same). The fastest plan ignores cost: the same greedy ranks moves by
how little of the destination's room they use, and the window is bisected down to the
smallest one it can meet.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import simengine
from routing.core.formats import duration_text
from routing.router.route import ModelOption, RouteRequest, TierOption, task_cost

BATCH_PRICED_TIERS = frozenset({"flex", "standard"})
_EPS = 1e-9
_BISECT_STEPS = 60
_MAX_MOVES = 10_000


class PlanError(ValueError):
    """The batch cannot be planned at all (bad input); the message says why."""


@dataclass(frozen=True)
class BatchGroup:
    """``count`` identical requests of one shape for one model (the caller groups a batch
    file by (model, shape))."""

    model: ModelOption
    input_tokens: int
    output_tokens: int
    turns: int = 1
    tool_seconds: float = 0.0
    count: int = 1


@dataclass
class Assignment:
    """Part of a group placed on one tier. ``streams`` and ``makespan_seconds`` belong to
    the tier (shared by every group placed on it)."""

    model: str
    tier: str
    pool: str
    pool_id: int
    count: int
    unit_seconds: float
    unit_cost: Decimal
    cost: Decimal
    makespan_seconds: float
    streams: int
    group: int  # index of the group in the input
    stream_share: float = 0.0  # share of the pool one stream of this tier takes (1 / c)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "tier": self.tier,
            "pool": self.pool,
            "pool_id": self.pool_id,
            "group": self.group,
            "count": self.count,
            "streams": self.streams,
            "stream_share": self.stream_share,
            "unit_seconds": round(self.unit_seconds, 3),
            "unit_cost": str(self.unit_cost),
            "cost": str(self.cost),
            "makespan_seconds": round(self.makespan_seconds, 3),
        }


@dataclass
class Plan:
    """The planner's answer. When ``feasible`` is false the assignments, makespan and
    cost are those of the fastest plan (what the caller quotes when refusing)."""

    feasible: bool
    makespan_seconds: float
    cost: Decimal
    assignments: list[Assignment]
    fastest_makespan_seconds: float
    window_seconds: float
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def tiers(self) -> list[str]:
        """The tiers used, fastest last (by the catalog's rank)."""
        seen: dict[str, None] = {}
        for a in self.assignments:
            seen.setdefault(a.tier, None)
        order = {t: i for i, t in enumerate(simengine.TIERS)}
        return sorted(seen, key=lambda t: order.get(t, len(order)))

    def count_on(self, tier: str) -> int:
        return sum(a.count for a in self.assignments if a.tier == tier)

    @classmethod
    def refused(cls, window_seconds: float, reason: str, notes: list[str] | None = None) -> Plan:
        """No plan at all (no capacity, or a bad input the caller reports)."""
        return cls(
            feasible=False,
            makespan_seconds=math.inf,
            cost=Decimal(0),
            assignments=[],
            fastest_makespan_seconds=math.inf,
            window_seconds=window_seconds,
            reason=reason,
            notes=list(notes or []),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.feasible,
            "window_seconds": self.window_seconds,
            "makespan_seconds": round(self.makespan_seconds, 3),
            "fastest_makespan_seconds": round(self.fastest_makespan_seconds, 3),
            "cost": str(self.cost),
            "tiers": self.tiers,
            "assignments": [a.to_dict() for a in self.assignments],
            "reason": self.reason,
            "notes": list(self.notes),
        }


# --- Internals ----------------------------------------------------------------------

TierKey = tuple[int, str, str]  # (pool_id, model slug, tier)


@dataclass(frozen=True)
class _Option:
    # One way to run a group's requests: a tier of its model, with duration and price.
    key: TierKey
    option: TierOption
    seconds: float
    capacity: int
    unit_cost: Decimal
    unit_cost_f: float


@dataclass(frozen=True)
class _Problem:
    groups: tuple[BatchGroup, ...]
    options: tuple[tuple[_Option, ...], ...]  # per group
    room: Mapping[int, float]  # pool_id -> share left by the interactive load
    capacity: Mapping[TierKey, int]  # streams of the whole pool for the tier


Counts = dict[tuple[int, TierKey], int]  # (group, tier) -> requests


def _tier_streams(items: Sequence[tuple[int, float]], window: float) -> float:
    """Fewest streams for which the tier's makespan bound (waves or Graham) is <= window;
    ``inf`` when no number of streams is enough."""
    if not items:
        return 0
    if len(items) == 1:
        n, d = items[0]
        per_stream = math.floor(window / d + _EPS)
        return math.inf if per_stream < 1 else math.ceil(n / per_stream)
    d_max = max(d for _, d in items)
    total = sum(n * d for n, d in items)
    count = sum(n for n, _ in items)
    if window < d_max * (1 - _EPS):
        return math.inf
    if window <= d_max * (1 + _EPS):
        return count  # one stream each: every request starts at once
    # Never more streams than requests: with one each the makespan is d_max.
    return min(count, max(1, math.ceil((total - d_max) / (window - d_max) - _EPS)))


def _tier_makespan(items: Sequence[tuple[int, float]], streams: int) -> float:
    """The makespan bound of a tier's requests on ``streams`` streams (see module doc)."""
    if not items:
        return 0.0
    if len(items) == 1:
        n, d = items[0]
        return math.ceil(n / streams) * d
    d_max = max(d for _, d in items)
    if streams >= sum(n for n, _ in items):
        return d_max  # one stream each
    total = sum(n * d for n, d in items)
    return total / streams + (1 - 1 / streams) * d_max


class _State:
    """Counts of requests per (group, tier) and the pool usage they imply at a window."""

    def __init__(self, problem: _Problem, window: float, counts: Counts) -> None:
        self.p = problem
        self.window = window
        self.counts = counts

    def items(self, key: TierKey) -> list[tuple[int, float]]:
        out = []
        for g, opts in enumerate(self.p.options):
            n = self.counts.get((g, key), 0)
            if n:
                out.append((n, next(o.seconds for o in opts if o.key == key)))
        return out

    def pool_tiers(self, pool_id: int) -> list[TierKey]:
        return [k for k in self.p.capacity if k[0] == pool_id]

    def usage(self, pool_id: int, window: float | None = None) -> float:
        w = self.window if window is None else window
        total = 0.0
        for key in self.pool_tiers(pool_id):
            total += _tier_streams(self.items(key), w) / self.p.capacity[key]
        return total

    def excess(self, pool_id: int) -> float:
        return self.usage(pool_id) - self.p.room[pool_id]

    def move(self, g: int, src: TierKey, dst: TierKey, m: int) -> None:
        self.counts[(g, src)] -= m
        if not self.counts[(g, src)]:
            del self.counts[(g, src)]
        self.counts[(g, dst)] = self.counts.get((g, dst), 0) + m


def _share_per_request(o: _Option, window: float) -> float:
    # Pool share one request takes at this window, for ranking moves (the exact check
    # uses _tier_streams).
    per_stream = math.floor(window / o.seconds + _EPS)
    return math.inf if per_stream < 1 else 1.0 / (o.capacity * per_stream)


def _greedy(problem: _Problem, window: float, mode: str) -> _State | None:
    """Assign every request at ``window``; None when the greedy finds no fitting plan.

    mode "cost": cheapest first, moves by extra cost per share freed;
    mode "fast": least share first, moves by the share of the destination's room used.
    """
    counts: Counts = {}
    for g, opts in enumerate(problem.options):
        usable = [o for o in opts if o.seconds <= window * (1 + _EPS)]
        if not usable:
            return None
        if mode == "cost":
            best = min(usable, key=lambda o: (o.unit_cost, _share_per_request(o, window)))
        else:
            best = min(
                usable,
                key=lambda o: (
                    _share_per_request(o, window) / problem.room[o.key[0]],
                    o.unit_cost,
                ),
            )
        counts[(g, best.key)] = problem.groups[g].count
    state = _State(problem, window, counts)

    for _ in range(_MAX_MOVES):
        over = [p for p in problem.room if state.excess(p) > _EPS]
        if not over:
            return state
        pool = over[0]
        if not _relieve(state, pool, mode):
            return None
    return None


def _relieve(state: _State, pool: int, mode: str) -> bool:
    """Apply the best move that lowers ``pool``'s usage; False when none exists."""
    problem, window = state.p, state.window
    candidates: list[tuple[tuple[float, float], int, _Option, _Option]] = []
    for (g, key), n in state.counts.items():
        if key[0] != pool or n <= 0:
            continue
        opts = problem.options[g]
        src = next(o for o in opts if o.key == key)
        e_src = _share_per_request(src, window)
        for dst in opts:
            if dst.key == key or dst.seconds > window * (1 + _EPS):
                continue
            e_dst = _share_per_request(dst, window)
            same_pool = dst.key[0] == pool
            freed = e_src - e_dst if same_pool else e_src
            if not freed > 0:
                continue
            if mode == "cost":
                rank = (dst.unit_cost_f - src.unit_cost_f) / freed
            else:
                spare = problem.room[dst.key[0]] - state.usage(dst.key[0])
                rank = 0.0 if same_pool else (e_dst / max(spare, _EPS)) / freed
            candidates.append(((rank, -freed), g, src, dst))
    candidates.sort(key=lambda c: c[0])
    before = state.usage(pool)
    for _, g, src, dst in candidates:
        n = state.counts.get((g, src.key), 0)
        m = _move_size(state, g, src, dst, n)
        if m <= 0:
            continue
        state.move(g, src.key, dst.key, m)
        if state.usage(pool) < before - _EPS:
            return True
        state.move(g, dst.key, src.key, m)  # no progress: undo, try the next move
    return False


def _move_size(state: _State, g: int, src: _Option, dst: _Option, n: int) -> int:
    """How many of group g's requests to move from src to dst: as few as relieve the
    source pool, at most what the destination pool has room for."""
    pool, dst_pool = src.key[0], dst.key[0]

    def after(m: int, p: int) -> float:
        state.move(g, src.key, dst.key, m)
        try:
            return state.usage(p)
        finally:
            state.move(g, dst.key, src.key, m)

    cap = n
    if dst_pool != pool:
        room = state.p.room[dst_pool] + _EPS
        lo, hi = 0, n  # largest m whose destination usage fits (usage grows with m)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if after(mid, dst_pool) <= room:
                lo = mid
            else:
                hi = mid - 1
        cap = lo
        if cap == 0:
            return 0
    target = state.p.room[pool] + _EPS
    if after(cap, pool) > target:
        return cap
    lo, hi = 1, cap  # fewest m that brings the source pool within its room
    while lo < hi:
        mid = (lo + hi) // 2
        if after(mid, pool) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _pool_streams(state: _State) -> tuple[dict[TierKey, int], dict[TierKey, float]]:
    """Streams per tier giving each pool its smallest makespan, and the tier makespans.

    Per pool: bisect the smallest M with sum(k_T(M) / c_T) <= room; the streams are
    k_T(M) and each tier's makespan is its exact bound with those streams (<= M).
    """
    streams: dict[TierKey, int] = {}
    spans: dict[TierKey, float] = {}
    for pool in state.p.room:
        keys = [k for k in state.pool_tiers(pool) if state.items(k)]
        if not keys:
            continue
        items = {k: state.items(k) for k in keys}
        lo = max(d for k in keys for _, d in items[k])
        hi = state.window
        if state.usage(pool, lo) <= state.p.room[pool] + _EPS:
            hi = lo
        for _ in range(_BISECT_STEPS):
            if hi - lo <= 1e-6 * hi:
                break
            mid = 0.5 * (lo + hi)
            if state.usage(pool, mid) <= state.p.room[pool] + _EPS:
                hi = mid
            else:
                lo = mid
        for k in keys:
            s = int(_tier_streams(items[k], hi))
            streams[k] = s
            spans[k] = _tier_makespan(items[k], s)
    return streams, spans


def _as_plan(state: _State, window: float, feasible: bool) -> Plan:
    streams, spans = _pool_streams(state)
    assignments = []
    for (g, key), n in sorted(
        state.counts.items(), key=lambda kv: (kv[0][0], _rank(state.p, kv[0]))
    ):
        o = next(x for x in state.p.options[g] if x.key == key)
        assignments.append(
            Assignment(
                model=key[1],
                tier=key[2],
                pool=o.option.pool,
                pool_id=key[0],
                count=n,
                unit_seconds=o.seconds,
                unit_cost=o.unit_cost,
                cost=o.unit_cost * n,
                makespan_seconds=spans[key],
                streams=streams[key],
                group=g,
                stream_share=1.0 / state.p.capacity[key],
            )
        )
    return Plan(
        feasible=feasible,
        makespan_seconds=max(spans.values(), default=0.0),
        cost=sum((a.cost for a in assignments), Decimal(0)),
        assignments=assignments,
        fastest_makespan_seconds=math.inf,
        window_seconds=window,
    )


def _cost(state: _State) -> Decimal:
    total = Decimal(0)
    for (g, key), n in state.counts.items():
        total += next(o.unit_cost for o in state.p.options[g] if o.key == key) * n
    return total


def _rank(problem: _Problem, gk: tuple[int, TierKey]) -> int:
    g, key = gk
    return next(o.option.rank for o in problem.options[g] if o.key == key)


def _bisect_window(lo: float, hi: float, ok: Callable[[float], _State | None]) -> _State | None:
    """The state found at the smallest window in [lo, hi] for which ``ok`` succeeds
    (``ok(hi)`` is known to succeed); None if it fails at hi after all."""
    best = ok(hi)
    if best is None:
        return None
    at_lo = ok(lo)
    if at_lo is not None:
        return at_lo
    for _ in range(_BISECT_STEPS):
        if hi - lo <= 1e-6 * hi:
            break
        mid = 0.5 * (lo + hi)
        found = ok(mid)
        if found is not None:
            hi, best = mid, found
        else:
            lo = mid
    return best


def _unit_cost(model: ModelOption, option: TierOption, req: RouteRequest, discount: Decimal):
    if option.tier in BATCH_PRICED_TIERS:
        standard = next((t for t in model.tiers if t.tier == "standard"), option)
        return task_cost(standard, req) * discount
    return task_cost(option, req)


def _build(
    groups: Sequence[BatchGroup],
    window: float,
    loads: Mapping[int, float],
    discount: Decimal,
    today: dt.date | None,
) -> tuple[_Problem, list[str]]:
    room: dict[int, float] = {}
    capacity: dict[TierKey, int] = {}
    options: list[tuple[_Option, ...]] = []
    notes: list[str] = []
    for i, grp in enumerate(groups):
        model = grp.model
        if isinstance(grp.count, bool) or not isinstance(grp.count, int) or grp.count < 1:
            raise PlanError(f"group {i} ({model.slug}): count must be an integer >= 1")
        if grp.input_tokens + grp.output_tokens > model.context_window:
            raise PlanError(
                f"group {i} ({model.slug}): a task of {grp.input_tokens + grp.output_tokens} "
                f"tokens exceeds the context window of {model.context_window}"
            )
        try:
            task = simengine.TaskProfile(
                input_tokens=grp.input_tokens,
                output_tokens=grp.output_tokens,
                turns=grp.turns,
                tool_seconds=float(grp.tool_seconds),
            )
        except simengine.SimEngineError as exc:
            raise PlanError(f"group {i} ({model.slug}): {exc}") from exc
        req = RouteRequest(
            input_tokens=grp.input_tokens,
            output_tokens=grp.output_tokens,
            deadline_seconds=window,
            turns=grp.turns,
            tool_seconds=grp.tool_seconds,
        )
        opts: list[_Option] = []
        why: list[str] = []
        for t in sorted(model.tiers, key=lambda t: t.rank):
            if today is not None and t.available_from and t.available_from > today:
                why.append(f"{t.tier}: not available before {t.available_from}")
                continue
            load = loads.get(t.pool_id, 0.0)
            if isinstance(load, bool) or not isinstance(load, (int, float)) or not load >= 0:
                raise PlanError(f"load of pool {t.pool_id} must be a number >= 0, got {load!r}")
            left = max(0.0, 1.0 - min(float(load), 1.0))
            try:
                pred = simengine.predict(model.spec, t.deployment, task, breakdown=False)
            except simengine.SimEngineError as exc:
                why.append(f"{t.tier}: cannot run ({exc})")
                continue
            c = pred.stream_capacity
            if math.floor(c * left + _EPS) < 1:
                why.append(f"{t.tier}: no room on {t.pool} ({load:.0%} busy, {c} streams)")
                continue
            key = (t.pool_id, model.slug, t.tier)
            room[t.pool_id] = left
            capacity[key] = min(capacity.get(key, c), c)
            cost = _unit_cost(model, t, req, discount)
            opts.append(_Option(key, t, pred.total_seconds, c, cost, float(cost)))
        if not opts:
            raise PlanError(
                f"group {i} ({model.slug}): no tier with room ({'; '.join(why) or 'no tiers'})"
            )
        notes.extend(f"group {i}: {w}" for w in why)
        options.append(tuple(opts))
    return _Problem(tuple(groups), tuple(options), room, capacity), notes


# --- Public API ---------------------------------------------------------------------


def plan_batch(
    groups: Sequence[BatchGroup],
    *,
    window_seconds: float,
    loads: Mapping[int, float],
    batch_discount: Decimal = Decimal("0.5"),
    today: dt.date | None = None,
) -> Plan:
    """Plan a batch: the cheapest assignment of its requests to tiers whose predicted
    makespan fits ``window_seconds``, on the capacity ``loads`` (pool id -> share already
    taken by interactive work, 0..1) leaves. ``today`` (a date) skips deployments not yet
    available. See the module docstring for the capacity rule and the choice.

    Raises PlanError for an empty batch, a window <= 0, a bad count or task, a task over
    the context window, or a group whose model has no tier with room.
    """
    if not groups:
        raise PlanError("the batch is empty")
    if (
        isinstance(window_seconds, bool)
        or not isinstance(window_seconds, (int, float))
        or not math.isfinite(window_seconds)
        or window_seconds <= 0
    ):
        raise PlanError(f"window_seconds must be a finite number > 0, got {window_seconds!r}")
    window = float(window_seconds)
    problem, notes = _build(groups, window, loads, Decimal(batch_discount), today)

    fastest = _fastest(problem)
    fastest_plan = _as_plan(fastest, window, feasible=False) if fastest is not None else None
    fastest_span = fastest_plan.makespan_seconds if fastest_plan else math.inf

    cheapest = _greedy(problem, window, "cost")
    if cheapest is None and fastest_plan is not None and fastest_span <= window * (1 + _EPS):
        notes.append("the cost greedy found no plan; the fastest plan fits and is used")
        cheapest = fastest
    if cheapest is not None:
        best_cost = _cost(cheapest)

        def same_cost(w: float) -> _State | None:
            s = _greedy(problem, w, "cost")
            return s if s is not None and _cost(s) == best_cost else None

        # The earliest plan among those of the minimal cost.
        lo = min(fastest_span, window)
        tightened = _bisect_window(lo, window, same_cost)
        plan = _as_plan(tightened or cheapest, window, feasible=True)
        plan.fastest_makespan_seconds = min(fastest_span, plan.makespan_seconds)
        plan.notes = notes
        return plan

    if fastest_plan is None:
        return Plan.refused(window, "no plan fits the pools' free capacity at any window", notes)
    fastest_plan.fastest_makespan_seconds = fastest_span
    fastest_plan.reason = (
        f"fastest plan needs {duration_text(fastest_span)}; window {duration_text(window)}"
    )
    fastest_plan.notes = notes
    return fastest_plan


def _fastest(problem: _Problem) -> _State | None:
    """The assignment with the smallest makespan the greedy can find, ignoring cost."""

    def fits(w: float) -> _State | None:
        return _greedy(problem, w, "fast")

    # No plan is faster than its slowest group's fastest single request.
    lo = max(min(o.seconds for o in opts) for opts in problem.options)
    hi = lo
    for _ in range(64):
        if fits(hi) is not None:
            break
        lo, hi = hi, hi * 2
    else:
        return None
    return _bisect_window(lo, hi, fits)

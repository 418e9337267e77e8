"""A finite Offline run: N requests queued at once, the run ends when the last finishes.

MLPerf's Offline scenario (LoadGen issues one query holding every sample of the run),
``trtllm-bench throughput`` and ``vllm bench throughput`` all queue a fixed set of
requests and report output tokens / the run's length. The closed-loop formula
(:func:`simengine.serving.serving_point` with ``concurrency``) is the steady state: the
batch stays full forever. A finite run fills its slots, refills each slot as a request
finishes, and then drains: once the queue is empty the batch shrinks while the longest
remaining requests finish, one token per step at a small batch. With fixed lengths the
drain is one last partial wave; with a long-tailed output distribution (reasoning
datasets: MLPerf deepseek-r1's outputs have a median of 2,194 tokens, a mean of 3,886
and a 20,000-token cap) the run can end on a handful of long requests, and the
throughput over the whole run is well below the full-batch rate.

* :func:`output_lengths` - N output lengths with a stated mean and coefficient of
  variation: the N mid-quantiles of a gamma distribution (shape 1 / cv^2, the
  maximum-entropy law for a positive length of given mean and log-mean; cv 1 is the
  exponential), capped at ``max_output_tokens``; in a fixed pseudo-random order
  (LoadGen issues samples in random order).
* :func:`schedule` - the run counted in decode steps: between two completions the batch
  is constant and every stream gains one token per step, so the intervals (steps, batch,
  the streams' mean context at the midpoint) follow from the lengths and the slots alone
  (memoised).
* :func:`simulate` - the run timed: each interval takes its steps x the step time at its
  batch and context, plus what the prompts admitted before it add to its steps (a flat
  prefill each, or the engine's chunked-prefill cost at the interval's batch).
  It also reports when the requests finish (median, 90th and 99th percentiles from the
  run's start): how long until half, or nearly all, of a batch job is back, and the
  shape a run's log can be checked against (MLPerf's Offline summary prints the same
  percentiles of its samples' latencies).

Pure functions of their arguments; the step time comes from the engine
(:func:`simengine.serving.serving_point` passes it in).
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import SimEngineError
from .lazy import special

# The completion-time quantiles a run reports (OfflineRun.completion_quantiles).
COMPLETION_QUANTILES = (0.5, 0.9, 0.99)

# The admission order's seed: a fixed permutation, so a prediction is reproducible.
ORDER_SEED = 20251205


def output_lengths(mean: float, cv: float, n: int, cap: int | None = None) -> np.ndarray:
    """``n`` output lengths (integers >= 1) of mean ``mean`` and coefficient of
    variation ``cv`` before the cap: the mid-quantiles (i + 1/2) / n of a gamma law,
    each at most ``cap``; all equal to ``mean`` when cv is 0. Shuffled by a fixed seed.
    """
    if n < 1:
        raise SimEngineError(f"need at least one request, got {n}")
    return _output_lengths(float(mean), float(cv), int(n), cap)


@functools.lru_cache(maxsize=64)
def _output_lengths(mean: float, cv: float, n: int, cap: int | None) -> np.ndarray:
    # Memoised (a fit predicts the same run many times); read-only.
    x = _lengths_at((np.arange(n) + 0.5) / n, mean, cv, cap)
    out = np.random.default_rng(ORDER_SEED).permutation(x)
    out.flags.writeable = False
    return out


def longest_output(mean: float, cv: float, n: int, cap: int | None = None) -> int:
    """The longest of :func:`output_lengths` (its top mid-quantile), without drawing all
    ``n`` (the spec checks it against the context window)."""
    if n < 1:
        raise SimEngineError(f"need at least one request, got {n}")
    return _longest_output(float(mean), float(cv), int(n), cap)


@functools.lru_cache(maxsize=256)
def _longest_output(mean: float, cv: float, n: int, cap: int | None) -> int:
    # Memoised: every prediction of a run parses its spec, which checks this.
    return int(_lengths_at(np.array([(n - 0.5) / n]), mean, cv, cap)[0])


def _lengths_at(q: np.ndarray, mean: float, cv: float, cap: int | None) -> np.ndarray:
    # Gamma quantiles q of mean ``mean`` and cv ``cv`` (all ``mean`` at cv 0), rounded to
    # whole tokens >= 1 and capped: monotone in q, so the top quantile is the longest.
    if cv <= 0:
        x = np.full(len(q), float(mean))
    else:
        shape = 1.0 / (cv * cv)
        x = special.gammaincinv(shape, q) * (mean / shape)
    x = np.maximum(1.0, np.rint(x))
    return x if cap is None else np.minimum(x, float(cap))


@dataclass(frozen=True, slots=True)
class OfflineRun:
    seconds: float  # the run's length: first admission to last token
    output_tokens: float
    mean_batch: float  # streams decoding, averaged over the decode steps
    step_seconds: float  # mean time per output token a stream sees (token-weighted)
    mean_wait: float  # mean time a request waits for a slot
    drain_seconds: float  # from the last admission to the end
    # When the requests finish, from the run's start (what MLPerf's Offline log reports
    # as each sample's latency): the median, 90th and 99th percentiles.
    completion_quantiles: tuple[float, float, float] = (math.nan, math.nan, math.nan)

    @property
    def throughput(self) -> float:
        return self.output_tokens / self.seconds


@dataclass(frozen=True, slots=True)
class Schedule:
    """A run counted in decode steps, whatever a step costs: between two completion
    events the batch is constant and every stream gains one token per step, so which
    requests decode together, and for how many steps, follows from the output lengths
    and the slots alone. The time each interval takes is the engine's (``simulate``)."""

    dk: np.ndarray  # steps in each interval between completion events (> 0)
    active: np.ndarray  # streams decoding in it
    context: np.ndarray  # their mean context at its midpoint
    pops: np.ndarray  # requests finishing at the event that ends it
    admits: np.ndarray  # requests admitted at that event (a slot each)
    initial: int  # requests admitted before the first step
    # Derived from the above once (a fit simulates one schedule many times):
    prompts: np.ndarray  # prompts each interval carries (the admissions before it)
    finisher: np.ndarray  # per finishing request, in order: the interval it ends
    # ... and how many admissions' prefills it waits for at that event: the j-th
    # request to finish there waits for min(j, admitted) of them
    prefills_before: np.ndarray


class _ByArray:
    """A small memo keyed by a read-only array's identity (and other hashable
    arguments): the memoised lengths and schedules hand the same array objects to every
    prediction of a run, and hashing their contents each time cost more than the
    lookup saves. An entry keeps its array alive, so its id cannot be reused while the
    entry stands; writable arrays are never memoised."""

    def __init__(self, size: int = 256):
        self.size = size
        self.entries: dict[tuple, tuple[np.ndarray, object]] = {}

    def get(self, array: np.ndarray, key: tuple, compute: Callable[[], object]):
        if array.flags.writeable:
            return compute()
        k = (id(array), *key)
        hit = self.entries.get(k)
        if hit is not None and hit[0] is array:
            return hit[1]
        value = compute()
        if len(self.entries) >= self.size:
            self.entries.clear()
        self.entries[k] = (array, value)
        return value


_SCHEDULES = _ByArray()
_DISTINCT = _ByArray()


def schedule(outputs: np.ndarray, input_tokens: float, slots: int) -> Schedule:
    """The run's intervals for ``outputs`` (one length per request, in admission order)
    served with ``slots`` streams at most (memoised: a fit predicts the same run with
    many parameter values)."""
    if slots < 1:
        raise SimEngineError(f"need at least one slot, got {slots}")

    def compute() -> Schedule:
        data = np.ascontiguousarray(outputs, dtype=np.float64)
        return _schedule(data.tobytes(), float(input_tokens), int(slots))

    return _SCHEDULES.get(outputs, (float(input_tokens), int(slots)), compute)


def distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``: the distinct values and where each
    entry's is, memoised for read-only arrays (a schedule's batch sizes, which a fit
    asks for once per prediction of the run)."""

    def compute() -> tuple[np.ndarray, np.ndarray]:
        found = np.unique(values, return_inverse=True)
        for a in found:
            a.flags.writeable = False
        return found

    return _DISTINCT.get(values, (), compute)


@functools.lru_cache(maxsize=64)
def _schedule(outputs: bytes, input_tokens: float, slots: int) -> Schedule:
    lengths = np.frombuffer(outputs, dtype=np.float64).astype(np.int64).tolist()
    n = len(lengths)
    heap: list[tuple[int, int]] = []  # (step the request finishes at, step it started at)
    k = sum_start = nxt = 0  # decode steps so far; sum of the active streams' starts
    dk, active, context, pops, admits = [], [], [], [], []
    while nxt < n and len(heap) < slots:
        heapq.heappush(heap, (lengths[nxt], 0))
        nxt += 1
    initial = nxt
    while heap:
        finish = heap[0][0]
        streams = len(heap)
        # The streams' mean context at the interval's midpoint: the prompt plus the
        # tokens each has generated (steps since it started). Output lengths are at
        # least one, so an interval always has steps.
        d = finish - k
        dk.append(d)
        active.append(streams)
        context.append(input_tokens + (k + d / 2.0) - sum_start / streams)
        k = finish
        popped = admitted = 0
        while heap and heap[0][0] == k:
            _, started = heapq.heappop(heap)
            sum_start -= started
            popped += 1
            if nxt < n:
                heapq.heappush(heap, (k + lengths[nxt], k))
                sum_start += k
                nxt += 1
                admitted += 1
        pops.append(popped)
        admits.append(admitted)
    pops_a = np.array(pops, dtype=np.int64)
    admits_a = np.array(admits, dtype=np.int64)
    finisher = np.repeat(np.arange(len(pops_a)), pops_a)
    first = np.repeat(np.cumsum(pops_a) - pops_a, pops_a)
    j = np.arange(len(finisher)) - first
    arrays = (np.array(dk, dtype=np.float64), np.array(active, dtype=np.float64),
              np.array(context), pops_a, admits_a,
              np.concatenate(([float(initial)], admits_a[:-1])).astype(np.float64),
              finisher, np.minimum(j, admits_a[finisher]).astype(np.float64))  # fmt: skip
    for a in arrays:
        a.flags.writeable = False
    dk_a, active_a, context_a, _, _, prompts_a, _, before = arrays
    return Schedule(
        dk_a, active_a, context_a, pops_a, admits_a, initial,
        prompts=prompts_a, finisher=finisher, prefills_before=before,
    )  # fmt: skip


def simulate(
    step: Callable[[float, float], float],
    outputs: np.ndarray,
    input_tokens: float,
    slots: int,
    prefill_busy: float = 0.0,
    *,
    step_many: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    host_many: Callable[[np.ndarray], np.ndarray] | None = None,
    carry_many: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> OfflineRun:
    """Serve ``outputs`` (one length per request, in admission order) with ``slots``
    streams at most: ``step(batch, context)`` is the time of one decode step at that
    batch when the streams hold ``context`` tokens on average (``step_many``, if given,
    the same for arrays of them, in one call); each admission adds ``prefill_busy`` (the
    GPU time its prompt's chunked prefill takes from the decode steps; 0 when prompts are
    prefilled elsewhere or on wafers), before the next request finishes or the next step.
    ``carry_many``, if given, replaces that flat cost: (batch, prompts, steps) of each
    interval -> the time the prompts it carries add to its steps (the engine's chunked
    prefill rides the decode steps, so what a prompt costs depends on the batch beside
    it and how many share the steps).
    ``host_many``, if given, is the host's work per step for arrays of batches
    (simengine.host): the host loop runs beside the GPU, so an interval of d steps at
    batch b takes max(its decode steps + the prefills they carry, d x host(b)).
    """
    n = len(outputs)
    sch = schedule(outputs, input_tokens, slots)
    if step_many is not None:
        st = np.asarray(step_many(sch.active, sch.context), dtype=np.float64)
    else:
        pairs = zip(sch.active.tolist(), sch.context.tolist(), strict=True)
        st = np.array([step(a, c) for a, c in pairs])
    span = sch.dk * st  # each interval's decode time
    # The prompts each interval carries: the initial admissions' in the first, then
    # those of the admissions made at the event before it; and what each costs.
    prompts = sch.prompts
    if carry_many is None:
        carried = float(prefill_busy) * prompts
        each = np.full(len(prompts), float(prefill_busy))
    else:
        carried = np.asarray(carry_many(sch.active, prompts, sch.dk), dtype=np.float64)
        each = np.divide(carried, prompts, out=np.zeros_like(carried), where=prompts > 0)
    # A prompt admitted at event i rides interval i + 1 (none after the last event).
    busy = np.append(each[1:], 0.0)
    if host_many is not None:
        # Steps the host binds take its time, prefills riding in them included.
        host = sch.dk * np.asarray(host_many(sch.active), dtype=np.float64)
        span = np.maximum(span, host - carried)
    # The time each interval ends: every interval so far and the prefills they carried.
    ends = np.cumsum(span + carried)
    # At an event the requests finish one after another, each admission's prefill
    # between them: the j-th to finish waits for min(j, admitted) prefills.
    finished = ends[sch.finisher] + busy[sch.finisher] * sch.prefills_before
    seconds = float(ends[-1] + busy[-1] * sch.admits[-1])
    # Admission times: the initial ones, then ends + busy x (1..admitted) at each event.
    initial_wait = each[0] * sch.initial * (sch.initial + 1) / 2.0
    waited = initial_wait + float(
        np.sum(sch.admits * ends + busy * sch.admits * (sch.admits + 1) / 2.0)
    )
    admitting = np.nonzero(sch.admits)[0]
    last_admission = (
        float(ends[admitting[-1]] + busy[admitting[-1]] * sch.admits[admitting[-1]])
        if len(admitting)
        else each[0] * sch.initial
    )
    tokens = float(np.sum(sch.dk * sch.active))
    steps = float(np.sum(sch.dk))
    if not math.isfinite(seconds) or seconds <= 0:
        raise SimEngineError("the offline run has no length (no output tokens)")
    return OfflineRun(
        seconds=seconds,
        output_tokens=tokens,
        mean_batch=tokens / steps,  # every stream in flight gains one token per step
        step_seconds=float(np.sum(span * sch.active)) / tokens,
        mean_wait=waited / n,
        drain_seconds=seconds - last_admission,
        completion_quantiles=tuple(np.quantile(finished, COMPLETION_QUANTILES).tolist()),
    )

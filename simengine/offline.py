"""A finite Offline run: N requests queued at once, the run ends when the last finishes.

MLPerf's Offline scenario (LoadGen issues one query holding every sample of the run),
``trtllm-bench throughput`` and ``vllm bench throughput`` all queue a fixed set of
requests and report output tokens / the run's length. The closed-loop formula
(:func:`simengine.perf.serving_point` with ``concurrency``) is the steady state: the
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
* :func:`simulate` - the run, event by event: between two completions the batch is
  constant and every stream gains one token per step, so the time is the steps x the
  step time at that batch and the streams' mean context (the midpoint of the interval).
  It also reports when the requests finish (median, 90th and 99th percentiles from the
  run's start): how long until half, or nearly all, of a batch job is back, and the
  shape a run's log can be checked against (MLPerf's Offline summary prints the same
  percentiles of its samples' latencies).

Pure functions of their arguments; the step time comes from the engine
(:func:`simengine.perf.serving_point` passes it in).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaincinv

from .errors import SimEngineError

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
    x = _lengths_at((np.arange(n) + 0.5) / n, mean, cv, cap)
    return np.random.default_rng(ORDER_SEED).permutation(x)


def longest_output(mean: float, cv: float, n: int, cap: int | None = None) -> int:
    """The longest of :func:`output_lengths` (its top mid-quantile), without drawing all
    ``n`` (the spec checks it against the context window)."""
    if n < 1:
        raise SimEngineError(f"need at least one request, got {n}")
    return int(_lengths_at(np.array([(n - 0.5) / n]), mean, cv, cap)[0])


def _lengths_at(q: np.ndarray, mean: float, cv: float, cap: int | None) -> np.ndarray:
    # Gamma quantiles q of mean ``mean`` and cv ``cv`` (all ``mean`` at cv 0), rounded to
    # whole tokens >= 1 and capped: monotone in q, so the top quantile is the longest.
    if cv <= 0:
        x = np.full(len(q), float(mean))
    else:
        shape = 1.0 / (cv * cv)
        x = gammaincinv(shape, q) * (mean / shape)
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


def simulate(
    step: Callable[[float, float], float],
    outputs: np.ndarray,
    input_tokens: float,
    slots: int,
    prefill_busy: float = 0.0,
) -> OfflineRun:
    """Serve ``outputs`` (one length per request, in admission order) with ``slots``
    streams at most: ``step(batch, context)`` is the time of one decode step at that
    batch when the streams hold ``context`` tokens on average; each admission adds
    ``prefill_busy`` (the GPU time its prompt's chunked prefill takes from the decode
    steps; 0 when prompts are prefilled elsewhere or on wafers).
    """
    n = len(outputs)
    if slots < 1:
        raise SimEngineError(f"need at least one slot, got {slots}")
    k = 0  # decode steps so far (every stream in flight gains one token per step)
    t = 0.0
    heap: list[tuple[int, int]] = []  # (step the request finishes at, step it started at)
    sum_start = 0
    waited = 0.0
    steps = 0
    time_x_tokens = 0.0
    tokens = 0.0
    nxt = 0
    last_admission = 0.0
    finished: list[float] = []

    def admit() -> None:
        nonlocal nxt, sum_start, t, waited, last_admission
        out = int(outputs[nxt])
        nxt += 1
        heapq.heappush(heap, (k + out, k))
        sum_start += k
        t += prefill_busy
        waited += t
        last_admission = t

    while nxt < n and len(heap) < slots:
        admit()
    while heap:
        finish = heap[0][0]
        active = len(heap)
        dk = finish - k
        if dk > 0:
            # The streams' mean context at the interval's midpoint: the prompt plus the
            # tokens each has generated (steps since it started).
            context = input_tokens + (k + dk / 2.0) - sum_start / active
            st = step(float(active), context)
            t += dk * st
            steps += dk
            tokens += dk * active
            time_x_tokens += dk * active * st
            k = finish
        while heap and heap[0][0] == k:
            _, started = heapq.heappop(heap)
            sum_start -= started
            finished.append(t)
            if nxt < n:
                admit()
    if not math.isfinite(t) or t <= 0:
        raise SimEngineError("the offline run has no length (no output tokens)")
    return OfflineRun(
        seconds=t,
        output_tokens=tokens,
        mean_batch=tokens / steps,  # every stream in flight gains one token per step
        step_seconds=time_x_tokens / tokens,
        mean_wait=waited / n,
        drain_seconds=t - last_admission,
        completion_quantiles=tuple(np.quantile(finished, COMPLETION_QUANTILES).tolist()),
    )

"""A job's completion time as a random variable, and the P90 the router promises.

The performance model (``predict``) gives a request's *typical* run at fixed token
counts and, under a measured load, the distribution of its wait for a replica (per
queue visit: wait with probability ``wait_probability``, then an exponential time of
mean ``wait_mean``; ``queue_seconds`` is that wait's P90). What a client is promised is
a quantile of the whole completion, wait + run, and what the worker simulates is one
draw from the same distribution, so the router's promise and the worker's outcome come
from one model:

- **Run spread.** A request's run varies around the typical one even at fixed token
  counts: the batch it shares, speculative acceptance, cache hits and the network
  differ from call to call. Modelled as lognormal with ``RUN_SPREAD`` as its sigma on
  the model's part (round trips + generation); client-declared tool time is fixed.
  RUN_SPREAD = 0.10 (a coefficient of variation of about 10 %) is an assumption, not a
  fit: no public per-request latency distribution at fixed token counts is in the
  project's reference set. Providers' published speed bands (P5-P95 across a day) are
  wider, but they mix load changes that the wait term here carries separately.
- **Wait.** The M/M/c wait of ``predict`` (per replica, over the task's turns;
  ``simengine.queueing.total_wait_quantile`` is its quantile function).

``completion_quantile`` is the quantile of wait + run (a numerical convolution, not a
sum of quantiles), ``completion_draw`` one seeded draw (inverse transform of two
uniforms). Both are pure and memoised.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import ndtr, ndtri

from .perf import Prediction
from .queueing import total_wait_quantile

RUN_SPREAD = 0.10
PROMISE_QUANTILE = 0.9
_WAIT_NODES = 64  # quantile nodes of the wait distribution in the convolution
_BISECTIONS = 48


def run_median_seconds(pred: Prediction) -> float:
    """The typical run without any wait: round trips + generation (+ tool time)."""
    return pred.transport_seconds + pred.generation_seconds + pred.tool_seconds


def completion_quantile(
    pred: Prediction, turns: int, q: float = PROMISE_QUANTILE, sigma: float = RUN_SPREAD
) -> float:
    """The q-quantile of wait + run for this prediction (simulated seconds)."""
    if pred.queue_saturated or not math.isfinite(pred.queue_seconds):
        return math.inf
    return _quantile(
        pred.transport_seconds + pred.generation_seconds,
        pred.tool_seconds,
        pred.wait_probability,
        pred.wait_mean,
        max(1, int(turns)),
        float(q),
        float(sigma),
    )


def completion_draw(
    pred: Prediction,
    turns: int,
    u_wait: float,
    u_run: float,
    sigma: float = RUN_SPREAD,
) -> tuple[float, float]:
    """(wait, run) for uniforms in (0, 1): one draw of the distribution that
    ``completion_quantile`` summarises (its q-quantile is exceeded by a share 1 - q of
    draws)."""
    if not (0.0 < u_wait < 1.0 and 0.0 < u_run < 1.0):
        raise ValueError("uniforms must lie in (0, 1)")
    if pred.queue_saturated or not math.isfinite(pred.queue_seconds):
        return math.inf, math.inf
    wait = (
        total_wait_quantile(pred.wait_probability, pred.wait_mean, max(1, int(turns)), q=u_wait)
        if pred.wait_probability > 0
        else 0.0
    )
    model_run = pred.transport_seconds + pred.generation_seconds
    run = pred.tool_seconds + model_run * math.exp(sigma * float(ndtri(u_run)))
    return wait, run


@functools.lru_cache(maxsize=512)
def _wait_nodes(p: float, mean: float, turns: int) -> tuple[float, np.ndarray]:
    # (P(no wait at all), the wait's quantiles at mid-points of its positive part).
    p_zero = (1.0 - min(p, 1.0)) ** turns
    us = p_zero + (1.0 - p_zero) * (np.arange(_WAIT_NODES) + 0.5) / _WAIT_NODES
    nodes = np.array([total_wait_quantile(p, mean, turns, q=float(u)) for u in us])
    return p_zero, nodes


@functools.lru_cache(maxsize=8192)
def _quantile(
    model_run: float, tool: float, p: float, mean: float, turns: int, q: float, sigma: float
) -> float:
    z = float(ndtri(q))
    if p <= 0 or mean <= 0:
        return tool + model_run * math.exp(sigma * z)
    if model_run <= 0:
        return tool + total_wait_quantile(p, mean, turns, q=q)
    p_zero, nodes = _wait_nodes(p, mean, turns)
    log_run = math.log(model_run)

    def cdf(t: float) -> float:
        # P(wait + run <= t): the atom at no wait plus the wait's quantile nodes.
        left = t - tool
        if left <= 0:
            return 0.0
        no_wait = float(ndtr((math.log(left) - log_run) / sigma))
        rest = left - nodes
        with np.errstate(divide="ignore", invalid="ignore"):
            waited = np.where(
                rest > 0, ndtr((np.log(np.maximum(rest, 1e-300)) - log_run) / sigma), 0.0
            )
        return p_zero * no_wait + (1.0 - p_zero) * float(waited.mean())

    lo = tool + model_run * math.exp(sigma * z)  # no wait: a lower bound
    # Union bound: both parts at their (1+q)/2 quantiles cover at least q.
    q_half = 1.0 - (1.0 - q) / 2.0
    hi = (
        tool
        + model_run * math.exp(sigma * float(ndtri(q_half)))
        + total_wait_quantile(p, mean, turns, q=q_half)
    )
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if cdf(mid) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return hi

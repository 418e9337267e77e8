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

``completion_quantile`` is the quantile of wait + run (not a sum of quantiles: the
jobs that wait have wait + run as a gamma shifted to match its first three moments, the
others the run alone, exactly; the quantile of the mixture found by regula falsi), ``completion_draw`` one seeded draw (inverse transform of two
uniforms). Both are pure; the quantile is memoised.
"""

from __future__ import annotations

import functools
import math

from .lazy import special
from .perf import Prediction
from .queueing import total_wait_quantile, wait_gamma

RUN_SPREAD = 0.10
PROMISE_QUANTILE = 0.9


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
    wait = 0.0
    if pred.wait_probability > 0 and pred.wait_mean > 0:
        p_zero, shape, scale = wait_gamma(pred.wait_probability, pred.wait_mean, max(1, int(turns)))
        if u_wait > p_zero:  # inverse transform of the wait's distribution
            wait = float(special.gammaincinv(shape, (u_wait - p_zero) / (1.0 - p_zero))) * scale
    model_run = pred.transport_seconds + pred.generation_seconds
    run = pred.tool_seconds + model_run * math.exp(sigma * float(special.ndtri(u_run)))
    return wait, run


_SOLVER_STEPS = 40
_TOLERANCE = 1e-4  # in probability: a P90 promise within 0.9 +- 0.0001


@functools.lru_cache(maxsize=65_536)
def _quantile(
    model_run: float, tool: float, p: float, mean: float, turns: int, q: float, sigma: float
) -> float:
    z = float(special.ndtri(q))
    if p <= 0 or mean <= 0:
        return tool + model_run * math.exp(sigma * z)
    if model_run <= 0:
        return tool + total_wait_quantile(p, mean, turns, q=q)
    p_zero, shape, scale = wait_gamma(p, mean, turns)
    # Who waited: wait (gamma) + run (lognormal), as a gamma shifted to match the sum's
    # first three moments (cumulants add); who did not: the run alone, exactly.
    e2 = math.exp(sigma * sigma)
    run_mean = model_run * math.sqrt(e2)
    run_var = model_run * model_run * (e2 - 1.0) * e2
    run_k3 = (e2 + 2.0) * math.sqrt(e2 - 1.0) * run_var**1.5
    var = shape * scale * scale + run_var
    k3 = 2.0 * shape * scale**3 + run_k3
    s_shape = 4.0 * var**3 / (k3 * k3)
    s_scale = k3 / (2.0 * var)
    shift = shape * scale + run_mean - s_shape * s_scale
    log_run = math.log(model_run)

    def cdf(t: float) -> float:
        no_wait = float(special.ndtr((math.log(t) - log_run) / sigma)) if t > 0 else 0.0
        waited = float(special.gammainc(s_shape, (t - shift) / s_scale)) if t > shift else 0.0
        return p_zero * no_wait + (1.0 - p_zero) * waited - q

    lo = model_run * math.exp(sigma * z)  # no wait: a lower bound
    # Union bound: both parts at their (1+q)/2 quantiles cover at least q.
    q_half = 1.0 - (1.0 - q) / 2.0
    hi = model_run * math.exp(sigma * float(special.ndtri(q_half))) + total_wait_quantile(
        p, mean, turns, q=q_half
    )
    f_lo, f_hi = cdf(lo), cdf(hi)
    if f_lo >= 0:
        return tool + lo
    if f_hi <= 0:
        return tool + hi
    # Regula falsi, Illinois variant: a bracket that always shrinks, few evaluations.
    side = 0
    t = lo
    for _ in range(_SOLVER_STEPS):
        t = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        f = cdf(t)
        if abs(f) < _TOLERANCE:
            break
        if f < 0:
            lo, f_lo = t, f
            if side == -1:
                f_hi /= 2.0
            side = -1
        else:
            hi, f_hi = t, f
            if side == 1:
                f_lo /= 2.0
            side = 1
    return tool + t

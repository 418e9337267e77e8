"""Queues: closed-form wait estimates and an exact discrete-event simulation.

Closed form (router estimate): Erlang C for M/M/c, Allen-Cunneen correction for
G/G/c, non-preemptive priority classes. Saturation (offered load >= servers) is
reported as ``saturated=True`` with infinite waits - never as a negative number or an
exception - so a router can compare it with other options.

Simulation (:func:`simulate_queue`): jobs over pools of identical servers with
non-preemptive priority between classes and FCFS within a class. One server and
one class uses the Lindley recursion, vectorised with numpy; otherwise an event loop
over server free times (heapq), exact for FCFS and for non-preemptive priority.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import SimEngineError
from .lazy import special

# Tier -> priority class on shared pools (lower is served first, non-preemptive).
TIER_PRIORITY: dict[str, int] = {"ultrafast": 0, "priority": 0, "standard": 1, "flex": 2}


@dataclass(frozen=True)
class ClassWait:
    """Wait of one priority class (index 0 is served first)."""

    arrival_rate: float
    mean_wait: float
    p90_wait: float
    saturated: bool


@dataclass(frozen=True)
class WaitEstimate:
    """Closed-form queue estimate.

    ``utilisation`` = lambda / (c mu). When it is >= 1 the queue is unstable:
    ``saturated`` is True and ``mean_wait``/``p90_wait`` are ``math.inf``. With priority
    classes the top-level waits are arrival-weighted over classes, and ``classes``
    holds each class; a high class can stay finite while lower classes saturate.
    """

    servers: int
    arrival_rate: float
    service_rate: float
    utilisation: float
    prob_wait: float
    mean_wait: float
    p90_wait: float
    saturated: bool
    classes: tuple[ClassWait, ...] = ()


# The queue terms are pure functions of their arguments, and the loads come from one
# snapshot read per request (many decisions share them), so both are memoised. Bounded
# LRUs of 65,536 entries each (key, value and LRU link: 0.2 kB an entry measured with
# tracemalloc, ~0.25 kB with its argument floats, ~16 MB each at the bound); typed, so
# an int and a float (or a numpy scalar) never share an entry, and every answer is the
# one the uncached formula gives, bit for bit.
QUEUE_MEMO_SIZE = 65_536


@functools.lru_cache(maxsize=QUEUE_MEMO_SIZE, typed=True)
def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c (a = lambda/mu < c).

    Erlang B by its recursion for small pools (exact); for large pools (a GPU cluster
    holds tens of thousands of streams) the same value from the Poisson distribution,
    B = P(X = c) / P(X <= c) with X ~ Poisson(a), in O(1) instead of O(c). Memoised
    (``QUEUE_MEMO_SIZE`` entries, LRU).
    """
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    if servers <= _RECURSION_MAX_SERVERS:
        b = 1.0
        for i in range(1, servers + 1):
            b = offered_load * b / (i + offered_load * b)
    else:
        log_pmf = servers * math.log(offered_load) - offered_load - math.lgamma(servers + 1)
        cdf = float(special.pdtr(servers, offered_load))
        b = math.exp(log_pmf) / cdf if cdf > 0 else 1.0
    return servers * b / (servers - offered_load * (1.0 - b))


_RECURSION_MAX_SERVERS = 64


def _tail_quantile(prob_wait: float, conditional_mean: float, q: float) -> float:
    # Exponential tail P(W > t) = C exp(-t / m): exact for M/M/c FCFS, the usual
    # approximation elsewhere.
    if prob_wait <= 1.0 - q or conditional_mean <= 0:
        return 0.0
    return conditional_mean * math.log(prob_wait / (1.0 - q))


def mmc_p90_wait(servers: int, arrival_rate: float, service_rate: float) -> tuple[float, bool]:
    """P90 wait of an M/M/c queue and whether it is saturated: the router's hot path.

    The same value as ``wait_estimate(servers, arrival_rate, service_rate).p90_wait``
    without its argument checks (the caller has them). When the pool is far below
    capacity (c - a >= 6 sqrt(a): P(wait) < 1e-6, under the 10 % a P90 needs) the
    answer is 0 without computing Erlang C.
    """
    offered = arrival_rate / service_rate
    if offered >= servers:
        return math.inf, True
    if offered <= 0 or servers - offered >= 6.0 * math.sqrt(offered):
        return 0.0, False
    prob_wait = erlang_c(servers, offered)
    return _tail_quantile(prob_wait, 1.0 / (servers * service_rate - arrival_rate), 0.9), False


@functools.lru_cache(maxsize=QUEUE_MEMO_SIZE, typed=True)
def total_wait_quantile(
    prob_wait: float, conditional_mean: float, turns: int, q: float = 0.9
) -> float:
    """Quantile of a task's total wait over ``turns`` queue visits (not a sum of quantiles).

    Each visit waits with probability ``prob_wait``, then an exponential time of mean
    ``conditional_mean`` (the M/M/c FCFS wait). The total is 0 with probability
    (1 - p)^n, otherwise a sum of exponentials, approximated by a gamma matched on its
    first two moments (exact for one turn). Memoised (``QUEUE_MEMO_SIZE`` entries, LRU).
    """
    if prob_wait <= 0 or conditional_mean <= 0 or turns < 1:
        return 0.0
    if not math.isfinite(conditional_mean):
        return math.inf
    p_zero, shape, scale = wait_gamma(prob_wait, conditional_mean, turns)
    if p_zero >= q:
        return 0.0
    positive = 1.0 - p_zero
    # P(S > t) = 1 - q  <=>  P(S > t | S > 0) = (1 - q) / positive.
    return float(special.gammaincinv(shape, 1.0 - (1.0 - q) / positive)) * scale


def wait_gamma(prob_wait: float, conditional_mean: float, turns: int) -> tuple[float, float, float]:
    """A task's total wait over ``turns`` queue visits as (P(no wait at all), shape,
    scale): 0 with that probability, otherwise a gamma matched on the first two moments
    of the sum of the visits' exponential waits (exact for one turn)."""
    n, p, m = turns, min(prob_wait, 1.0), conditional_mean
    p_zero = (1.0 - p) ** n
    positive = 1.0 - p_zero
    if positive <= 0:
        return 1.0, 1.0, 0.0
    mean = n * p * m / positive
    second = (n * 2.0 * p * m * m + n * (n - 1) * p * p * m * m) / positive
    var = max(second - mean * mean, 1e-300)
    return p_zero, mean * mean / var, var / mean


def wait_estimate(
    servers: int,
    arrival_rate: float | Sequence[float],
    service_rate: float,
    cv_arrival: float = 1.0,
    cv_service: float = 1.0,
    *,
    quantile: float = 0.9,
) -> WaitEstimate:
    """Closed-form waiting time in a queue with ``servers`` identical servers.

    ``arrival_rate`` is a rate (jobs/s) or a sequence of per-class rates, highest
    priority first, for non-preemptive priority classes:
    W_k = [C/(c mu)] / ((1 - sigma_{k-1})(1 - sigma_k)), sigma_k = sum_{i<=k} lambda_i/(c mu).
    ``cv_*`` are coefficients of variation (1 = Poisson / exponential); waits are
    scaled by (ca^2 + cs^2)/2 (Allen-Cunneen). The P-``quantile`` wait uses the
    exponential tail P(W > t) = C exp(-t C / W).

    Saturation: when lambda >= c mu, ``saturated=True`` and waits are ``math.inf``.
    """
    if not isinstance(servers, (int, np.integer)) or servers < 1:
        raise SimEngineError(f"servers must be a positive integer, got {servers!r}")
    servers = int(servers)
    if not (math.isfinite(service_rate) and service_rate > 0):
        raise SimEngineError(f"service_rate must be > 0, got {service_rate!r}")
    rates = [float(arrival_rate)] if np.isscalar(arrival_rate) else [float(r) for r in arrival_rate]
    if not rates or any(not math.isfinite(r) or r < 0 for r in rates):
        raise SimEngineError(f"arrival rates must be finite and >= 0, got {arrival_rate!r}")
    for name, cv in (("cv_arrival", cv_arrival), ("cv_service", cv_service)):
        if not (math.isfinite(cv) and cv >= 0):
            raise SimEngineError(f"{name} must be finite and >= 0, got {cv!r}")
    if not 0 < quantile < 1:
        raise SimEngineError(f"quantile must be in (0, 1), got {quantile!r}")

    lam = sum(rates)
    capacity = servers * service_rate
    rho = lam / capacity
    scale = (cv_arrival**2 + cv_service**2) / 2.0
    saturated = rho >= 1.0
    prob_wait = 1.0 if saturated else erlang_c(servers, lam / service_rate)

    # Mean residual time until a server frees when all are busy, times P(wait).
    w0 = scale * prob_wait / capacity
    classes: list[ClassWait] = []
    sigma_prev = 0.0
    for rate in rates:
        sigma = sigma_prev + rate / capacity
        if sigma >= 1.0:
            classes.append(ClassWait(rate, math.inf, math.inf, True))
        else:
            mean = w0 / ((1.0 - sigma_prev) * (1.0 - sigma))
            p90 = _tail_quantile(prob_wait, mean / prob_wait if prob_wait > 0 else 0.0, quantile)
            classes.append(ClassWait(rate, mean, p90, False))
        sigma_prev = sigma

    if saturated:
        mean_wait = p90_wait = math.inf
    elif len(rates) == 1:
        mean_wait, p90_wait = classes[0].mean_wait, classes[0].p90_wait
    else:
        mean_wait = sum(c.arrival_rate * c.mean_wait for c in classes) / lam if lam else 0.0
        p90_wait = _tail_quantile(
            prob_wait, mean_wait / prob_wait if prob_wait > 0 else 0.0, quantile
        )
    return WaitEstimate(
        servers=servers,
        arrival_rate=lam,
        service_rate=service_rate,
        utilisation=rho,
        prob_wait=prob_wait,
        mean_wait=mean_wait,
        p90_wait=p90_wait,
        saturated=saturated,
        classes=tuple(classes) if len(rates) > 1 else (),
    )


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class QueueResult:
    """Per-job outcome of :func:`simulate_queue`, in the caller's job order."""

    arrival: np.ndarray
    service: np.ndarray
    start: np.ndarray
    pool: np.ndarray
    priority: np.ndarray
    servers: tuple[int, ...]

    @property
    def wait(self) -> np.ndarray:
        """Time each job waited for a server."""
        return self.start - self.arrival

    @property
    def finish(self) -> np.ndarray:
        """Completion time of each job."""
        return self.start + self.service

    def mean_wait(self, mask: np.ndarray | None = None) -> float:
        """Mean wait (optionally over a boolean mask of jobs)."""
        w = self.wait if mask is None else self.wait[mask]
        return float(w.mean()) if w.size else 0.0

    def quantile_wait(self, q: float = 0.9, mask: np.ndarray | None = None) -> float:
        """Wait quantile (default P90)."""
        w = self.wait if mask is None else self.wait[mask]
        return float(np.quantile(w, q)) if w.size else 0.0

    def utilisation(self, pool: int = 0) -> float:
        """Busy fraction of a pool's servers over the simulated span."""
        m = self.pool == pool
        if not m.any():
            return 0.0
        span = float(self.finish[m].max() - self.arrival[m].min())
        return float(self.service[m].sum()) / (self.servers[pool] * span) if span > 0 else 0.0


def _lindley(arrival: np.ndarray, service: np.ndarray) -> np.ndarray:
    # W_{n+1} = max(0, W_n + S_n - (A_{n+1} - A_n)) unrolled: Z = [0, cumsum(S_k - gap_k)],
    # W = Z - running minimum of Z. Exact single-server FCFS.
    if arrival.size == 0:
        return arrival.copy()
    z = np.empty_like(arrival)
    z[0] = 0.0
    np.cumsum(service[:-1] - np.diff(arrival), out=z[1:])
    return arrival + (z - np.minimum.accumulate(z))


def _fcfs_heap(arrival: list[float], service: list[float], servers: int) -> list[float]:
    # FCFS over c servers: jobs start in arrival order on the earliest-free server.
    free = [-math.inf] * servers
    start = [0.0] * len(arrival)
    replace = heapq.heapreplace
    for i, a in enumerate(arrival):
        f = free[0]
        t = a if a > f else f
        start[i] = t
        replace(free, t + service[i])
    return start


def _priority_heap(
    arrival: list[float], service: list[float], keys: list[int], n: int, servers: int
) -> list[float]:
    # Non-preemptive priority: whenever a server frees, it takes the waiting job with
    # the lowest key = class * n + arrival order; a job arriving to an idle server
    # starts at once (simultaneous arrivals are resolved by class).
    free = [-math.inf] * servers
    start = [0.0] * n
    waiting: list[int] = []
    push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
    i = 0
    for _ in range(n):
        f = free[0]
        while i < n and arrival[i] <= f:
            push(waiting, keys[i])
            i += 1
        if waiting:
            j = pop(waiting) % n
            t = f
        else:
            t = arrival[i]
            if i + 1 < n and arrival[i + 1] == t:
                while i < n and arrival[i] <= t:
                    push(waiting, keys[i])
                    i += 1
                j = pop(waiting) % n
            else:
                # Common case at moderate load: nobody waits, the job starts on arrival.
                j = i
                i += 1
        start[j] = t
        replace(free, t + service[j])
    return start


def simulate_queue(
    arrival_times: Sequence[float] | np.ndarray,
    service_times: Sequence[float] | np.ndarray,
    servers: int | Sequence[int],
    *,
    priority: Sequence[int] | np.ndarray | None = None,
    pool: Sequence[int] | np.ndarray | None = None,
) -> QueueResult:
    """Discrete-event simulation of jobs over pools of servers.

    ``servers`` is the server count of each pool (an int for one pool); ``pool`` gives
    each job's pool index (default 0) and ``priority`` its class (lower is served
    first; default: one class). Within a pool, service is non-preemptive priority,
    FCFS within a class (see ``TIER_PRIORITY`` for tiers). Jobs need not be sorted.
    Handles 10^6 jobs in about a second; one-server single-class pools are solved
    exactly with the vectorised Lindley recursion.
    """
    arrival = np.asarray(arrival_times, dtype=np.float64)
    service = np.asarray(service_times, dtype=np.float64)
    n = arrival.size
    if arrival.ndim != 1 or service.shape != arrival.shape:
        raise SimEngineError("arrival_times and service_times must be 1-D and equally long")
    if n and (not np.isfinite(arrival).all() or not np.isfinite(service).all()):
        raise SimEngineError("arrival and service times must be finite")
    if n and service.min() < 0:
        raise SimEngineError("service times must be >= 0")
    server_counts = (servers,) if np.isscalar(servers) else tuple(servers)
    if not server_counts or any(int(c) != c or c < 1 for c in server_counts):
        raise SimEngineError(f"server counts must be positive integers, got {servers!r}")
    server_counts = tuple(int(c) for c in server_counts)
    pools = np.zeros(n, dtype=np.int64) if pool is None else np.asarray(pool, dtype=np.int64)
    klass = (
        np.zeros(n, dtype=np.int64) if priority is None else np.asarray(priority, dtype=np.int64)
    )
    if pools.shape != arrival.shape or klass.shape != arrival.shape:
        raise SimEngineError("pool and priority must have one entry per job")
    if n and (pools.min() < 0 or pools.max() >= len(server_counts)):
        raise SimEngineError(f"pool indices must be in [0, {len(server_counts)})")
    if n and klass.min() < 0:
        raise SimEngineError("priority classes must be >= 0")

    start = np.empty(n, dtype=np.float64)
    for p, c in enumerate(server_counts):
        idx = np.flatnonzero(pools == p) if len(server_counts) > 1 else None
        a, s, k = (
            (arrival, service, klass) if idx is None else (arrival[idx], service[idx], klass[idx])
        )
        if a.size == 0:
            continue
        order = None
        if a.size > 1 and (np.diff(a) < 0).any():  # generators emit sorted arrivals
            order = np.argsort(a, kind="stable")
            a, s, k = a[order], s[order], k[order]
        single_class = k.min() == k.max()
        if single_class and c == 1:
            st = _lindley(a, s)
        elif single_class:
            st = np.array(_fcfs_heap(a.tolist(), s.tolist(), c))
        else:
            m = a.size
            keys = (k * m + np.arange(m, dtype=np.int64)).tolist()
            st = np.array(_priority_heap(a.tolist(), s.tolist(), keys, m, c))
        if order is not None:
            st = st[np.argsort(order)]  # back to pool order
        if idx is None:
            start[:] = st
        else:
            start[idx] = st
    return QueueResult(
        arrival=arrival,
        service=service,
        start=start,
        pool=pools,
        priority=klass,
        servers=server_counts,
    )


@dataclass(frozen=True)
class JobStream:
    """A Poisson stream of jobs for one (pool, class): rate in jobs/s, service mean in s."""

    rate: float
    mean_service: float
    pool: int = 0
    priority: int = 0
    cv_service: float = 1.0


def synthetic_jobs(
    n: int, streams: Sequence[JobStream], seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``n`` jobs from merged Poisson streams: (arrival, service, pool, priority).

    Arrivals are sorted. Service times are exponential (cv 1) or gamma (other cv).
    The same seed gives the same jobs, so two simulators can be compared job by job.
    """
    if n < 0:
        raise SimEngineError(f"n must be >= 0, got {n}")
    if not streams:
        raise SimEngineError("need at least one JobStream")
    rng = np.random.default_rng(seed)
    rates = np.array([s.rate for s in streams], dtype=np.float64)
    if (rates <= 0).any():
        raise SimEngineError("stream rates must be > 0")
    total = rates.sum()
    arrival = np.cumsum(rng.exponential(1.0 / total, size=n))
    which = rng.choice(len(streams), size=n, p=rates / total)
    service = np.empty(n)
    for i, s in enumerate(streams):
        m = which == i
        k = int(m.sum())
        if s.cv_service == 1.0:
            service[m] = rng.exponential(s.mean_service, size=k)
        elif s.cv_service == 0.0:
            service[m] = s.mean_service
        else:
            shape = 1.0 / s.cv_service**2
            service[m] = rng.gamma(shape, s.mean_service / shape, size=k)
    pool = np.array([s.pool for s in streams], dtype=np.int64)[which]
    prio = np.array([s.priority for s in streams], dtype=np.int64)[which]
    return arrival, service, pool, prio

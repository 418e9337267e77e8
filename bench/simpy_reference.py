"""Straightforward SimPy reference for :func:`simengine.simulate_queue` (same semantics).

Each pool is a ``simpy.PriorityResource`` (non-preemptive; lower priority value first,
FCFS within a priority); a source process releases jobs at their arrival times.
Used by the benchmark and by the tests to check the engine job by job.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import simpy


def simulate_simpy(
    arrival: np.ndarray,
    service: np.ndarray,
    servers: Sequence[int],
    priority: np.ndarray | None = None,
    pool: np.ndarray | None = None,
) -> np.ndarray:
    """Start time of each job (caller's order), simulated with SimPy."""
    n = len(arrival)
    arr = np.asarray(arrival, dtype=float).tolist()
    svc = np.asarray(service, dtype=float).tolist()
    prio = [0] * n if priority is None else np.asarray(priority).tolist()
    pools = [0] * n if pool is None else np.asarray(pool).tolist()
    env = simpy.Environment()
    resources = [simpy.PriorityResource(env, capacity=int(c)) for c in servers]
    start = [0.0] * n

    def job(j: int):
        with resources[pools[j]].request(priority=prio[j]) as req:
            yield req
            start[j] = env.now
            yield env.timeout(svc[j])

    def source():
        for j in np.argsort(arrival, kind="stable").tolist():
            delay = arr[j] - env.now
            if delay > 0:
                yield env.timeout(delay)
            env.process(job(j))

    env.process(source())
    env.run()
    return np.array(start)

"""Benchmark: simengine.simulate_queue vs a plain SimPy simulation of the same jobs.

Workload: Sol-like pools - a shared GPU pool (64 streams; priority > standard > flex,
non-preemptive) and a wafer pool (16 streams; ultrafast), Poisson arrivals at ~80 %
load, exponential service. The engine simulates all jobs; SimPy runs the first
``--simpy-jobs`` jobs (it is slow), both engines are compared job by job on that
prefix, and per-job rates give the speed ratio.

Usage: .venv/bin/python bench/bench_simengine.py [--jobs N] [--simpy-jobs M] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere without installing the project
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from simpy_reference import simulate_simpy  # noqa: E402

from simengine import JobStream, simulate_queue, synthetic_jobs, wait_estimate  # noqa: E402

GPU_SERVERS, WAFER_SERVERS = 64, 16
GPU_MEAN_SERVICE, WAFER_MEAN_SERVICE = 8.0, 2.0  # seconds per request
LOAD = 0.8
GPU_SHARES = {0: 0.2, 1: 0.6, 2: 0.2}  # priority, standard, flex


def workload_streams() -> list[JobStream]:
    """Job streams of the benchmark (pool 0 = GPUs, pool 1 = wafers)."""
    gpu_rate = LOAD * GPU_SERVERS / GPU_MEAN_SERVICE
    streams = [
        JobStream(gpu_rate * share, GPU_MEAN_SERVICE, pool=0, priority=cls)
        for cls, share in GPU_SHARES.items()
    ]
    streams.append(JobStream(LOAD * WAFER_SERVERS / WAFER_MEAN_SERVICE, WAFER_MEAN_SERVICE, 1, 0))
    return streams


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--simpy-jobs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    servers = (GPU_SERVERS, WAFER_SERVERS)
    arrival, service, pool, prio = synthetic_jobs(args.jobs, workload_streams(), args.seed)

    t0 = time.perf_counter()
    result = simulate_queue(arrival, service, servers, priority=prio, pool=pool)
    engine_s = time.perf_counter() - t0
    engine_rate = args.jobs / engine_s
    print(f"engine: {args.jobs:,} jobs in {engine_s:.2f} s = {engine_rate:,.0f} jobs/s")

    # Closed form next to the simulation, per class (GPU pool) and for the wafer pool.
    gpu_rates = [s.rate for s in workload_streams()[:3]]
    est = wait_estimate(GPU_SERVERS, gpu_rates, 1.0 / GPU_MEAN_SERVICE)
    for cls, cw in enumerate(est.classes):
        mask = (pool == 0) & (prio == cls)
        print(
            f"  gpu class {cls}: mean wait sim {result.mean_wait(mask):.3f} s, "
            f"closed form {cw.mean_wait:.3f} s"
        )
    west = wait_estimate(WAFER_SERVERS, workload_streams()[3].rate, 1.0 / WAFER_MEAN_SERVICE)
    print(
        f"  wafer pool: mean wait sim {result.mean_wait(pool == 1):.3f} s, "
        f"closed form {west.mean_wait:.3f} s"
    )

    m = min(args.simpy_jobs, args.jobs)
    note = "" if m == args.jobs else f" (first {m:,} jobs; SimPy is too slow for all {args.jobs:,})"
    sl = slice(0, m)  # arrivals are sorted, so this is a time prefix
    t0 = time.perf_counter()
    ref_start = simulate_simpy(arrival[sl], service[sl], servers, prio[sl], pool[sl])
    simpy_s = time.perf_counter() - t0
    simpy_rate = m / simpy_s
    print(f"simpy:  {m:,} jobs in {simpy_s:.2f} s = {simpy_rate:,.0f} jobs/s{note}")

    # Same prefix through the engine: a later arrival can overtake a waiting job of a
    # lower class, so the prefix is compared against a prefix run, not the full run.
    t0 = time.perf_counter()
    prefix = simulate_queue(arrival[sl], service[sl], servers, priority=prio[sl], pool=pool[sl])
    prefix_s = time.perf_counter() - t0
    ref_wait = ref_start - arrival[sl]
    diff = float(np.max(np.abs(prefix.wait - ref_wait))) if m else 0.0
    print(f"max |wait engine - wait simpy| on {m:,} jobs: {diff:.3e} s")
    print(
        f"speed ratio (jobs/s): {engine_rate / simpy_rate:.1f}x on the full run, "
        f"{(m / prefix_s) / simpy_rate:.1f}x on the same {m:,} jobs"
    )
    ok = diff < 1e-6
    print("waits agree" if ok else "WAITS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: a finite run's prediction (``offline_requests``), its step line read at
every batch size at once against one batch size at a time.

A finite run (simengine.offline) goes through every batch size from its slots down to
one stream as it drains; each interval's step is the deployment's step line at that
batch. The engine builds the line once for the array of sizes
(simengine.perf.gpu_token_line, numpy); the baseline, run in the same process, builds it
size by size with the scalar path (simengine.perf._token_line), as the engine did before
issue 28's nineteenth round. Both give the same figures (checked here, and to 1e-12 by
tests/simengine/test_simengine_vectorised.py).

Workloads: the fitted GPU points that are finite runs (simengine/data/gpu_points.toml:
MLPerf Offline, thousands of requests, long-tailed outputs) and, with ``--fit``, one
whole calibration refit (every target, ~200 Levenberg-Marquardt iterations), which
predicts those runs thousands of times.

Usage: .venv/bin/python bench/bench_offline.py [--repeat N] [--fit]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere without installing the project

import numpy as np  # noqa: E402

import simengine.serving as serving  # noqa: E402
from simengine import perf  # noqa: E402
from simengine.calibration import FITTED_GPU_POINTS, SOL_SLUG, SPARK_SLUG, calibrate  # noqa: E402
from simengine.model import load_catalog_models  # noqa: E402
from simengine.spec import predict_spec  # noqa: E402
from simengine.step import StepLine  # noqa: E402


def per_size(s, batches: np.ndarray, context: float) -> StepLine:
    """The baseline: the step line built one batch size at a time (scalar path)."""
    lines = [perf._token_line(s, b, context) for b in batches.tolist()]
    return StepLine(*(np.array([getattr(line, f) for line in lines]) for f in StepLine._fields))


@contextlib.contextmanager
def baseline():
    # The finite run reads serving.gpu_token_line; swap in the size-by-size build.
    engine = serving.gpu_token_line
    serving.gpu_token_line = per_size
    try:
        yield
    finally:
        serving.gpu_token_line = engine


def time_specs(specs: list[dict], repeat: int) -> tuple[float, list[float]]:
    """Median seconds to predict every spec once, over ``repeat`` rounds; the figures."""
    rounds, figures = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        figures = [predict_spec(spec)["throughput_tokens_per_second"] for spec in specs]
        rounds.append(time.perf_counter() - t0)
    return statistics.median(rounds), figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="rounds per side (median)")
    ap.add_argument("--fit", action="store_true", help="also time one whole refit per side")
    args = ap.parse_args()
    specs = [p["spec"] for p in FITTED_GPU_POINTS if p["spec"].get("offline_requests")]
    requests = sum(s["offline_requests"] for s in specs)
    print(f"{len(specs)} finite runs of the fitted GPU points ({requests:,} requests in all)")
    predict_spec(specs[0])  # imports, caches of the parsed catalog
    # The schedules are memoised (simengine.offline._schedule), so both sides time only
    # what differs: reading the step at each batch size.
    ours, figures = time_specs(specs, args.repeat)
    with baseline():
        theirs, reference = time_specs(specs, args.repeat)
    worst = max(abs(a - b) / b for a, b in zip(figures, reference, strict=True))
    print(f"every batch size at once: {ours * 1e3:8.1f} ms for all {len(specs)} runs")
    print(f"one batch size at a time: {theirs * 1e3:8.1f} ms (baseline, same process)")
    print(f"ratio baseline / engine:  {theirs / ours:8.1f}x   (largest difference in the "
          f"figures: {worst:.1e} relative)")  # fmt: skip
    if args.fit:
        models = load_catalog_models(ROOT / "catalog" / "data" / "catalog.toml")
        sol, spark = models[SOL_SLUG], models[SPARK_SLUG]
        t0 = time.perf_counter()
        fit = calibrate(sol=sol, spark=spark)
        ours = time.perf_counter() - t0
        with baseline():
            t0 = time.perf_counter()
            old = calibrate(sol=sol, spark=spark)
            theirs = time.perf_counter() - t0
        print(f"refit: {ours:.1f} s against {theirs:.1f} s one size at a time "
              f"({theirs / ours:.1f}x; cost {fit.cost:.6f} and {old.cost:.6f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

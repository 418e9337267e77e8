"""Interactive job start latency with and without large batches running, with one worker
for all queues (`make run`) and with a worker per queue (the production split).

Usage: .venv/bin/python bench/bench_queues.py [--jobs 40] [--batches 4] [--lines 10000]

Starts a throwaway PostgreSQL cluster and Redis server (tests/stack.py), gunicorn (2
processes) and beat. Scenarios:
  shared  one worker, `-Q interactive,batch,housekeeping`, concurrency 2 (make run)
  split   three workers, one per queue, concurrency 1 each (README "Queues by kind of work")
each idle, then while `--batches` batches of `--lines` lines validate and run. A job's
start latency is the time from its POST's answer to a poll seeing it leave `queued` (the
worker claimed it; polled every 10 ms); the Celery queue wait of routing.run_job is
read from /metrics (its histogram's sum and count, before and after). Simulated time is
compressed (SIM_TIME_SCALE=1e6): a job's run ends at once, a batch is its links' work.
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.realparts import PostgresServer, RedisServer  # noqa: E402
from tests.stack import Stack  # noqa: E402

QUEUES = ("interactive", "batch", "housekeeping")


def run_job_wait(stack: Stack) -> tuple[float, float]:
    """(sum, count) of routing.run_job's queue wait, from /metrics."""
    total = count = 0.0
    for family in text_string_to_metric_families(stack.metrics()):
        for s in family.samples:
            if s.labels.get("task") != "routing.run_job":
                continue
            if s.name == "routing_celery_task_queue_wait_seconds_sum":
                total += s.value
            elif s.name == "routing_celery_task_queue_wait_seconds_count":
                count += s.value
    return total, count


def start_batches(stack: Stack, n: int, lines: int) -> list[str]:
    body = "\n".join(
        json.dumps(
            {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/jobs",
                "body": {"model": "sol", "input_tokens": 2000 + i % 97, "output_tokens": 1000},
            }
        )
        for i in range(lines)
    ).encode()
    ids = []
    for _ in range(n):
        code, f = stack.upload(body)
        assert code == 201, f
        code, b = stack.call(
            "POST", "/api/v1/batches", {"input_file_id": f["id"], "completion_window": "24h"}
        )
        assert code == 202, b
        ids.append(b["id"])
    return ids


def active(stack: Stack, batch_ids: list[str]) -> int:
    done = ("completed", "failed", "expired", "cancelled")
    return sum(
        stack.call("GET", f"/api/v1/batches/{b}")[1]["status"] not in done for b in batch_ids
    )


def latencies(stack: Stack, n: int, batch_ids: list[str]) -> tuple[list[float], int]:
    """Start latency of `n` jobs one after the other; and how many were measured while
    a batch was still active."""
    out, during = [], 0
    for _ in range(n):
        busy = active(stack, batch_ids) if batch_ids else 0
        job = stack.submit(deadline_seconds=86400)
        t0 = time.perf_counter()
        while stack.job(job["id"])["status"] == "queued":
            time.sleep(0.01)
        out.append(time.perf_counter() - t0)
        during += busy > 0
        time.sleep(0.05)
    return out, during


def scenario(stack: Stack, name: str, args, batches: bool) -> tuple:
    w0 = run_job_wait(stack)
    ids = start_batches(stack, args.batches, args.lines) if batches else []
    if ids:
        time.sleep(1.0)  # the validations have started
    lat, during = latencies(stack, args.jobs, ids)
    w1 = run_job_wait(stack)
    queue_wait = (w1[0] - w0[0]) / max(1.0, w1[1] - w0[1])
    lat.sort()
    row = (
        name,
        "with batches" if batches else "idle",
        statistics.median(lat) * 1000,
        lat[int(0.95 * (len(lat) - 1))] * 1000,
        lat[-1] * 1000,
        queue_wait * 1000,
        f"{during}/{len(lat)}" if batches else "-",
    )
    print(
        f"  {row[0]:6} {row[1]:12} start p50 {row[2]:7.0f} ms  p95 {row[3]:7.0f} ms  "
        f"max {row[4]:7.0f} ms  run_job queue wait mean {row[5]:7.0f} ms  "
        f"(during batches: {row[6]})",
        flush=True,
    )
    if ids:  # let them finish so the next scenario starts idle
        deadline = time.monotonic() + args.timeout
        while active(stack, ids) and time.monotonic() < deadline:
            time.sleep(0.5)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=40)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--lines", type=int, default=10000)
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    rows = []
    with PostgresServer() as pg, RedisServer() as redis:
        for name in ("shared", "split"):
            stack = Stack(pg, redis, scale=1e6, web_workers=2, credits="1000000000")
            try:
                if name == "shared":
                    stack.start_worker(concurrency=2)  # all queues, as make run
                else:
                    for q in QUEUES:
                        stack.start_worker(concurrency=1, queues=q)
                stack.start_beat()
                print(f"{name}: {len(stack.workers)} worker process(es)", flush=True)
                rows.append(scenario(stack, name, args, batches=False))
                rows.append(scenario(stack, name, args, batches=True))
            finally:
                stack.close()
    print(
        f"\nInteractive job start latency, {args.jobs} jobs one by one; "
        f"batches: {args.batches} x {args.lines:,} lines"
    )
    print("| workers | batches | start p50 | p95 | max | run_job queue wait (mean) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]} | {r[2]:.0f} ms | {r[3]:.0f} ms | {r[4]:.0f} ms | {r[5]:.0f} ms |"
        )


if __name__ == "__main__":
    main()

"""Jobs per second end to end (POST /api/v1/jobs -> worker -> succeeded) on PostgreSQL
and Redis with 1, 2 and 4 worker processes, against Celery's own no-op task throughput
on the same broker and workers, in the same run.

Usage: .venv/bin/python bench/bench_jobs.py [--jobs 200] [--workers 1 2 4] [--runs 3]

Starts a throwaway PostgreSQL cluster and Redis server (tests/realparts.py), the web app
as deploy/run.sh does (gunicorn with uvicorn workers, 2 processes: the run waits until
both have started their application) and N worker processes (concurrency 1 each).
Simulated time is compressed (SIM_TIME_SCALE=1e6) so a job's simulated run ends at once:
the figure is the service's overhead per job (quote, reservation, one run task that
claims, books and settles), not the simulated hardware. Submissions come from 8 client
threads. Prints, per worker count, the median [min-max] of --runs runs of the no-op rate
and of jobs/s, and the ratio of the medians. Goal (issue 16): >= 0.2 of the no-op rate
with 2 workers. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realparts import PostgresServer, RedisServer, start_worker  # noqa: E402
from tests.stack import SMALL, Stack  # noqa: E402


def noop_rate(stack: Stack, workers: int, n: int) -> float:
    procs = [start_worker(stack.env, concurrency=1).wait_ready(60) for _ in range(workers)]
    try:
        r = stack.redis.client()
        # One connection for all sends: the baseline must not pay a connection per task.
        from celery import Celery

        app = Celery("bench", broker=stack.redis.url, set_as_current=False)
        app.conf.update(task_serializer="json", task_ignore_result=True)
        # An explicit connection: a CELERY_BROKER_URL in the environment would win otherwise.
        with (
            app.connection_for_write(url=stack.redis.url) as conn,
            app.producer_or_acquire(app.amqp.Producer(conn)) as producer,
        ):
            t0 = time.perf_counter()
            for _ in range(n):
                app.send_task("deploy.noop", producer=producer, queue="interactive")
        # Done when the queue is empty and every worker has logged its n-th success.
        while r.llen("interactive") > 0:  # deploy.noop's queue (CELERY_TASK_ROUTES)
            time.sleep(0.01)
        deadline = time.monotonic() + 120
        while sum(p.log_text().count("deploy.noop") for p in procs) < 2 * n:
            assert time.monotonic() < deadline, "no-op tasks did not finish"
            time.sleep(0.02)
        rate = n / (time.perf_counter() - t0)
        app.close()
        return rate
    finally:
        for p in procs:
            p.kill()


def succeeded(stack: Stack) -> int:
    import psycopg

    with psycopg.connect(stack.env["DATABASE_URL"]) as conn:
        return conn.execute(
            "SELECT count(*) FROM routing_job WHERE status = 'succeeded'"
        ).fetchone()[0]


def jobs_rate(stack: Stack, workers: int, n: int, clients: int = 8) -> float:
    procs = [start_worker(stack.env, concurrency=1).wait_ready(60) for _ in range(workers)]
    ids: list[str] = []
    lock = threading.Lock()
    done_before = succeeded(stack)
    try:
        t0 = time.perf_counter()

        def client(k: int):
            mine = [stack.submit(**SMALL)["id"] for _ in range(k)]
            with lock:
                ids.extend(mine)

        threads = [threading.Thread(target=client, args=(n // clients,)) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        submitted = time.perf_counter() - t0
        # One cheap query per poll, not a GET per job.
        deadline = time.monotonic() + 600
        while succeeded(stack) < done_before + len(ids):
            assert time.monotonic() < deadline, "jobs did not finish"
            time.sleep(0.05)
        total = time.perf_counter() - t0
        print(f"    submitted {len(ids)} in {submitted:.1f} s ({len(ids) / submitted:.0f}/s)")
        return len(ids) / total
    finally:
        for p in procs:
            p.kill()


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.1f} [{min(xs):,.1f}-{max(xs):,.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with PostgresServer() as pg, RedisServer() as redis:
        stack = Stack(pg, redis, scale=1e6, web_workers=2, credits="1000000")
        try:
            # The stack is ready when one web process is: wait for the second as well.
            deadline = time.monotonic() + 60
            while stack.web.log_text().count("Application startup complete") < 2:
                assert time.monotonic() < deadline, "the second web process did not start"
                time.sleep(0.1)
            print(
                f"{args.jobs} jobs per run, {args.runs} run(s); 2 web processes; "
                "PostgreSQL and Redis (throwaway, this machine)"
            )
            rows = []
            for w in args.workers:
                bases, rates = [], []
                for _ in range(args.runs):
                    bases.append(noop_rate(stack, w, args.jobs * 5))
                    rates.append(jobs_rate(stack, w, args.jobs))
                base, rate = statistics.median(bases), statistics.median(rates)
                print(
                    f"  {w} worker(s): Celery no-op {med(bases)} tasks/s, jobs end to end "
                    f"{med(rates)} jobs/s ({rate / base:.3f} of no-op)"
                )
                rows.append((w, base, rate))
            assert stack.ledger()["ok"]
            print("\nworkers  no-op tasks/s  jobs/s  ratio (medians; goal >= 0.2 with 2 workers)")
            for w, base, rate in rows:
                print(f"{w:>7}  {base:>13,.0f}  {rate:>6,.1f}  {rate / base:.3f}")
        finally:
            stack.close()


if __name__ == "__main__":
    main()

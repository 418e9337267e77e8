"""Per-job costs in process on PostgreSQL, and how they grow with the work in flight.

Usage: .venv/bin/python bench/bench_occupancy.py [--runs 5] [--sizes 0 1000 10000 100000]
       [--running 1 100 1000 10000] [--db postgres://postgres@127.0.0.1:5432/perf_bench]
       [--sql] [--quick]

Uses (and empties) the given PostgreSQL database; migrates it and loads the catalog.
Prints, each as median [min-max] of --runs runs:

- accept: `POST /api/v1/jobs` through Django's test client (in process, no network),
  with its statement count; the baseline in the same run is `GET /api/v1/ping`;
- worker: `job_run` when the simulated run has ended at the claim (claim, slot booking
  and settle in one task), and `job_run` + `job_finish` when it ends later (the finish
  message), with statement counts (--sql prints each statement);
- `job_run` against N jobs running on the job's pool (N = --running), each holding a
  share such that the pool is not full (0.9 / N): the claim books a slot at once;
- `own_occupancy` (the pool loads a quote reads) against N active (queued) jobs.

Not a test: nothing is asserted. Each measured claim runs in a transaction rolled back
afterwards, so every run sees the same rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.2f} ms [{min(xs):.2f}-{max(xs):.2f}]"


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


class Rollback(Exception):
    pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 1000, 10_000, 100_000])
    ap.add_argument("--running", type=int, nargs="+", default=[1, 100, 1000, 10_000])
    ap.add_argument("--db", default="postgres://postgres@127.0.0.1:5432/perf_bench")
    ap.add_argument("--sql", action="store_true", help="print each statement of one step")
    ap.add_argument("--quick", action="store_true", help="the per-job figures only")
    args = ap.parse_args()

    import psycopg

    base, _, name = args.db.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = args.db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
    os.environ.setdefault("SIM_TIME_SCALE", "1000000")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    settings.ALLOWED_HOSTS = ["*"]
    settings.API_THROTTLE_RATES = dict.fromkeys(settings.API_THROTTLE_RATES)
    call_command("migrate", verbosity=0)
    from catalog.loader import catalog_load

    catalog_load()
    from routing.accounts.accounts import account_create
    from routing.core import dispatch
    from routing.jobs import worker
    from routing.models import Job
    from routing.router import snapshot
    from tests.helpers import ApiClient
    from tests.stack import SMALL

    dispatch.send_now = lambda *a, **k: True  # no broker: measure the database work
    account, key = account_create(name="bench", default_credits=Decimal("100000000"))
    api = ApiClient(key)
    body = SMALL | {"deadline_seconds": 600}

    def accept():
        r = api.post_json("/api/v1/jobs", body)
        assert r.status_code == 202, r.content
        return r.json()["id"]

    def ping():
        assert api.get("/api/v1/ping").status_code == 200

    for _ in range(3):  # warm caches and connections
        accept()
        ping()
    with CaptureQueriesContext(connection) as q:
        jid = accept()
    accept_n = len(q)
    show(args.sql, "accept", q)
    ids = []
    acc = []
    for _ in range(args.runs * 4):
        t0 = time.perf_counter()
        ids.append(accept())
        acc.append((time.perf_counter() - t0) * 1000)
    pings = timed(ping, args.runs * 4)
    print("in process, PostgreSQL (no broker, no network)")
    print(f"  POST /api/v1/jobs  {fmt(acc)}  {accept_n} statements")
    print(f"  GET /api/v1/ping   {fmt(pings)}  (baseline, same run)")

    # The worker, two ways. One task: the simulated run has ended when the claim writes
    # (SIM_TIME_SCALE large, as here): job_run claims, books and settles in one
    # transaction. Two tasks: the run ends later (SIM_TIME_SCALE 1 while claiming):
    # job_run claims and books, a countdown message's job_finish settles.
    later = timezone.now() + dt_seconds(3600)
    scale = settings.SIM_TIME_SCALE
    two = [accept() for _ in range(args.runs * 4 + 1)]
    worker.tier_slug(Job.objects.get(pk=jid).tier_id)  # once a process: warm it
    with CaptureQueriesContext(connection) as q:
        worker.job_run(jid)
    one_n = len(q)
    show(args.sql, "job_run, run ended at the claim (one task)", q)
    settings.SIM_TIME_SCALE = 1.0
    with CaptureQueriesContext(connection) as q:
        worker.job_run(two[0])
    run_n = len(q)
    show(args.sql, "job_run, run ends later", q)
    settings.SIM_TIME_SCALE = scale
    with CaptureQueriesContext(connection) as q:
        worker.job_finish(two[0], at=later)
    fin_n = len(q)
    show(args.sql, "job_finish", q)
    ones, runs, fins = [], [], []
    for i in ids:
        t0 = time.perf_counter()
        job = worker.job_run(i)
        ones.append((time.perf_counter() - t0) * 1000)
        assert job.status == Job.Status.SUCCEEDED, job.status
    settings.SIM_TIME_SCALE = 1.0
    for i in two[1:]:
        t0 = time.perf_counter()
        job = worker.job_run(i)
        runs.append((time.perf_counter() - t0) * 1000)
        assert job.status == Job.Status.RUNNING, job.status
    settings.SIM_TIME_SCALE = scale
    for i in two[1:]:
        t0 = time.perf_counter()
        assert worker.job_finish(i, at=later) is not None
        fins.append((time.perf_counter() - t0) * 1000)
    print(f"  job_run, one task  {fmt(ones)}  {one_n} statements (claim, book, settle)")
    print(f"  job_run            {fmt(runs)}  {run_n} statements (claim, book; run ends later)")
    print(f"  job_finish         {fmt(fins)}  {fin_n} statements")
    print(
        f"  worker in all      {statistics.median(ones):7.2f} ms one task, "
        f"{statistics.median(runs) + statistics.median(fins):7.2f} ms two (medians summed; "
        f"goal <= 6 ms)"
    )

    if args.quick:
        return
    template = Job.objects.get(pk=jid)
    pool_id = template.pool_id

    def clone(n: int, status: str, share: float, pool=None):
        now = timezone.now()
        rows = []
        for _ in range(n):
            j = Job(**{f.attname: getattr(template, f.attname) for f in Job._meta.concrete_fields})
            j.id = uuid.uuid4()
            j.reservation_id = None
            j.idempotency_key = None
            j.status = status
            j.slot_share = share
            j.cost = None
            j.finished_at = None
            if pool is not None:
                j.pool_id = pool
            if status == Job.Status.RUNNING:
                j.started_at = now
                j.finishes_at = now + dt_seconds(86400)
            rows.append(j)
        for k in range(0, n, 5000):
            Job.objects.bulk_create(rows[k : k + 5000])

    def delete_active():
        Job.objects.filter(status__in=Job.ACTIVE).delete()

    print("\njob_run (claim + slot booking) vs jobs running on the pool (pool not full)")
    for n in args.running:
        delete_active()
        clone(n, Job.Status.RUNNING, 0.9 / n)
        target = accept()
        call_command_analyze(connection)
        out = []
        for _ in range(args.runs):
            try:
                with transaction.atomic():
                    t0 = time.perf_counter()
                    worker.job_claim(target, at=timezone.now())
                    out.append((time.perf_counter() - t0) * 1000)
                    raise Rollback
            except Rollback:
                pass
        print(f"  {n:>6} running  {fmt(out)}")

    pools = sorted({d for d in Job.objects.values_list("pool_id", flat=True)} | {pool_id})
    from catalog.models import HardwarePool

    all_pools = list(HardwarePool.objects.values_list("pk", flat=True))
    print("\nown_occupancy (pool loads of a quote) vs active jobs")
    for n in args.sizes:
        delete_active()
        per = max(1, n // len(all_pools)) if n else 0
        for p in all_pools:
            if per:
                clone(per, Job.Status.QUEUED, 0.001, pool=p)
        call_command_analyze(connection)
        out = timed(lambda: snapshot.own_occupancy(timezone.now()), args.runs)
        print(f"  {per * len(all_pools):>7} active  {fmt(out)}")
    del pools


def show(on: bool, what: str, captured) -> None:
    if not on:
        return
    print(f"-- {what}: {len(captured)} statements")
    for i, row in enumerate(captured.captured_queries, 1):
        print(f"  {i:>2}. {row['sql'][:400]}")


def dt_seconds(s: float):
    import datetime as dt

    return dt.timedelta(seconds=s)


def call_command_analyze(connection) -> None:
    with connection.cursor() as cur:
        cur.execute("ANALYZE")


if __name__ == "__main__":
    main()

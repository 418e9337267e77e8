"""Statements per job and hot rows: the SQL one small job costs PostgreSQL, step by
step (accept over HTTP in process, the worker's run, the finish), counted with Django's
CaptureQueriesContext, and which rows every job of an account or a pool writes or
locks (the rows that serialize jobs: the first bottleneck as load grows).

Usage: .venv/bin/python bench/bench_statements.py [--jobs 200]
       [--database-url postgres://postgres@127.0.0.1:5432/postgres]

A fresh database (bench_statements_<pid>, dropped at the end) on --database-url's
server (default: $BENCH_DATABASE_URL or $DATABASE_URL; without either, a throwaway
cluster, tests/realparts.py). One account, one model (sol, Standard). Each job is
accepted through the Django test client (POST /api/v1/jobs: authentication, quote,
reservation, job row), then run (job_run: claim, simulate, book a slot of its pool)
and finished (job_finish: settle) in this process, as a worker would. Prints, per
step: statements (all / writes / row locks), the tables locked or updated, and the
median wall time of the step in this one process (an upper bound of steps/s per core
with the database on the same machine). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realparts import PostgresServer, owned_tempdir  # noqa: E402
from tests.stack import SMALL  # noqa: E402

JOB = SMALL  # the tests' short flagship job
TABLE = re.compile(r'(?:FROM|UPDATE|INTO)\s+"(\w+)"', re.I)


def setup_django(database_url: str) -> None:
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="deploy.settings",
        VAR_DIR=str(owned_tempdir("bench-var")),
        CELERY_BROKER_URL="memory://",
        CELERY_TASK_ALWAYS_EAGER="0",
        API_THROTTLE_RATE="off",
        SIM_TIME_SCALE="1e6",
        LOG_LEVEL="WARNING",
        CACHE_URL="locmem://",
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    call_command("loadcatalog", verbosity=0, stdout=io.StringIO())


def classify(sql: str) -> tuple[str, str]:
    s = sql.lstrip().upper()
    first = TABLE.search(sql)
    table = first.group(1) if first else "?"
    if "FOR UPDATE" in s or "FOR NO KEY UPDATE" in s:
        return "lock", table
    if s.startswith(("UPDATE", "INSERT", "DELETE")):
        return s.split()[0].lower(), table
    if s.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT")):
        return "tx", ""
    return "select", table


def run(jobs: int) -> dict:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from routing.jobs import worker

    out = io.StringIO()
    from django.core.management import call_command

    call_command("create_account", "bench", "--json", "--credits", "1000000000", stdout=out)
    key = json.loads(out.getvalue())["api_key"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    steps = {name: {"n": [], "t": [], "kinds": Counter(), "hot": Counter()} for name in
             ("accept", "run", "finish")}  # fmt: skip

    def measure(name, fn, *args, **kwargs):
        with CaptureQueriesContext(connection) as ctx:
            t0 = time.perf_counter()
            value = fn(*args, **kwargs)
            steps[name]["t"].append(time.perf_counter() - t0)
        steps[name]["n"].append(len(ctx.captured_queries))
        for q in ctx.captured_queries:
            kind, table = classify(q["sql"])
            steps[name]["kinds"][kind] += 1
            if kind in ("lock", "update"):
                steps[name]["hot"][f"{kind} {table}"] += 1
        return value

    for _ in range(jobs):
        resp = measure("accept", client.post, "/api/v1/jobs", JOB, content_type="application/json")
        assert resp.status_code == 202, resp.content
        job_id = resp.json()["id"]
        job = measure("run", worker.job_run, job_id)
        assert job is not None
        if job.status == "running":  # its run ends later: the finish message's work
            at = max(timezone.now(), job.finishes_at)
            assert measure("finish", worker.job_finish, job_id, at=at) is not None
    return steps


def report(steps: dict, jobs: int, where: str) -> None:
    print(f"statements per job on {where}, {jobs} jobs (one account, sol Standard)")
    print("(2-core machine shared with other work: times are noisy upper bounds)\n")
    total_n = total_t = 0.0
    for name, s in steps.items():
        if not s["n"]:
            print(f"  {name:<7} not needed (every job settled in its run)")
            continue
        n = statistics.median(s["n"])
        t = statistics.median(s["t"]) * 1000
        total_n += n
        total_t += t
        kinds = ", ".join(f"{k} {v / jobs:g}" for k, v in sorted(s["kinds"].items()))
        hot = ", ".join(f"{k} x{v / jobs:g}" for k, v in sorted(s["hot"].items()))
        print(f"  {name:<7} {n:>4g} statements  {t:6.1f} ms median  ({kinds})")
        print(f"          rows locked/updated per job: {hot or '-'}")
    print(f"  {'total':<7} {total_n:>4g} statements  {total_t:6.1f} ms median per job")
    print(f"  => one process, one core: ~{1000 / total_t:,.0f} jobs/s through all three steps")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL"),
    )
    args = ap.parse_args()
    import psycopg
    from psycopg import sql

    db = f"bench_statements_{os.getpid()}"
    pg = None
    if args.database_url and args.database_url.startswith("postgres"):
        server = args.database_url.rsplit("/", 1)[0]
        where = f"PostgreSQL at {server.rsplit('@', 1)[-1]}"
    else:
        pg = PostgresServer()
        server = pg.url("").rstrip("/")
        where = "a throwaway PostgreSQL cluster"
    try:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        try:
            setup_django(f"{server}/{db}")
            steps = run(args.jobs)
            from django.db import connections

            connections.close_all()
        finally:
            with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db))
                )
        report(steps, args.jobs, where)
    finally:
        if pg is not None:
            pg.cleanup()


if __name__ == "__main__":
    main()

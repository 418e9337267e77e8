"""Batches: (a) validating and planning a 50,000-line file in process, against a bare
json.loads of the same lines; (b) requests per second of a batch run by the workers end
to end (upload, create, wait until completed), against jobs submitted one by one and
Celery's no-op throughput on the same broker and workers.

Usage: .venv/bin/python bench/bench_batches.py [--validate-lines 50000] [--lines 10000]
       [--shapes 24] [--workers 2] [--load 0.98] [--scale 1e4] [--window 7d]
       [--jobs 200] [--skip-validate] [--skip-workers] [--profile]
       [--database-url postgres://postgres@127.0.0.1:5432/postgres]

(a) In this process, on PostgreSQL: a fresh database (bench_batches_<pid>, dropped at
    the end) on the server of --database-url (default: $BENCH_DATABASE_URL or
    $DATABASE_URL; without either, a throwaway cluster, tests/realparts.py). Times
    file_create, batch_create and batch_validate of a file of --validate-lines lines
    (three models, --shapes distinct task shapes), the latter broken down into parse
    (reading and checking the lines), row insert (COPY on PostgreSQL) and plan (the shape
    query and the planner), then batch_start (plan again, reserve, give the requests
    their tiers; done by batch_validate itself when the start has come). Baseline:
    json.loads of the same lines (ratio = batch_validate time / bare parse time).
(b) Throwaway PostgreSQL and Redis, gunicorn and N worker processes (concurrency 1,
    tests/stack.py). SIM_TIME_SCALE=--scale (1e4) so simulated time is not the
    bottleneck; the window is simulated too, so it must still outlast validation in wall
    time (7d at 1e4 = 60 s; 24h at 1e6 = 86 ms, the batch would expire). --load of
    h200-main taken by outside traffic (PoolLoad) so the batch runs in waves on the
    streams left. POST /api/v1/files (multipart), POST /api/v1/batches, polls GET
    /api/v1/batches/{id} until it ends; requests/s of wall time, the chain links (tasks
    run, from the workers' logs). Baselines: Celery no-op tasks/s and jobs/s end to end
    (bench/bench_jobs.py's measures, same stack, same workers).

The default run takes 2-3 minutes on 2 cores. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import re
import sys
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realparts import PostgresServer, RedisServer, owned_tempdir, run_manage  # noqa: E402

MODELS = ("sol", "terra", "luna")


def batch_lines(n: int, shapes: int, seed: int = 7) -> list[bytes]:
    """n request lines over `shapes` distinct (model, tokens, turns) shapes."""
    rng = random.Random(seed)
    kinds = [
        {
            "model": MODELS[k % len(MODELS)],
            "input_tokens": rng.choice((500, 2000, 8000, 20000)),
            "output_tokens": rng.choice((200, 1000, 4000)),
            "turns": rng.choice((1, 1, 2, 4)),
            "tool_seconds": rng.choice((0, 0, 5)),
        }
        for k in range(shapes)
    ]
    return [
        json.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/jobs",
                "body": kinds[i % shapes] | {"prompt": f"task {i}"},
            }
        ).encode()
        for i in range(n)
    ]


# --- (a) in process ----------------------------------------------------------------------


class Timer:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            with self(name):
                return fn(*args, **kwargs)

        return timed


def setup_django(database_url: str, var_dir: Path) -> None:
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="deploy.settings",
        VAR_DIR=str(var_dir),
        CELERY_BROKER_URL="memory://",  # the tasks batch_create sends go nowhere
        LOG_LEVEL="WARNING",
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    call_command("loadcatalog", verbosity=0, stdout=io.StringIO())


def validate_bench(n: int, shapes: int, profile: bool) -> dict:
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from routing.accounts.accounts import account_create
    from routing.batches import service as batches
    from routing.batches.files import file_create
    from routing.models import Batch

    account, _ = account_create(name=f"bench-{uuid.uuid4().hex[:8]}", default_credits=Decimal(1e9))
    raw = batch_lines(n, shapes)
    data = b"\n".join(raw) + b"\n"
    path = Path(os.environ["VAR_DIR"]) / "bench-input.jsonl"
    path.write_bytes(data)

    # Baseline: the bare parse of the same lines.
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        for line in fh:
            json.loads(line)
    bare = time.perf_counter() - t0

    t = Timer()
    # The parts of batch_validate, timed where it calls them.
    batches.parse_file = t.wrap("  parse (read, check lines)", batches.parse_file)
    batches._groups = t.wrap("  plan: shape query", batches._groups)
    batches.plan_batch = t.wrap("  plan: planner", batches.plan_batch)
    batches.insert_requests = t.wrap("  row insert (COPY on PostgreSQL)", batches.insert_requests)

    with t("file_create (measure, hash, store)"):
        with path.open("rb") as fh:
            f = file_create(account=account, purpose="batch", upload=fh)
    at = timezone.now()
    start = at + dt.timedelta(hours=1)  # so batch_validate does not start it: timed apart
    with t("batch_create"):
        batch = batches.batch_create(
            account=account, input_file_id=f.id, completion_window="24h", start_at=start, at=at
        )
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    with t("batch_validate"):
        batch = batches.batch_validate(batch.pk, at=at)
    if prof:
        prof.disable()
    assert batch.status == Batch.Status.VALIDATING and batch.validated_at, batch.errors
    planner_s = t.seconds.pop("  plan: planner", 0.0)
    plan_s = t.seconds.pop("  plan: shape query", 0.0) + planner_s
    groups = len(batch.plan["assignments"])
    with t("batch_start (replan, reserve, assign tiers)"):
        started = batches.batch_start(batch.pk, at=start)
    assert started is not None and started.status == Batch.Status.IN_PROGRESS, started
    return {
        "n": n,
        "bare": bare,
        "times": t.seconds,
        "plan": plan_s,
        "planner": planner_s,
        "lanes": batch.plan["lanes"],
        "groups": groups,
        "profile": prof,
    }


def report_validate(r: dict, db: str) -> None:
    n, times = r["n"], dict(r["times"])
    validate = times["batch_validate"]
    parse = times.pop("  parse (read, check lines)", 0.0)
    insert = times.pop("  row insert (COPY on PostgreSQL)", 0.0)
    other = validate - parse - insert - r["plan"]
    print(f"(a) validate and plan {n:,} lines in process ({db})")
    rows = [
        ("file_create (measure, hash, store)", times["file_create (measure, hash, store)"]),
        ("batch_create", times["batch_create"]),
        ("batch_validate", validate),
        ("  parse (read, check lines)", parse),
        ("  row insert (COPY on PostgreSQL)", insert),
        (f"  plan ({r['groups']} shape groups; planner {r['planner'] * 1000:.0f} ms)", r["plan"]),
        ("  other (lock, save, commit)", other),
        ("batch_start (replan, reserve, assign tiers)", times["batch_start (replan, reserve, assign tiers)"]),
        ("baseline: json.loads of the same lines", r["bare"]),
    ]  # fmt: skip
    print(f"  {'step':<46} {'seconds':>8} {'lines/s':>10}")
    for name, s in rows:
        print(f"  {name:<46} {s:>8.3f} {n / s if s else 0:>10,.0f}")
    upload_to_plan = sum(times[k] for k in ("file_create (measure, hash, store)", "batch_create"))
    upload_to_plan += validate
    print(
        f"  upload to plan (file_create + batch_create + batch_validate): {upload_to_plan:.2f} s, "
        f"{n / upload_to_plan:,.0f} lines/s"
    )
    print(
        f"  ratio batch_validate / bare json.loads: {validate / r['bare']:.1f}x "
        f"(parse alone {parse / r['bare']:.1f}x)"
    )
    for lane in r["lanes"]:
        print(
            f"  plan lane {lane['key']:<22} {lane['streams']:>7,} streams {lane['requests']:>7,} "
            f"requests ({lane['streams'] * lane['stream_share']:.1%} of {lane['pool']})  "
            f"makespan {lane['makespan_seconds']:.1f} s  cost {lane['cost']}"
        )
    if r["profile"]:
        s = io.StringIO()
        pstats.Stats(r["profile"], stream=s).sort_stats("cumulative").print_stats(25)
        print(s.getvalue())


# --- (b) through the workers -------------------------------------------------------------


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = f"----bench{uuid.uuid4().hex}"
    out = io.BytesIO()
    for name, value in fields.items():
        out.write(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
            f"{value}\r\n".encode()
        )
    for name, (filename, content) in files.items():
        out.write(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/jsonl\r\n\r\n'.encode()
        )
        out.write(content)
        out.write(b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


def upload(stack, filename: str, content: bytes) -> dict:
    body, ctype = multipart({"purpose": "batch"}, {"file": (filename, content)})
    req = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}/api/v1/files",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {stack.key}", "Content-Type": ctype},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"upload refused: {e.code} {e.read()[:500]!r}") from None


_SUCCEEDED = re.compile(r"Task routing\.(\w+)\[[^\]]+\] succeeded in ([0-9.e-]+)s")


def links(procs) -> dict[str, list[float]]:
    """Run time of each batch task the workers ran, from their logs."""
    out: dict[str, list[float]] = {"validate_batch": [], "advance_batch": [], "finalize_batch": []}
    for p in procs:
        for name, seconds in _SUCCEEDED.findall(p.log_text()):
            if name in out:
                out[name].append(float(seconds))
    return out


def workers_bench(
    stack, n_lines: int, shapes: int, workers: int, window: str, timeout: float
) -> dict:
    from tests.realparts import start_worker

    procs = [start_worker(stack.env, concurrency=1).wait_ready(60) for _ in range(workers)]
    try:
        content = b"\n".join(batch_lines(n_lines, shapes, seed=11)) + b"\n"
        t0 = time.perf_counter()
        f = upload(stack, "bench.jsonl", content)
        t_upload = time.perf_counter() - t0
        code, b = stack.call(
            "POST", "/api/v1/batches", {"input_file_id": f["id"], "completion_window": window}
        )
        assert code == 202, b
        t_create = time.perf_counter() - t0
        seen: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while True:
            b = stack.call("GET", f"/api/v1/batches/{b['id']}")[1]
            seen.setdefault(b["status"], time.perf_counter() - t0)
            if b["status"] in ("completed", "failed", "expired", "cancelled"):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"batch not done after {timeout:.0f} s: {b['request_counts']}")
            time.sleep(0.05)
        total = time.perf_counter() - t0
        time.sleep(0.5)  # the last 'succeeded' lines reach the logs
        return {
            "batch": b,
            "upload": t_upload,
            "create": t_create - t_upload,
            "seen": seen,
            "total": total,
            "links": links(procs),
        }
    finally:
        for p in procs:
            p.kill()


def report_workers(r: dict, args, noop: float, jobs: float) -> float:
    b = r["batch"]
    counts = b["request_counts"]
    lane = ", ".join(
        f"{x['tier']} {x['streams']} streams" for x in (b.get("plan") or {}).get("lanes", [])
    )
    rate = counts["completed"] / r["total"]
    lk = {k: len(v) for k, v in r["links"].items()}
    busy = {k: sum(v) for k, v in r["links"].items()}
    wall_window = b["window_seconds"] / args.scale
    print(
        f"(b) {args.lines:,}-line batch through {args.workers} worker(s); "
        f"SIM_TIME_SCALE={args.scale:g} (window {args.window} = {wall_window:.0f} s wall), "
        f"h200-main {args.load:.0%} busy with outside traffic"
    )
    print(
        f"  status {b['status']}: {counts['completed']:,} completed, {counts['failed']:,} failed; "
        f"plan: {lane}"
    )
    print(
        f"  upload {r['upload']:.2f} s, create {r['create'] * 1000:.0f} ms; reached "
        + ", ".join(f"{s} at {t:.2f} s" for s, t in r["seen"].items())
    )
    print(
        f"  chain links: {lk['advance_batch']} advance, {lk['validate_batch']} validate, "
        f"{lk['finalize_batch']} finalize; {r['total']:.2f} s wall in all"
    )
    print(
        f"  time in tasks: validate {busy['validate_batch']:.2f} s, advance "
        f"{busy['advance_batch']:.2f} s (longest link {max(r['links']['advance_batch'] or [0]):.2f} s), "
        f"finalize {busy['finalize_batch']:.2f} s; idle between links "
        f"{r['total'] - sum(busy.values()):.2f} s"
    )
    print(f"  batch: {rate:,.0f} requests/s of wall time (upload to completed)")
    print(f"  baseline: jobs one by one {jobs:,.1f} jobs/s; Celery no-op {noop:,.0f} tasks/s")
    print(
        f"  ratio batch requests/s / jobs/s: {rate / jobs:.1f}x; / no-op tasks/s: {rate / noop:.2f}"
    )
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--validate-lines", type=int, default=50_000)
    ap.add_argument("--lines", type=int, default=10_000, help="Lines of the batch in (b).")
    ap.add_argument("--shapes", type=int, default=24, help="Distinct task shapes in a file.")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--load", type=float, default=0.98, help="Outside load on h200-main.")
    ap.add_argument("--jobs", type=int, default=200, help="Jobs of the jobs/s baseline.")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--scale",
        type=float,
        default=1e4,
        help="SIM_TIME_SCALE of (b): high, but the window (simulated) must outlast validation.",
    )
    ap.add_argument("--window", default="7d", help="Completion window of the batch in (b).")
    ap.add_argument("--skip-validate", action="store_true")
    ap.add_argument("--skip-workers", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile batch_validate in (a).")
    ap.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL"),
        help="A PostgreSQL server for (a) (a fresh database is made on it).",
    )
    args = ap.parse_args()
    summary = []
    with PostgresServer() as pg, RedisServer() as redis:
        if not args.skip_validate:
            summary += run_validate(args, pg)
        if not args.skip_workers:
            summary += run_workers(args, pg, redis)
    print("\nsummary")
    print(f"  {'measure':<52} {'value':>14}  baseline / ratio")
    for name, value, base in summary:
        print(f"  {name:<52} {value:>14}  {base}")


def run_validate(args, pg) -> list:
    import psycopg
    from psycopg import sql

    db = f"bench_batches_{os.getpid()}"
    if args.database_url:
        server = args.database_url.rsplit("/", 1)[0]
        where = f"PostgreSQL at {server.rsplit('@', 1)[-1]}"
    else:
        server = pg.url("").rstrip("/")
        where = "throwaway PostgreSQL cluster"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    try:
        setup_django(f"{server}/{db}", owned_tempdir("bench-var"))
        r = validate_bench(args.validate_lines, args.shapes, args.profile)
        from django.db import connections

        connections.close_all()
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db))
            )
    report_validate(r, where)
    n, times = r["n"], r["times"]
    validate = times["batch_validate"]
    upload_to_plan = validate + times["batch_create"] + times["file_create (measure, hash, store)"]
    start = times["batch_start (replan, reserve, assign tiers)"]
    return [
        (
            f"(a) batch_validate, {n:,} lines",
            f"{n / validate:,.0f} lines/s",
            f"json.loads {n / r['bare']:,.0f} lines/s: {validate / r['bare']:.0f}x the time",
        ),
        (
            "(a) file_create + batch_create + batch_validate",
            f"{n / upload_to_plan:,.0f} lines/s",
            "",
        ),
        ("(a) batch_start (reserve, assign tiers)", f"{n / start:,.0f} lines/s", ""),
    ]


def run_workers(args, pg, redis) -> list:
    from bench.bench_jobs import jobs_rate, noop_rate
    from tests.stack import Stack

    stack = Stack(pg, redis, scale=args.scale, web_workers=2, credits="1000000000")
    try:
        run_manage(
            stack.env,
            "shell",
            "-c",
            "from catalog.models import HardwarePool; from routing.models import PoolLoad; "
            "PoolLoad.objects.update_or_create(pool=HardwarePool.objects.get(slug='h200-main'), "
            f"defaults={{'background_utilisation': {args.load}}})",
        )
        r = workers_bench(stack, args.lines, args.shapes, args.workers, args.window, args.timeout)
        # The baselines first, on idle pools; then the batch, in waves on a busy pool.
        print(f"(b) baselines: Celery no-op and {args.jobs} jobs one by one")
        noop = noop_rate(stack, args.workers, 1000)
        jobs = jobs_rate(stack, args.workers, args.jobs)
        rate = report_workers(r, args, noop, jobs)
        ok = stack.ledger()["ok"]
        print(f"  ledger check: {'ok' if ok else 'MISMATCH'}")
    finally:
        stack.close()
    advance = r["links"]["advance_batch"]
    return [
        (
            f"(b) batch of {args.lines:,} through {args.workers} worker(s)",
            f"{rate:,.0f} req/s",
            f"jobs one by one {jobs:,.1f}/s: {rate / jobs:.0f}x",
        ),
        (
            "(b) advance links (chain)",
            f"{len(advance)} links",
            f"{sum(advance):.1f} s in them, longest {max(advance or [0]):.1f} s",
        ),
        ("(b) Celery no-op, same workers", f"{noop:,.0f} tasks/s", ""),
    ]


if __name__ == "__main__":
    main()

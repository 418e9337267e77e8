"""Quote and job-accept latency, before and after: the same requests against trees of
this repository (e.g. the commit before issue 27's keys and the current one), rounds
interleaved in one session on one machine, each tree on its own PostgreSQL database.

Usage: .venv/bin/python bench/bench_accept.py [--baseline 8745d81 [main ...]] [--after HEAD]
       [--rounds 5] [--n 200] [--http-n 200]
       [--database-url postgres://postgres@127.0.0.1:5432/postgres]

--baseline (one or more) and --after are git revisions, each checked out in a temporary worktree
(removed at the end; without --after: this working tree, which must not change while
the bench runs); without --baseline only one tree is measured. Each round visits the
trees in turn, in reverse order every other round. Every tree runs on this checkout's
virtualenv. Each round, for each tree, one child process:
- in process (Django's test client, the whole middleware stack, as profile_quote.py):
  `POST /api/v1/quotes` (the GDP-Val-shaped flagship quote of the README) and
  `POST /api/v1/jobs` (tests.stack.SMALL, Standard), --n of each after a warm-up,
  then the worker's share: `job_run` of each job accepted (its simulated run has ended
  at the claim, so claim, slot booking and settlement are one task);
- over HTTP: the tree's web server as deployed (gunicorn, one uvicorn worker, ASGI;
  tests.realparts.web_argv), one client on a persistent connection, --http-n of each;
and every accepted job is then run and finished in the child (untimed), as a worker
would, so the pool and the package stay as they were. Prints each round's medians, then
per tree and measurement the median [min-max] over rounds of the per-round medians, and
the statements each request (and a job's run) takes (median of 21; BEGIN and COMMIT
count). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

from bench_quotes_http import QUOTE_BODY as QUOTE  # noqa: E402

from tests.stack import SMALL as JOB  # noqa: E402  (the tests' short flagship job)

MEASURES = (
    "quote in process",
    "job accept in process",
    "job run in process",
    "quote HTTP",
    "job accept HTTP",
)


def settings_env(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "deploy.settings",
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1,testserver",
        "SECRET_KEY": "bench-only-" + "x" * 50,
        "SECURE_SSL_REDIRECT": "0",
        "LOG_LEVEL": "WARNING",
        "API_THROTTLE_RATE": "100000000/min",
        "CELERY_BROKER_URL": "memory://",
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "SIM_TIME_SCALE": "1e6",
        "CACHE_URL": "locmem://",
    }


# ---------------------------------------------------------------- child (one tree, one round)


def child(tree: Path, database_url: str, key: str, n: int, http_n: int) -> None:
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    os.environ.update(settings_env(database_url))
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from routing.jobs import worker

    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    quote_body, job_body = json.dumps(QUOTE), json.dumps(JOB)
    accepted: list[int] = []

    def quote():
        r = client.post("/api/v1/quotes", quote_body, content_type="application/json")
        assert r.status_code == 200, r.content

    def accept():
        r = client.post("/api/v1/jobs", job_body, content_type="application/json")
        assert r.status_code == 202, r.content
        accepted.append(r.json()["id"])

    def settle():
        for job_id in accepted:
            job = worker.job_run(job_id)
            if job is not None:
                worker.job_finish(job_id, at=max(timezone.now(), job.finishes_at))
        accepted.clear()

    def timed(fn, count: int) -> float:
        lat = []
        for _ in range(count):
            t0 = time.perf_counter()
            fn()
            lat.append(time.perf_counter() - t0)
        return statistics.median(lat) * 1000

    for _ in range(30):  # warm caches (catalog snapshot, key memo, router)
        quote()
        accept()
    settle()
    out = {"quote in process": timed(quote, n)}
    out["job accept in process"] = timed(accept, n)
    # The worker's share: job_run on each job just accepted (its simulated run has
    # ended at the claim: claim, slot booking and settlement in one task).
    runs, jobs = [], list(accepted)
    for job_id in jobs:
        t0 = time.perf_counter()
        done = worker.job_run(job_id)
        runs.append(time.perf_counter() - t0)
        assert done is not None
    out["job run in process"] = statistics.median(runs) * 1000
    settle()
    for name, fn in (("quote statements", quote), ("job accept statements", accept)):
        counts = []
        for _ in range(21):  # the median: a once-a-minute write (last_used_at) aside
            with CaptureQueriesContext(connection) as ctx:
                fn()
            counts.append(len(ctx.captured_queries))
        out[name] = statistics.median(counts)
    counts = []
    for job_id in accepted[-21:]:
        with CaptureQueriesContext(connection) as ctx:
            worker.job_run(job_id)
        counts.append(len(ctx.captured_queries))
    out["job run statements"] = statistics.median(counts)
    settle()
    connection.close()

    sys.path.insert(0, str(ROOT))
    from tests.realparts import web_argv

    port = _free_port()
    server = subprocess.Popen(
        [*web_argv("127.0.0.1", port, workers=1), "--log-level", "warning"],
        cwd=tree,
        env=dict(os.environ),
        start_new_session=True,
    )
    try:
        conn = _wait_up(port)
        hdr = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

        def post(path: str, body: str, status: int):
            conn.request("POST", path, body=body, headers=hdr)
            r = conn.getresponse()
            data = r.read()
            assert r.status == status, data
            return data

        def http_quote():
            post("/api/v1/quotes", quote_body, 200)

        def http_accept():
            accepted.append(json.loads(post("/api/v1/jobs", job_body, 202))["id"])

        for _ in range(30):
            http_quote()
            http_accept()
        settle()
        out["quote HTTP"] = timed(http_quote, http_n)
        out["job accept HTTP"] = timed(http_accept, http_n)
        settle()
        conn.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
    print(json.dumps(out))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_up(port: int) -> http.client.HTTPConnection:
    for _ in range(300):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/api/v1/ping")
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return c
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("web server did not start")


# ---------------------------------------------------------------- parent


def prepare(tree: Path, database_url: str) -> str:
    """A fresh database for the tree, migrated, the catalog loaded, one account: its key."""
    import psycopg

    name = database_url.rsplit("/", 1)[1]
    admin = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = dict(os.environ, **settings_env(database_url))

    def manage(*args: str) -> str:
        out = subprocess.run(
            [PY, "manage.py", *args], cwd=tree, env=env, capture_output=True, text=True
        )
        if out.returncode:
            sys.exit(out.stderr)
        return out.stdout

    manage("migrate", "--noinput")
    manage("loadcatalog")
    manage("collectstatic", "--noinput")
    out = manage("create_account", "bench", "--json", "--credits", "1000000000")
    return json.loads(out)["api_key"]


def drop(database_url: str) -> None:
    import psycopg

    name = database_url.rsplit("/", 1)[1]
    admin = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--baseline",
        nargs="*",
        default=[],
        help="git revisions to compare with (temporary worktrees), oldest first",
    )
    ap.add_argument("--after", help="git revision measured as 'after' (default: this tree)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=200, help="requests of each kind in process")
    ap.add_argument("--http-n", type=int, default=200, help="requests of each kind over HTTP")
    ap.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="server to make the bench databases on (the name is replaced)",
    )
    ap.add_argument(
        "--child", nargs=3, metavar=("TREE", "DATABASE_URL", "KEY"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], args.child[2], args.n, args.http_n)
        return

    server = args.database_url.rsplit("/", 1)[0]
    trees: dict[str, Path] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-accept-"))
    made: list[Path] = []

    def checkout(rev: str, name: str) -> Path:
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tmp / name), rev],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        made.append(tmp / name)
        return tmp / name

    def short(rev: str) -> str:
        return subprocess.run(
            ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()

    for i, rev in enumerate(args.baseline):
        trees[f"before ({short(rev)})"] = checkout(rev, f"before{i}")
    if args.after:
        trees[f"after ({short(args.after)})"] = checkout(args.after, "after")
    else:
        trees[f"after ({short('HEAD')}+tree)"] = ROOT
    urls = {label: f"{server}/bench_accept_{i}_{os.getpid()}" for i, label in enumerate(trees)}
    try:
        keys = {label: prepare(tree, urls[label]) for label, tree in trees.items()}
        results: dict[str, list[dict]] = {label: [] for label in trees}
        print(
            f"{args.rounds} rounds, {args.n} requests of each kind in process and "
            f"{args.http_n} over HTTP per round and tree; milliseconds per request"
        )
        labels = list(trees)
        for r in range(args.rounds):
            for label in labels if r % 2 == 0 else labels[::-1]:
                out = subprocess.run(
                    [PY, str(Path(__file__).resolve()), "--n", str(args.n), "--http-n",
                     str(args.http_n), "--child", str(trees[label]), urls[label], keys[label]],
                    cwd=trees[label], capture_output=True, text=True,
                )  # fmt: skip
                if out.returncode:
                    sys.exit(out.stderr[-4000:])
                res = json.loads(out.stdout.strip().splitlines()[-1])
                results[label].append(res)
                print(
                    f"round {r + 1} {label:<24} "
                    + "  ".join(f"{m}: {res[m]:.2f}" for m in MEASURES),
                    flush=True,
                )
        print()
        print(f"| measure | {' | '.join(labels)} |")
        print(f"|---|{'---|' * len(labels)}")
        for m in MEASURES:
            row = [spread([res[m] for res in results[label]]) for label in labels]
            print(f"| {m} (ms) | {' | '.join(row)} |")
        for m in ("quote statements", "job accept statements", "job run statements"):
            row = [str(results[label][-1][m]) for label in labels]
            print(f"| {m} | {' | '.join(row)} |")
    finally:
        for url in urls.values():
            drop(url)
        for path in made:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, capture_output=True
            )


if __name__ == "__main__":
    main()

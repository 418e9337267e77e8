"""POST /api/v1/quotes under gunicorn on PostgreSQL, against a bare DRF endpoint
(GET /api/v1/ping) on the same server, same load generator, same machine.

Usage: .venv/bin/python bench/bench_quotes_http.py [--seconds 10] [--clients 8]
       [--workers 2] [--database-url postgres://postgres@127.0.0.1:5432/lifecycle_bench]

Creates (or reuses) the bench database, migrates, loads the catalog, creates an
account, starts gunicorn (gthread workers, keep-alive) on a free port, and drives it
with persistent HTTP connections from threads. Prints requests/s, median and P90
latency for both endpoints, the throughput ratio and the median latency the router
adds. Goal (issue 4): at least half the bare endpoint's throughput, under 3 ms added
median latency. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BIN = Path(PY).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def manage(env: dict, *args: str) -> str:
    out = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(out.stderr)
    return out.stdout


def drive(
    port: int,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict,
    seconds: float,
    clients: int,
) -> tuple[int, list[float], int]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker():
        nonlocal errors
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine, bad = [], 0
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
            if r.status != 200:
                bad += 1
        conn.close()
        with lock:
            latencies.extend(mine)
            errors += bad

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), latencies, errors


def summary(name: str, n: int, lat: list[float], errors: int, seconds: float) -> dict:
    lat = sorted(lat)
    res = {
        "rps": n / seconds,
        "median_ms": statistics.median(lat) * 1000,
        "p90_ms": lat[int(0.9 * (len(lat) - 1))] * 1000,
    }
    print(
        f"{name:<28} {res['rps']:8.0f} req/s   median {res['median_ms']:6.2f} ms   "
        f"P90 {res['p90_ms']:6.2f} ms   non-200: {errors}"
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lifecycle_bench"
        ),
    )
    args = ap.parse_args()
    ensure_database(args.database_url)
    env = dict(
        os.environ,
        DATABASE_URL=args.database_url,
        DEBUG="0",
        ALLOWED_HOSTS="127.0.0.1",
        SECRET_KEY="bench-only-" + "x" * 50,
        SECURE_SSL_REDIRECT="0",
        LOG_LEVEL="WARNING",
    )
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    manage(env, "migrate", "--noinput")
    manage(env, "loadcatalog")
    manage(env, "collectstatic", "--noinput")
    key = json.loads(
        manage(env, "create_account", f"bench-{int(time.time())}", "--json", "--credits", "1000000")
    )["api_key"]
    port = free_port()
    server = subprocess.Popen(
        [
            str(BIN / "gunicorn"),
            "deploy.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(args.workers),
            "-k",
            "gthread",
            "--threads",
            "4",
            "--keep-alive",
            "30",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        for _ in range(100):
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).request(
                    "GET", "/api/v1/ping"
                )
                break
            except OSError:
                time.sleep(0.1)
        quote = json.dumps(
            {
                "model": "sol",
                "input_tokens": 8000,
                "output_tokens": 22000,
                "turns": 30,
                "tool_seconds": 15,
                "deadline_seconds": 400,
            }
        ).encode()
        hdr = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        drive(port, "GET", "/api/v1/ping", None, {}, 1, args.clients)  # warm up
        drive(port, "POST", "/api/v1/quotes", quote, hdr, 1, args.clients)
        print(
            f"gunicorn: {args.workers} workers x 4 threads; {args.clients} client threads; "
            f"{args.seconds:g} s each; PostgreSQL at {args.database_url.rsplit('@', 1)[-1]}"
        )
        bare = summary(
            "GET /api/v1/ping (bare DRF)",
            *drive(port, "GET", "/api/v1/ping", None, {}, args.seconds, args.clients),
            args.seconds,
        )
        quotes = summary(
            "POST /api/v1/quotes",
            *drive(port, "POST", "/api/v1/quotes", quote, hdr, args.seconds, args.clients),
            args.seconds,
        )
        print("latency with one client (no queueing in the server):")
        bare1 = summary(
            "GET /api/v1/ping (bare DRF)",
            *drive(port, "GET", "/api/v1/ping", None, {}, args.seconds / 2, 1),
            args.seconds / 2,
        )
        quotes1 = summary(
            "POST /api/v1/quotes",
            *drive(port, "POST", "/api/v1/quotes", quote, hdr, args.seconds / 2, 1),
            args.seconds / 2,
        )
        ratio = quotes["rps"] / bare["rps"]
        added = quotes1["median_ms"] - bare1["median_ms"]
        added_loaded = quotes["median_ms"] - bare["median_ms"]
        print(
            f"throughput ratio quotes/bare: {ratio:.2f} "
            f"(goal >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})"
        )
        print(
            f"added median latency, one client: {added:.2f} ms "
            f"(goal < 3 ms: {'met' if added < 3 else 'NOT met'}); "
            f"at {args.clients} clients: {added_loaded:.2f} ms"
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)


if __name__ == "__main__":
    main()

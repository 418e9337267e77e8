"""POST /api/v1/quotes on PostgreSQL under the web server as deployed (gunicorn with
uvicorn workers on the ASGI application: tests.realparts.web_argv, like deploy/run.sh),
against a bare DRF endpoint (GET /api/v1/ping) on the same server, same load generator,
same machine, in the same run.

Usage: .venv/bin/python bench/bench_quotes_http.py [--seconds 5] [--rounds 3]
       [--clients 8] [--workers 2]
       [--database-url postgres://postgres@127.0.0.1:5432/lifecycle_bench]

Creates (or reuses) the bench database, migrates, loads the catalog, creates an
account, starts the web server on a free port, and drives it with persistent HTTP
connections from threads: each round measures ping then quotes, `--rounds` times.
Prints each round's requests/s, the median [min-max] over rounds of requests/s and of
the per-round median latency for both endpoints, the throughput ratio (median of the
per-round ratios), and the median latency the router adds with one client.
Goals (issues 4 and 16): at least half the bare endpoint's throughput, under 3 ms added
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


DEFAULT_DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lifecycle_bench"
)


# The README's flagship quote (GDP-Val-shaped, 400 s: Priority), for every quote bench.
QUOTE_BODY = {
    "model": "sol",
    "input_tokens": 8000,
    "output_tokens": 22000,
    "turns": 30,
    "tool_seconds": 15,
    "deadline_seconds": 400,
}


def bench_settings(database_url: str, allowed_hosts: str) -> dict[str, str]:
    """The environment both quote benches run the service with (profile_quote.py too)."""
    return {
        "DATABASE_URL": database_url,
        "DEBUG": "0",
        "ALLOWED_HOSTS": allowed_hosts,
        "SECRET_KEY": "bench-only-" + "x" * 50,
        "SECURE_SSL_REDIRECT": "0",
        "LOG_LEVEL": "WARNING",
        # One account offers all the load: rate limits high enough never to refuse, but
        # counted as deployed (the throttle and the x-ratelimit-* headers run).
        "API_THROTTLE_RATE": "100000000/min",
    }


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


def summary(n: int, lat: list[float], errors: int, seconds: float) -> dict:
    lat = sorted(lat)
    return {
        "rps": n / seconds,
        "median_ms": statistics.median(lat) * 1000,
        "p90_ms": lat[int(0.9 * (len(lat) - 1))] * 1000,
        "errors": errors,
    }


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """median [min-max]"""
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}-{fmt.format(max(values))}]"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5, help="per endpoint and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    args = ap.parse_args()
    ensure_database(args.database_url)
    env = dict(os.environ, **bench_settings(args.database_url, "127.0.0.1"))
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    manage(env, "migrate", "--noinput")
    manage(env, "loadcatalog")
    manage(env, "collectstatic", "--noinput")
    key = json.loads(
        manage(env, "create_account", f"bench-{int(time.time())}", "--json", "--credits", "1000000")
    )["api_key"]
    port = free_port()
    sys.path.insert(0, str(ROOT))
    from tests.realparts import web_argv

    server = subprocess.Popen(
        [*web_argv("127.0.0.1", port, workers=args.workers), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/api/v1/ping")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        quote = json.dumps(QUOTE_BODY).encode()
        hdr = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        ping = ("GET", "/api/v1/ping", None, {})
        quotes = ("POST", "/api/v1/quotes", quote, hdr)
        drive(port, *ping, 1, args.clients)  # warm up
        drive(port, *quotes, 1, args.clients)
        print(
            f"web server as deployed: gunicorn, {args.workers} uvicorn workers (ASGI); "
            f"{args.clients} client threads; {args.seconds:g} s per endpoint and round, "
            f"{args.rounds} rounds; PostgreSQL at {args.database_url.rsplit('@', 1)[-1]}"
        )
        bare, quoted = [], []
        for i in range(args.rounds):
            bare.append(summary(*drive(port, *ping, args.seconds, args.clients), args.seconds))
            quoted.append(summary(*drive(port, *quotes, args.seconds, args.clients), args.seconds))
            print(
                f"round {i + 1}: ping {bare[-1]['rps']:6.0f} req/s, quotes "
                f"{quoted[-1]['rps']:6.0f} req/s, ratio {quoted[-1]['rps'] / bare[-1]['rps']:.2f}"
                f"  (non-200: {bare[-1]['errors']} / {quoted[-1]['errors']})"
            )
        for name, runs in (("GET /api/v1/ping (bare DRF)", bare), ("POST /api/v1/quotes", quoted)):
            print(
                f"{name:<28} {spread([r['rps'] for r in runs])} req/s   median latency "
                f"{spread([r['median_ms'] for r in runs], '{:.2f}')} ms   P90 "
                f"{spread([r['p90_ms'] for r in runs], '{:.2f}')} ms"
            )
        ratios = [q["rps"] / b["rps"] for q, b in zip(quoted, bare, strict=True)]
        ratio = statistics.median(ratios)
        print(
            f"throughput ratio quotes/ping: {spread(ratios, '{:.2f}')} "
            f"(goal >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})"
        )
        half = max(args.seconds / 2, 1)
        bare1 = summary(*drive(port, *ping, half, 1), half)
        quotes1 = summary(*drive(port, *quotes, half, 1), half)
        added = quotes1["median_ms"] - bare1["median_ms"]
        print(
            f"one client: ping median {bare1['median_ms']:.2f} ms, quotes "
            f"{quotes1['median_ms']:.2f} ms; added {added:.2f} ms "
            f"(goal < 3 ms: {'met' if added < 3 else 'NOT met'})"
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)


if __name__ == "__main__":
    main()

"""The bare request (GET /api/v1/ping) and a 5-token Ultrafast chat completion
(POST /v1/chat/completions, non-streaming) under the web server as deployed (gunicorn,
uvicorn workers, the ASGI application: tests.realparts.web_argv, like deploy/run.sh) on
PostgreSQL and Redis, with 8 clients and with 1, against a baseline in the same run:
the same server started with WEB_HANDLER=django (Django's own ASGI handler, as before
issue 29) on the same database. Rounds alternate between the two servers.

Usage: .venv/bin/python bench/bench_ping.py [--seconds 4] [--rounds 3] [--clients 8]
       [--workers 2] [--only ping|chat]
       [--database-url postgres://postgres@127.0.0.1:5432/lifecycle_bench]
       [--redis redis://127.0.0.1:6379/15]

Prints per round and server: requests/s with N clients and the median latency with one
client, then median [min-max] over rounds and the ratio ours / baseline. Goals (issue
29): ping >= 1,000 req/s with 8 clients and <= 1.5 ms median with one; a chat completion
<= 5 ms above ping with one client. SIM_TIME_SCALE is so high that no simulated time is
waited. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from bench_quotes_http import (  # noqa: E402
    DEFAULT_DATABASE_URL,
    bench_settings,
    drive,
    ensure_database,
    free_port,
    manage,
    spread,
    summary,
)

CHAT_BODY = {
    "model": "sol",
    "service_tier": "ultrafast",
    "max_tokens": 5,
    "messages": [{"role": "user", "content": "Say hello."}],
}


def start(env: dict, workers: int, handler: str):
    """The web server as deployed (tests.realparts.start_web) with WEB_HANDLER=handler,
    ready; (the process, its port)."""
    from tests.realparts import start_web

    port = free_port()
    server = start_web(
        {**env, "WEB_HANDLER": handler},
        port,
        workers=workers,
        name=f"web-{handler}",  # its log (a file) shows when a worker has started
    )
    return server.wait_ready(timeout=30), port


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4, help="per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", choices=["ping", "chat"], default=None)
    ap.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    ap.add_argument("--redis", default=os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/15"))
    args = ap.parse_args()
    ensure_database(args.database_url)
    env = dict(os.environ, **bench_settings(args.database_url, "127.0.0.1"))
    env.update(
        CELERY_BROKER_URL=args.redis,
        SIM_TIME_SCALE="1000000",  # no simulated waiting: the service's own work only
        API_TOKENS_PER_MINUTE="off",  # one account offers all the load
    )
    manage(env, "migrate", "--noinput")
    manage(env, "loadcatalog")
    manage(env, "collectstatic", "--noinput")
    key = json.loads(
        manage(env, "create_account", f"bench-{int(time.time())}", "--json", "--credits", "1e9")
    )["api_key"]
    chat_headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    cases = {
        "ping": ("GET", "/api/v1/ping", None, {}),
        "chat": ("POST", "/v1/chat/completions", json.dumps(CHAT_BODY).encode(), chat_headers),
    }
    if args.only:
        cases = {args.only: cases[args.only]}
    servers = {}
    try:
        for handler in ("ours", "django"):
            servers[handler] = start(env, args.workers, handler)
        for _, port in servers.values():
            for case in cases.values():
                drive(port, *case, 1, args.clients)  # warm up
        print(
            f"gunicorn, {args.workers} uvicorn workers (ASGI), PostgreSQL, Redis; "
            f"{args.clients} clients and 1 client, {args.seconds:g} s each, {args.rounds} "
            "rounds; ours vs WEB_HANDLER=django (Django's ASGI handler) alternately"
        )
        results: dict = {}
        for i in range(args.rounds):
            for handler, (_, port) in servers.items():
                for name, case in cases.items():
                    many = summary(*drive(port, *case, args.seconds, args.clients), args.seconds)
                    one = summary(*drive(port, *case, args.seconds / 2, 1), args.seconds / 2)
                    results.setdefault((handler, name), []).append((many, one))
                    print(
                        f"round {i + 1} {handler:<6} {name:<4} {args.clients} clients "
                        f"{many['rps']:6.0f} req/s (median {many['median_ms']:.2f} ms); 1 client "
                        f"median {one['median_ms']:.2f} ms  (non-200: {many['errors']}/"
                        f"{one['errors']})",
                        flush=True,
                    )
        print()
        for (handler, name), runs in results.items():
            print(
                f"{handler:<6} {name:<4} {args.clients} clients "
                f"{spread([m['rps'] for m, _ in runs])} req/s; 1 client median "
                f"{spread([o['median_ms'] for _, o in runs], '{:.2f}')} ms, P90 "
                f"{spread([o['p90_ms'] for _, o in runs], '{:.2f}')} ms"
            )
        for name in cases:
            ratio = [
                m["rps"] / b["rps"]
                for (m, _), (b, _) in zip(
                    results[("ours", name)], results[("django", name)], strict=True
                )
            ]
            print(f"{name}: throughput ours / baseline {spread(ratio, '{:.2f}')}")
        if "ping" in cases:
            rps = statistics.median(m["rps"] for m, _ in results[("ours", "ping")])
            one = statistics.median(o["median_ms"] for _, o in results[("ours", "ping")])
            print(
                f"ping goals: >= 1,000 req/s with {args.clients} clients: "
                f"{'met' if rps >= 1000 else 'NOT met'} ({rps:.0f}); <= 1.5 ms with 1 client: "
                f"{'met' if one <= 1.5 else 'NOT met'} ({one:.2f})"
            )
        if len(cases) == 2:
            for handler in servers:
                added = [
                    c[1]["median_ms"] - p[1]["median_ms"]
                    for c, p in zip(
                        results[(handler, "chat")], results[(handler, "ping")], strict=True
                    )
                ]
                print(
                    f"{handler}: chat completion above ping, 1 client: "
                    f"{spread(added, '{:.2f}')} ms (goal <= 5 ms)"
                )
    finally:
        for server, _ in servers.values():
            server.stop(timeout=20)


if __name__ == "__main__":
    main()

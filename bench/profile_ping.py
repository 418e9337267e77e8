"""Where a bare request (GET /api/v1/ping) and a 5-token chat completion spend their
time in process, through the ASGI application as deployed (deploy.asgi: every
middleware, DEBUG off, Redis as the cache, PostgreSQL from the pool), driven by a
minimal ASGI caller in one event loop (no HTTP parsing, no socket): per-request median
[min-max] over batches, then a cProfile of each (top functions by own and cumulative
time).

Usage: .venv/bin/python bench/profile_ping.py [--n 500] [--batches 5] [--top 25]
       [--only ping|chat] [--database-url postgres://...] [--redis redis://.../N]

Not a test: nothing is asserted. Uses (and migrates) the given database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import threading
import time
from concurrent.futures.thread import _WorkItem
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from bench_quotes_http import DEFAULT_DATABASE_URL, bench_settings  # noqa: E402

from tests.asgicall import call_asgi  # noqa: E402

CHAT_BODY = {
    "model": "sol",
    "service_tier": "ultrafast",
    "max_tokens": 5,
    "messages": [{"role": "user", "content": "Say hello."}],
}


def asgi_call(app, method: str, path: str, headers: dict, body: bytes = b""):
    """One request through the ASGI application: a coroutine function giving
    (status, body)."""
    pairs = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def run():
        out = await call_asgi(app, method, path, body, pairs)
        return out["status"], out["body"]

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500, help="requests per batch")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--only", choices=["ping", "chat"], default=None)
    ap.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    ap.add_argument("--redis", default=os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/15"))
    args = ap.parse_args()
    os.environ.update(bench_settings(args.database_url, "127.0.0.1"))
    os.environ.setdefault("CELERY_BROKER_URL", args.redis)
    os.environ.setdefault("SIM_TIME_SCALE", "1000000")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
    from django.core.management import call_command

    from deploy.asgi import application  # DB_POOL=1, CONN_MAX_AGE=0, as deployed

    call_command("migrate", "--noinput", verbosity=0)
    call_command("loadcatalog", verbosity=0)
    out = io.StringIO()
    call_command(
        "create_account", f"profile-{int(time.time())}", "--json", "--credits", "1000000",
        stdout=out,
    )  # fmt: skip
    key = json.loads(out.getvalue())["api_key"]
    auth = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    ping = asgi_call(application, "GET", "/api/v1/ping", {})
    chat = asgi_call(
        application, "POST", "/v1/chat/completions", auth, json.dumps(CHAT_BODY).encode()
    )
    cases = {"ping": ping, "chat": chat}
    if args.only:
        cases = {args.only: cases[args.only]}

    loop = asyncio.new_event_loop()

    def once(fn):
        status, body = loop.run_until_complete(fn())
        assert status == 200, body[:500]

    for fn in cases.values():
        for _ in range(30):
            once(fn)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.batches):
        for name, fn in cases.items():
            n = args.n if name == "ping" else max(1, args.n // 5)
            t0 = time.perf_counter()
            for _ in range(n):
                once(fn)
            times[name].append((time.perf_counter() - t0) / n * 1000)

    def spread(v):
        return f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"

    print(f"in process (ASGI application as deployed, one event loop), {args.batches} batches:")
    for name, v in times.items():
        print(f"  {name:<6} {spread(v)} ms per request")
    for name, fn in cases.items():
        n = args.n if name == "ping" else max(1, args.n // 5)
        threads: list[cProfile.Profile] = []
        prof = cProfile.Profile()
        with profiled_threads(threads):
            prof.enable()
            for _ in range(n):
                once(fn)
            prof.disable()
        for where, profs in (("event loop", [prof]), ("threads (sync_to_async)", threads)):
            print(f"===== {name}: {n} requests, {where}")
            if not profs:
                print("(none)")
                continue
            stats = pstats.Stats(profs[0])
            for more in profs[1:]:
                stats.add(more)
            for order in ("tottime", "cumulative"):
                s = io.StringIO()
                stats.stream = s
                stats.sort_stats(order).print_stats(args.top)
                text = s.getvalue()
                print(text[text.index("ncalls") - 100 :] if "ncalls" in text else text)


@contextlib.contextmanager
def profiled_threads(into: list):
    """cProfile in every executor thread (sync_to_async's work) while inside."""
    local = threading.local()
    original = _WorkItem.run

    def run(self):
        p = getattr(local, "p", None)
        if p is None:
            p = local.p = cProfile.Profile()
            into.append(p)
        p.enable()
        try:
            original(self)
        finally:
            p.disable()

    _WorkItem.run = run
    try:
        yield
    finally:
        _WorkItem.run = original


if __name__ == "__main__":
    main()

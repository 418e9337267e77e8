"""Where one POST /api/v1/quotes spends its time, in process (Django's test client, the
WSGI handler and the full middleware stack) on PostgreSQL: per-request median [min-max]
of ping and quote over several batches, the quote's statements, and a cProfile of the
quote path (top functions by own and cumulative time).

Usage: .venv/bin/python bench/profile_quote.py [--n 300] [--batches 5] [--top 25]
       [--database-url postgres://postgres@127.0.0.1:5432/lifecycle_bench]

Not a test: nothing is asserted. Uses (and migrates) the given database.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_quotes_http import DEFAULT_DATABASE_URL, QUOTE_BODY, bench_settings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300, help="requests per batch")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.update(bench_settings(args.database_url, "testserver"))
    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", "--noinput", verbosity=0)
    call_command("loadcatalog", verbosity=0)
    out = io.StringIO()
    call_command("create_account", f"profile-{int(time.time())}", "--json", stdout=out)
    key = json.loads(out.getvalue())["api_key"]
    body = json.dumps(QUOTE_BODY)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    anon = Client()

    def ping():
        r = anon.get("/api/v1/ping")
        assert r.status_code == 200, r.content

    def quote():
        r = client.post("/api/v1/quotes", body, content_type="application/json")
        assert r.status_code == 200, r.content

    for _ in range(50):
        ping()
        quote()
    times: dict[str, list[float]] = {"ping": [], "quote": []}
    for _ in range(args.batches):
        for name, fn in (("ping", ping), ("quote", quote)):
            t0 = time.perf_counter()
            for _ in range(args.n):
                fn()
            times[name].append((time.perf_counter() - t0) / args.n * 1000)

    def spread(v):
        return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

    print(f"in process (test client, WSGI handler), {args.batches} batches of {args.n}:")
    for name, v in times.items():
        print(f"  {name:<6} {spread(v)} ms per request")
    ratio = [p / q for p, q in zip(times["ping"], times["quote"], strict=True)]
    print(f"  ping/quote time ratio {spread(ratio)}")
    with CaptureQueriesContext(connection) as ctx:
        quote()
    print(f"quote statements: {len(ctx.captured_queries)}")
    for q in ctx.captured_queries:
        print(f"  {q['sql'][:150]}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.n):
        quote()
    prof.disable()
    for order in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(order).print_stats(args.top)
        print(s.getvalue()[s.getvalue().index("ncalls") - 100 :])


if __name__ == "__main__":
    main()

"""The OpenAI-compatible chat endpoint under the quick start's web server (gunicorn with
uvicorn workers, ASGI, on SQLite, as deploy/run.sh starts it):

1. added latency: a non-streaming chat completion (1 output token, SIM_TIME_SCALE so
   high the simulated wait is nil) against the bare endpoint GET /api/v1/ping, one
   client, keep-alive, same server: median and P95 of each and the difference (what
   authentication, the router, the job and its settlement add);
2. N concurrent streaming clients (default 200, the official AsyncOpenAI client) held
   open together: every stream paced at Standard's speed for about --stream-seconds;
   RSS of the server's processes before and while all streams are open (memory per
   open stream), how many streams finished with [DONE] and the full usage, none
   dropped, and the server's CPU time per stream.

Usage: .venv/bin/python bench/bench_streams.py [--streams 200] [--stream-seconds 60]
       [--workers 2] [--requests 300]
Not a test: nothing is asserted; figures are printed (README "Serving: ASGI").
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realparts import (  # noqa: E402
    free_port,
    group_pids,
    owned_tempdir,
    project_env,
    run_manage,
    start_web,
)

MESSAGES = [{"role": "user", "content": "Write the release note for the retry fix."}]
STANDARD_TOKENS_PER_SECOND = 54  # Sol on Standard (catalog.toml, engine): ~54 tokens/s


def rss_mb(pgid: int) -> float:
    total = 0
    for pid in group_pids(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def cpu_seconds(pgid: int) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in group_pids(pgid):
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / ticks


def serve(env: dict, workers: int):
    port = free_port()
    web = start_web(env, port, workers=workers)
    web.wait_ready(60)
    time.sleep(0.5 * workers)  # every worker up
    return web, port


def warm_up(port: int, key: str, n: int) -> None:
    """`n` concurrent small completions, so every worker has imported and cached what
    a request needs before memory is measured."""
    import concurrent.futures

    def one(_):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = json.dumps({"model": "sol", "messages": MESSAGES, "max_tokens": 1})
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        conn.getresponse().read()
        conn.close()

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        list(pool.map(one, range(n)))


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def latency(port: int, key: str, n: int) -> dict[str, list[float]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = json.dumps(
        {"model": "sol", "messages": MESSAGES, "max_tokens": 1, "service_tier": "priority"}
    )
    out: dict[str, list[float]] = {"ping": [], "chat": []}
    for i in range(n + 20):  # 20 warm-up rounds
        for name, method, path, data in (
            ("ping", "GET", "/api/v1/ping", None),
            ("chat", "POST", "/v1/chat/completions", body),
        ):
            t = time.perf_counter()
            conn.request(method, path, body=data, headers=auth)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit(f"{path}: {r.status}")
            if i >= 20:
                out[name].append((time.perf_counter() - t) * 1000)
    conn.close()
    return out


async def streams(port: int, key: str, n: int, tokens: int, web_pgid: int) -> dict:
    import httpx2
    import openai

    http = openai.DefaultAsyncHttpxClient(
        limits=httpx2.Limits(max_connections=n + 10, max_keepalive_connections=n + 10),
        timeout=httpx2.Timeout(600),
    )
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=key, http_client=http, max_retries=0
    )
    active = 0  # streams between their first chunk and their end
    done = asyncio.Event()
    peak = {"active": 0, "rss": 0.0, "at": 0.0}

    async def one(i: int) -> tuple[bool, int]:
        nonlocal active
        streaming = False
        try:
            stream = await client.chat.completions.create(
                model="sol",
                messages=MESSAGES,
                service_tier="default",
                max_tokens=tokens,
                stream=True,
                stream_options={"include_usage": True},
            )
            usage = None
            async for chunk in stream:
                if not streaming:
                    streaming = True
                    active += 1
                if chunk.usage:
                    usage = chunk.usage.completion_tokens
            return usage == tokens, 0
        except Exception as exc:  # a dropped stream is a figure, not a crash
            print(f"  stream {i}: {type(exc).__name__}: {exc}")
            return False, 1
        finally:
            if streaming:
                active -= 1

    async def watch():
        # Sample every half second; keep the moment most streams were open at once.
        while not done.is_set():
            await asyncio.sleep(0.5)
            if active > peak["active"]:  # the first moment of the peak
                peak.update(active=active, rss=rss_mb(web_pgid), at=time.monotonic() - t0)

    t0 = time.monotonic()
    cpu0 = cpu_seconds(web_pgid)
    watcher = asyncio.create_task(watch())
    results = await asyncio.gather(*(one(i) for i in range(n)))
    done.set()
    await watcher
    elapsed = time.monotonic() - t0
    await client.close()
    return {
        "ok": sum(1 for ok, _ in results if ok),
        "errors": sum(e for _, e in results),
        "elapsed": elapsed,
        "peak": peak["active"],
        "peak_at": peak["at"],
        "rss_during": peak["rss"],
        "cpu": cpu_seconds(web_pgid) - cpu0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--stream-seconds", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()

    var = owned_tempdir("var")
    base_env = project_env(
        f"sqlite:///{var}/db.sqlite3",
        "filesystem://localhost//",
        var_dir=var,
        API_THROTTLE_RATE="1000000/s",
    )
    print("migrating, loading the catalog ...", flush=True)
    run_manage(base_env, "migrate", "--noinput")
    run_manage(base_env, "loadcatalog")
    key = json.loads(
        run_manage(base_env, "create_account", "bench", "--json", "--credits", "100000")
    )["api_key"]

    # 1. added latency (simulated time ~0)
    web, port = serve({**base_env, "SIM_TIME_SCALE": "1000000"}, args.workers)
    try:
        print(f"latency: {args.requests} sequential requests each ...", flush=True)
        lat = latency(port, key, args.requests)
    finally:
        web.kill()
    ping, chat = lat["ping"], lat["chat"]
    print(
        f"  GET /api/v1/ping            median {statistics.median(ping):6.2f} ms  "
        f"P95 {percentile(ping, 0.95):6.2f} ms"
    )
    print(
        f"  POST /v1/chat/completions   median {statistics.median(chat):6.2f} ms  "
        f"P95 {percentile(chat, 0.95):6.2f} ms"
    )
    print(
        f"  added by a chat completion: {statistics.median(chat) - statistics.median(ping):.2f} ms"
    )

    # 2. concurrent streams held open (real time: SIM_TIME_SCALE 1)
    tokens = int(args.stream_seconds * STANDARD_TOKENS_PER_SECOND)
    web, port = serve({**base_env, "SIM_TIME_SCALE": "1"}, args.workers)
    try:
        warm_up(port, key, 8 * args.workers)
        before = rss_mb(web.pid)
        print(
            f"streams: {args.streams} concurrent AsyncOpenAI streams, {tokens} tokens each "
            f"on Standard (~{args.stream_seconds:g} s), {args.workers} uvicorn workers ...",
            flush=True,
        )
        res = asyncio.run(streams(port, key, args.streams, tokens, web.pid))
        after = rss_mb(web.pid)
    finally:
        web.kill()
    per = (res["rss_during"] - before) / max(1, res["peak"]) * 1024
    print(
        f"  streaming at once (first chunk received, not yet ended): peak "
        f"{res['peak']}/{args.streams}, reached {res['peak_at']:.1f} s after the first request"
    )
    print(
        f"  finished with [DONE] and full usage: {res['ok']}/{args.streams}; "
        f"dropped or failed: {res['errors']}"
    )
    print(f"  wall time for all: {res['elapsed']:.1f} s")
    print(
        f"  server RSS (gunicorn + {args.workers} workers): before {before:.0f} MB, "
        f"at the peak {res['rss_during']:.0f} MB, after {after:.0f} MB: "
        f"{per:.0f} KB per open stream"
    )
    print(
        f"  server CPU: {res['cpu']:.1f} s for {args.streams} streams "
        f"({res['cpu'] / args.streams * 1000:.0f} ms per stream of {tokens} tokens)"
    )


if __name__ == "__main__":
    main()

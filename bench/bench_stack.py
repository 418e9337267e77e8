"""The quick start's own stack (`make run`: deploy/run.sh, web + one Celery worker + beat
on SQLite) under a steady stream of small jobs, on the embedded filesystem broker and on
Redis (issue 13: "offered 4.5 small jobs/s ... finished 2.1 jobs/s").

Usage: .venv/bin/python bench/bench_stack.py [--rate 25] [--seconds 60] [--clients 4]
           [--brokers filesystem redis] [--set KEY=VALUE ...]

For each broker: a temp VAR_DIR (SQLite file, broker folders, logs), `migrate`,
`loadcatalog`, an account, then `bash deploy/run.sh` exactly as `make run` starts it
(CELERY_BROKER_URL unset for the embedded broker, a throwaway Redis server from
tests/realparts.py otherwise). Client threads offer jobs at a fixed rate (`--rate`
jobs/s for `--seconds`; `--rate 0`: closed loop, each client submits as fast as it is
answered) of the issue's shape: Luna, 200 tokens in, 50 out, SIM_TIME_SCALE=200 so a
simulated run ends in a few wall milliseconds. Progress is printed every few seconds.

Printed per broker: offered and submitted jobs/s, completed jobs/s end to end (jobs
succeeded during the window / window; a job is done when its row says succeeded),
the backlog (accepted, not yet succeeded) when the window closes, p50/p95 latency from
acceptance to success (the job row's created_at and finished_at) of the jobs done
within a drain period after the window, then the ratio embedded / Redis. `--set` passes
environment variables to the stack (e.g. WORKER_CONCURRENCY=1), to measure one lever.
Not a test: nothing is asserted. This box has 2 cores shared by everything here.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realparts import (  # noqa: E402
    BIN_DIR,
    RedisServer,
    free_port,
    owned_tempdir,
    run_manage,
)

# The small job.
SMALL = {
    "model": "gpt-5.6-luna",
    "input_tokens": 200,
    "output_tokens": 50,
    "turns": 1,
    "tool_seconds": 0,
    "deadline_seconds": 3600,
}


def quick_env(broker_url: str | None, extra: dict[str, str]) -> dict[str, str]:
    """`make run`'s environment: SQLite and the embedded broker unless `broker_url`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
        and not k.startswith("PYTEST_")
    }
    env.update(
        VAR_DIR=str(owned_tempdir("stack")),
        PORT=str(free_port()),
        PY=str(BIN_DIR / "python"),
        CELERY=str(BIN_DIR / "celery"),
        PYTHONUNBUFFERED="1",
        SIM_TIME_SCALE="200",
        # One account offers all the load: the per-account rate limits (600 writes/min
        # by default) would measure the throttle, not the stack.
        API_THROTTLE_RATE="off",
        API_TOKENS_PER_MINUTE="off",
    )
    if broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    env.update(extra)
    return env


class QuickStack:
    """deploy/run.sh on a temp VAR_DIR; stopped with SIGTERM like Ctrl-C."""

    def __init__(self, env: dict[str, str], credits: str = "1000000"):
        self.env = env
        self.var = Path(env["VAR_DIR"])
        self.base = f"http://127.0.0.1:{env['PORT']}"
        run_manage(env, "migrate", "--noinput")
        run_manage(env, "loadcatalog")
        self.key = json.loads(
            run_manage(env, "create_account", "bench", "--json", "--credits", credits)
        )["api_key"]
        self.log = self.var / "run.log"
        self.proc = subprocess.Popen(
            ["bash", "deploy/run.sh"],
            cwd=ROOT,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while not self._up():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stack did not come up:\n{self.log.read_text()}")
            time.sleep(0.3)
        self.db = sqlite3.connect(f"file:{self.var / 'db.sqlite3'}?mode=ro", uri=True)

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/api/v1/ping", timeout=2):
                pass
        except OSError:
            return False
        worker_log = self.var / "log" / "worker.log"
        return worker_log.exists() and "ready." in worker_log.read_text(errors="replace")

    def submit(self) -> int:
        req = urllib.request.Request(
            f"{self.base}/api/v1/jobs",
            data=json.dumps(SMALL).encode(),
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT status, count(*) FROM routing_job GROUP BY status")
        return dict(rows.fetchall())

    def latencies(self, since: str) -> list[float]:
        rows = self.db.execute(
            "SELECT (julianday(finished_at) - julianday(created_at)) * 86400.0 "
            "FROM routing_job WHERE status = 'succeeded' AND created_at >= ?",
            (since,),
        )
        return sorted(r[0] for r in rows)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) used so far by web, worker (with its pool) and
        beat: run.sh's children and their descendants, by the child's role."""
        tick = os.sysconf("SC_CLK_TCK")
        parent, cpu, argv = {}, {}, {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                raw = (entry / "stat").read_text()
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2 :].split()
            pid = int(entry.name)
            parent[pid] = int(fields[1])
            cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
            argv[pid] = b" ".join(cmd)
        totals: dict[str, float] = {}
        for pid in cpu:
            chain, p = [], pid
            while p in parent and p != self.proc.pid and p > 1:
                chain.append(p)
                p = parent[p]
            if p != self.proc.pid or not chain:
                continue
            child = argv[chain[-1]]
            role = "worker" if b" worker" in child else "beat" if b" beat" in child else "web"
            totals[role] = totals.get(role, 0.0) + cpu[pid]
        return totals

    def close(self) -> None:
        self.db.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


@dataclass
class Result:
    broker: str
    offered: float
    submitted: int = 0
    refused: dict = field(default_factory=dict)
    seconds: float = 0.0
    done_in_window: int = 0
    backlog: int = 0
    done_after_drain: int = 0
    p50: float = float("nan")
    p95: float = float("nan")
    cpu: dict = field(default_factory=dict)
    load: float = 0.0

    @property
    def rate(self) -> float:
        return self.done_in_window / self.seconds if self.seconds else 0.0


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def offer(stack: QuickStack, res: Result, rate: float, seconds: float, clients: int, drain: float):
    lock = threading.Lock()
    state = {"next": 0}
    since = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    t0 = time.monotonic()
    end = t0 + seconds

    def client():
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            at = t0 + i / rate if rate else time.monotonic()
            if at >= end:
                return
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            code = stack.submit()
            with lock:
                if code == 202:
                    res.submitted += 1
                else:
                    res.refused[code] = res.refused.get(code, 0) + 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    done0 = stack.counts().get("succeeded", 0)
    cpu0 = stack.cpu_seconds()
    while any(t.is_alive() for t in threads):
        time.sleep(min(5.0, max(0.5, end - time.monotonic())))
        c = stack.counts()
        el = time.monotonic() - t0
        print(
            f"    {el:5.1f} s  accepted {res.submitted:5d}  succeeded "
            f"{c.get('succeeded', 0) - done0:5d} ({(c.get('succeeded', 0) - done0) / el:5.1f}/s)"
            f"  queued {c.get('queued', 0):4d}  running {c.get('running', 0):3d}",
            flush=True,
        )
    for t in threads:
        t.join()
    res.seconds = time.monotonic() - t0
    c = stack.counts()
    res.done_in_window = c.get("succeeded", 0) - done0
    cpu1 = stack.cpu_seconds()
    res.cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
    res.load = os.getloadavg()[0]
    res.backlog = res.submitted - res.done_in_window
    deadline = time.monotonic() + drain
    while (
        time.monotonic() < deadline and stack.counts().get("succeeded", 0) - done0 < res.submitted
    ):
        time.sleep(0.2)
    lat = stack.latencies(since)
    res.done_after_drain = len(lat)
    res.p50, res.p95 = pct(lat, 50), pct(lat, 95)


def run_one(broker: str, args, extra: dict[str, str]) -> Result:
    redis = RedisServer() if broker == "redis" else None
    try:
        env = quick_env(redis.url if redis else None, extra)
        print(f"\n== {broker}: starting deploy/run.sh (VAR_DIR {env['VAR_DIR']})", flush=True)
        stack = QuickStack(env)
        try:
            # Warm up: the first jobs load the catalog and the engine in each process.
            for _ in range(5):
                stack.submit()
            deadline = time.monotonic() + 60
            while stack.counts().get("succeeded", 0) < 5 and time.monotonic() < deadline:
                time.sleep(0.2)
            res = Result(broker, args.rate)
            what = f"{args.rate:g} jobs/s" if args.rate else f"closed loop, {args.clients} clients"
            print(f"  offering {what} for {args.seconds:g} s", flush=True)
            offer(stack, res, args.rate, args.seconds, args.clients, args.drain)
            return res
        finally:
            stack.close()
    finally:
        if redis:
            redis.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=25.0, help="jobs/s offered; 0: closed loop")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--drain", type=float, default=30.0, help="s to wait for the backlog")
    ap.add_argument("--brokers", nargs="+", default=["filesystem", "redis"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.set)
    results = [run_one(b, args, extra) for b in args.brokers]
    print(
        f"\nquick start stack (SQLite, deploy/run.sh), {SMALL['model']} "
        f"{SMALL['input_tokens']} in / {SMALL['output_tokens']} out, "
        f"{os.cpu_count()} cores{', ' + ' '.join(args.set) if args.set else ''}"
    )
    print(
        "broker      offered/s  accepted/s  completed/s  backlog  p50 s  p95 s  done+drain  refused"
    )
    for r in results:
        offered = f"{r.offered:g}" if r.offered else "max"
        print(
            f"{r.broker:<10}  {offered:>9}  {r.submitted / r.seconds:>10.1f}  {r.rate:>11.1f}"
            f"  {r.backlog:>7}  {r.p50:>5.2f}  {r.p95:>5.2f}  {r.done_after_drain:>5}/"
            f"{r.submitted:<5}  {r.refused or '-'}"
        )
    print("CPU ms per accepted job (web, worker with its pool, beat); 1-min load at the end:")
    for r in results:
        per = ", ".join(
            f"{k} {v * 1000 / max(1, r.submitted):.0f}" for k, v in sorted(r.cpu.items())
        )
        print(f"  {r.broker:<10}  {per}; load {r.load:.1f}")
    by = {r.broker: r for r in results}
    if "filesystem" in by and "redis" in by and by["redis"].rate:
        print(f"embedded / Redis: {by['filesystem'].rate / by['redis'].rate:.2f}")


if __name__ == "__main__":
    main()

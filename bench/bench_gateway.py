"""Our OpenAI-compatible chat path against a local LiteLLM proxy (issue 29): the same
load generator, both servers up at once, interleaved rounds in one run.

Ours: the web server as deployed (gunicorn + 2 uvicorn workers on the ASGI application,
tests.realparts.web_argv like deploy/run.sh) on PostgreSQL (a throwaway database
`bench_gateway_<pid>_<hex>` on DATABASE_URL's server, dropped at the end) and Redis (a
throwaway redis-server, or --redis-url), SIM_TIME_SCALE so high that a job's simulated
run costs no wall time. Measured: `POST /v1/chat/completions` (Sol, a 5-token reply on
Ultrafast, non-streaming, with an API key) and the bare `GET /api/v1/ping`.

Theirs: LiteLLM's proxy (litellm[proxy]==1.110.2, its own venv: `make bench-gateway`
creates var/bench-litellm-venv) with 2 workers, one model answered by `mock_response`
(no upstream call), a master key (each request authenticated, as ours), no database.
Measured: `POST /chat/completions` (same body) and `GET /health/liveliness`.

The load generator is one asyncio client (aiohttp): N connections in closed loop (each
sends its next request when the answer is in) for --seconds. Each round measures every
(endpoint, clients) pair on both sides, back to back; the side that goes first
alternates from round to round. Printed: every measurement, then the median [min-max]
over rounds of req/s, median and P90 latency, the server's CPU ms per request (all its
processes) and the load generator's (when it nears a core's worth, the client is the
limit, not the server), the ratio ours/theirs (median of the per-round ratios), then
the issue's goals. A PNG chart with matplotlib when it is installed (--chart).

Every answer must be 200: non-200s and failed requests are counted, the first few are
printed, and the bench exits with status 1 if there was any. If LiteLLM is not
installed (or is the compromised 1.107.0), it says why and measures our side only.
Not a test: nothing is asserted on the timings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_quotes_http import bench_settings  # noqa: E402
from bench_streams import cpu_seconds  # noqa: E402

from tests.realparts import (  # noqa: E402
    RedisServer,
    ServiceProcess,
    free_port,
    group_pids,
    owned_tempdir,
    pid_alive,
    project_env,
    run_manage,
    start_web,
)

LITELLM_VERSION = "1.110.2"
LITELLM_COMPROMISED = {"1.107.0"}  # never run these
DEFAULT_LITELLM_VENV = ROOT / "var" / "bench-litellm-venv"
DB_PREFIX = "bench_gateway_"
MASTER_KEY = "sk-bench-gateway-master"
MESSAGES = [{"role": "user", "content": "Say hello in five words."}]
MAX_TOKENS = 5
# LiteLLM's mock reply: about as long as ours (5 tokens).
MOCK_REPLY = "Hello there, how are you?"


def chat_body(model: str) -> bytes:
    return json.dumps(
        {
            "model": model,
            "messages": MESSAGES,
            "max_tokens": MAX_TOKENS,
            "service_tier": "ultrafast",
        }
    ).encode()


# --- the two servers ------------------------------------------------------------------


@dataclass
class Target:
    side: str  # "ours" | "litellm"
    base: str
    pgid: int
    chat_path: str
    bare_path: str
    headers: dict[str, str]
    body: bytes


def _admin_url(database_url: str) -> str:
    return database_url.rsplit("/", 1)[0] + "/postgres"


def create_database(server_url: str) -> str:
    """A fresh database `bench_gateway_<pid>_<hex>` on `server_url`'s server; drops those
    a dead bench process left behind first. Returns its URL."""
    import uuid

    import psycopg
    from psycopg import sql

    name = f"{DB_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_admin_url(server_url), autocommit=True) as conn:
        for (old,) in conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", [DB_PREFIX + "%"]
        ).fetchall():
            m = re.fullmatch(rf"{DB_PREFIX}(\d+)_[0-9a-f]+", old)
            if m and not pid_alive(int(m.group(1))):
                _drop(conn, old)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server_url.rsplit("/", 1)[0] + "/" + name


def _drop(conn, name: str) -> None:
    from psycopg import sql

    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def drop_database(database_url: str) -> None:
    import psycopg

    with psycopg.connect(_admin_url(database_url), autocommit=True) as conn:
        _drop(conn, database_url.rsplit("/", 1)[1])


def start_ours(database_url: str, broker_url: str, workers: int) -> tuple[ServiceProcess, Target]:
    var = owned_tempdir("gateway")
    env = project_env(
        database_url,
        broker_url,
        var_dir=var,
        **bench_settings(database_url, "127.0.0.1"),
        SIM_TIME_SCALE="1000000",
    )
    print("ours: migrating, loading the catalog, creating an account ...", flush=True)
    run_manage(env, "migrate", "--noinput", timeout=600)
    run_manage(env, "loadcatalog")
    key = json.loads(
        run_manage(env, "create_account", "bench-gateway", "--json", "--credits", "100000000")
    )["api_key"]
    port = free_port()
    web = start_web(env, port, workers=workers, extra_args=["--log-level", "warning"])
    return web, Target(
        "ours",
        f"http://127.0.0.1:{port}",
        web.pgid,
        "/v1/chat/completions",
        "/api/v1/ping",
        {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        chat_body("sol"),
    )


def litellm_status(venv: Path) -> str | None:
    """None when the venv holds the pinned LiteLLM with its proxy; else why not."""
    exe = venv / "bin" / "litellm"
    if not exe.exists():
        log = venv.with_name(venv.name + "-install.log")
        why = f"no LiteLLM proxy at {exe}"
        if log.exists():
            why += " (the install's log ends: " + " | ".join(log.read_text().splitlines()[-3:])
            why += ")"
        return why + "; `make bench-gateway` installs it"
    import subprocess

    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m;"
         "print(m.version('litellm')); import litellm.proxy.proxy_server"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    version = out.stdout.strip().splitlines()[0] if out.stdout.strip() else "?"
    if version in LITELLM_COMPROMISED:
        return f"LiteLLM {version} in {venv} is a compromised release: not run"
    if out.returncode != 0:
        return f"LiteLLM's proxy does not import in {venv}: {out.stderr.strip()[-300:]}"
    if version != LITELLM_VERSION:
        print(f"note: {venv} holds LiteLLM {version}, not the pinned {LITELLM_VERSION}")
    return None


def start_litellm(venv: Path, workers: int) -> tuple[ServiceProcess, Target]:
    folder = owned_tempdir("litellm")
    config = folder / "config.yaml"
    # JSON is YAML: no yaml package needed here.
    config.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": "sol",
                        "litellm_params": {
                            "model": "openai/sol",
                            "api_key": "sk-unused",
                            "mock_response": MOCK_REPLY,
                        },
                    }
                ],
                "general_settings": {"master_key": MASTER_KEY},
                "litellm_settings": {"telemetry": False, "drop_params": True},
            }
        )
    )
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "PYTEST_", "LITELLM", "VIRTUAL_ENV"))
    }
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # no download at start
        LITELLM_LOG="ERROR",
        LITELLM_TELEMETRY="False",
        HOME=str(folder),  # whatever it caches stays in the temp folder
    )
    proc = ServiceProcess(
        [
            str(venv / "bin" / "litellm"),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            str(workers),
        ],  # fmt: skip
        env=env,
        name="litellm",
        log_path=folder / "litellm.log",
        cwd=folder,
    )
    return proc, Target(
        "litellm",
        f"http://127.0.0.1:{port}",
        proc.pgid,
        "/chat/completions",
        "/health/liveliness",
        {"Authorization": f"Bearer {MASTER_KEY}", "Content-Type": "application/json"},
        chat_body("sol"),
    )


def wait_up(proc: ServiceProcess, target: Target, timeout: float) -> None:
    """Until the bare endpoint answers 200 several times in a row (every worker up)."""
    import urllib.request

    deadline = time.monotonic() + timeout
    ok = 0
    while ok < 10:
        if proc.poll() is not None:
            raise RuntimeError(f"{target.side} exited:\n{proc.log_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{target.side} not up in {timeout:g} s:\n{proc.log_text()[-3000:]}")
        try:
            with urllib.request.urlopen(target.base + target.bare_path, timeout=2) as r:
                ok = ok + 1 if r.status == 200 else 0
        except OSError:
            ok = 0
            time.sleep(0.3)


def probe(target: Target) -> None:
    """One chat completion: it must answer 200 with a reply; prints what came back and
    how many processes serve it."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        target.base + target.chat_path, data=target.body, headers=target.headers
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            reply = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raise SystemExit(
            f"{target.side} {target.chat_path}: {exc.code} {exc.read()[:500]!r}"
        ) from None
    text = reply["choices"][0]["message"]["content"]
    print(
        f"{target.side}: {len(group_pids(target.pgid))} processes; a reply: model "
        f"{reply.get('model')}, {reply['usage']['completion_tokens']} completion tokens, "
        f"{text!r}",
        flush=True,
    )


# --- the load generator -----------------------------------------------------------------


@dataclass
class Measure:
    side: str
    what: str  # "chat" | "bare"
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    cpu: float = 0.0  # the server's CPU seconds (all its processes)
    client_cpu: float = 0.0  # the load generator's

    @property
    def ok(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.ok / self.seconds

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies) * 1000 if self.latencies else float("nan")

    @property
    def p90_ms(self) -> float:
        lat = sorted(self.latencies)
        return lat[int(0.9 * (len(lat) - 1))] * 1000 if lat else float("nan")

    @property
    def cpu_ms(self) -> float:
        return self.cpu * 1000 / self.ok if self.ok else float("nan")

    @property
    def client_cpu_ms(self) -> float:
        return self.client_cpu * 1000 / self.ok if self.ok else float("nan")


async def closed_loop(target: Target, what: str, clients: int, seconds: float) -> Measure:
    import aiohttp

    chat = what == "chat"
    path = target.chat_path if chat else target.bare_path
    url = target.base + path
    headers = target.headers if chat else {}
    m = Measure(target.side, what, clients, seconds)
    shown = 0

    async def one_client(session: aiohttp.ClientSession, stop: float) -> None:
        nonlocal shown
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                if chat:
                    async with session.post(url, data=target.body, headers=headers) as r:
                        text = await r.read()
                        status = r.status
                else:
                    async with session.get(url) as r:
                        text = await r.read()
                        status = r.status
            except (TimeoutError, aiohttp.ClientError) as exc:
                status, text = type(exc).__name__, str(exc).encode()
            dt = time.perf_counter() - t0
            if status == 200:
                m.latencies.append(dt)
            else:
                m.errors[str(status)] = m.errors.get(str(status), 0) + 1
                if shown < 3:
                    shown += 1
                    print(f"  !! {target.side} {path}: {status} {text[:300]!r}", flush=True)

    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        cpu0, client0 = cpu_seconds(target.pgid), time.process_time()
        t0 = time.monotonic()
        await asyncio.gather(*(one_client(session, t0 + seconds) for _ in range(clients)))
        m.seconds = time.monotonic() - t0  # the last answers land after the stop time
        m.cpu = cpu_seconds(target.pgid) - cpu0
        m.client_cpu = time.process_time() - client0
    return m


def measure(target: Target, what: str, clients: int, seconds: float) -> Measure:
    return asyncio.run(closed_loop(target, what, clients, seconds))


# --- report -----------------------------------------------------------------------------


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    values = [v for v in values if v == v]
    if not values:
        return "-"
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}-{fmt.format(max(values))}]"
    )


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


LABEL = {
    ("ours", "chat"): "POST /v1/chat/completions",
    ("ours", "bare"): "GET /api/v1/ping",
    ("litellm", "chat"): "POST /chat/completions",
    ("litellm", "bare"): "GET /health/liveliness",
}


def report(results: list[Measure], sides: list[str], clients: list[int]) -> dict:
    def runs(side: str, what: str, n: int) -> list[Measure]:
        return [m for m in results if (m.side, m.what, m.clients) == (side, what, n)]

    print("\nmedian [min-max] over rounds")
    print(
        f"{'what':<10} {'clients':>7}  {'side':<8} {'endpoint':<26} {'req/s':>18} "
        f"{'median ms':>20} {'P90 ms':>20} {'CPU ms/req':>18} {'client CPU':>18}"
    )
    summary: dict = {}
    for what in ("chat", "bare"):
        for n in clients:
            for side in sides:
                rs = runs(side, what, n)
                summary[(side, what, n)] = {
                    "rps": [m.rps for m in rs],
                    "median_ms": [m.median_ms for m in rs],
                    "p90_ms": [m.p90_ms for m in rs],
                }
                print(
                    f"{what:<10} {n:>7}  {side:<8} {LABEL[side, what]:<26} "
                    f"{spread([m.rps for m in rs]):>18} "
                    f"{spread([m.median_ms for m in rs], '{:.2f}'):>20} "
                    f"{spread([m.p90_ms for m in rs], '{:.2f}'):>20} "
                    f"{spread([m.cpu_ms for m in rs], '{:.2f}'):>18} "
                    f"{spread([m.client_cpu_ms for m in rs], '{:.2f}'):>18}"
                )
    if "litellm" in sides:
        print("\nratio ours / LiteLLM (per round, then median [min-max])")
        for what in ("chat", "bare"):
            for n in clients:
                ours, theirs = runs("ours", what, n), runs("litellm", what, n)
                thr = [a.rps / b.rps for a, b in zip(ours, theirs, strict=True) if b.rps]
                lat = [a.median_ms / b.median_ms for a, b in zip(ours, theirs, strict=True) if b.ok]
                print(
                    f"  {what:<5} {n} client{'s' if n > 1 else ' '}: throughput "
                    f"{spread(thr, '{:.2f}')}, median latency {spread(lat, '{:.2f}')}"
                )
    print("\ngoals (issue 29)")

    def goal(text: str, met: bool | None) -> None:
        print(f"  {text}: {'-' if met is None else 'met' if met else 'NOT met'}")

    top = max(clients)
    if "litellm" in sides:
        ours = runs("ours", "chat", top)
        theirs = runs("litellm", "chat", top)
        ratio = med([a.rps / b.rps for a, b in zip(ours, theirs, strict=True) if b.rps])
        goal(
            f"chat, {top} clients, ours >= LiteLLM in the same run (ratio {ratio:.2f})", ratio >= 1
        )
    if 1 in clients:
        chat1 = med([m.median_ms for m in runs("ours", "chat", 1)])
        bare1 = med([m.median_ms for m in runs("ours", "bare", 1)])
        goal(
            f"chat, 1 client, median <= bare + 5 ms ({chat1:.2f} vs {bare1:.2f} ms: "
            f"+{chat1 - bare1:.2f})",
            chat1 - bare1 <= 5,
        )
        goal(f"bare, 1 client, median <= 1.5 ms ({bare1:.2f} ms)", bare1 <= 1.5)
    bare_top = med([m.rps for m in runs("ours", "bare", top)])
    goal(f"bare, {top} clients, >= 1,000 req/s ({bare_top:.0f})", bare_top >= 1000)
    return summary


def chart(summary: dict, sides: list[str], clients: list[int], path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no chart: matplotlib is not installed)")
        return
    rows = [(what, n) for what in ("chat", "bare") for n in clients]
    colors = {"ours": "#4c72b0", "litellm": "#dd8452"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(sides)
    for ax, key, unit in ((axes[0], "rps", "req/s"), (axes[1], "median_ms", "median ms")):
        for i, side in enumerate(sides):
            vals = [summary[(side, w, n)][key] for w, n in rows]
            mids = [med(v) for v in vals]
            lo = [m - min(v) for m, v in zip(mids, vals, strict=True)]
            hi = [max(v) - m for m, v in zip(mids, vals, strict=True)]
            xs = [j + (i - (len(sides) - 1) / 2) * width for j in range(len(rows))]
            ax.bar(xs, mids, width, yerr=[lo, hi], capsize=3, label=side, color=colors[side])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([f"{w}\n{n} client{'s' if n > 1 else ''}" for w, n in rows])
        ax.set_ylabel(unit)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


# --- main -------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--seconds", type=float, default=5, help="per measurement")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8], help="connections")
    ap.add_argument("--workers", type=int, default=2, help="web workers, each side")
    ap.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="PostgreSQL server (the database part is ignored: a throwaway one is made)",
    )
    ap.add_argument(
        "--redis-url", default="", help="Redis for ours; default: a throwaway redis-server"
    )
    ap.add_argument("--litellm-venv", type=Path, default=DEFAULT_LITELLM_VENV)
    ap.add_argument("--no-litellm", action="store_true", help="measure our side only")
    ap.add_argument(
        "--chart",
        type=Path,
        default=ROOT / "var" / "bench-gateway.png",
        help="PNG chart (matplotlib); '' for none",
    )
    args = ap.parse_args()
    try:
        import aiohttp  # noqa: F401  (the load generator)
    except ImportError:
        sys.exit("bench_gateway needs aiohttp: run it with the dev venv (make install)")
    args.litellm_venv = args.litellm_venv.absolute()  # LiteLLM runs in a folder of its own
    # SIGTERM (make, a CI timeout) unwinds like Ctrl-C: the finally blocks stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    why_not = "--no-litellm" if args.no_litellm else litellm_status(args.litellm_venv)
    if why_not:
        print(f"LiteLLM side skipped: {why_not}. Measuring ours only.", flush=True)
    sides = ["ours"] if why_not else ["ours", "litellm"]

    load0 = os.getloadavg()
    redis = database_url = None
    procs: list[ServiceProcess] = []
    results: list[Measure] = []
    try:
        if args.redis_url:
            broker = args.redis_url
        else:
            redis = RedisServer()
            broker = redis.url
        database_url = create_database(args.database_url)
        web, ours = start_ours(database_url, broker, args.workers)
        procs.append(web)
        targets = [ours]
        if not why_not:
            lite, theirs = start_litellm(args.litellm_venv, args.workers)
            procs.append(lite)
            targets.append(theirs)
        for proc, target in zip(procs, targets, strict=True):
            wait_up(proc, target, 180)
            probe(target)
        print("warming up ...", flush=True)
        for target in targets:
            for what in ("chat", "bare"):
                measure(target, what, max(args.clients), 1.0)
        print(
            f"{os.cpu_count()} cores; 1-min load before {load0[0]:.1f}; {args.rounds} rounds x "
            f"{args.seconds:g} s per measurement; {args.workers} web workers each side; "
            f"PostgreSQL {database_url.rsplit('@', 1)[-1]}, Redis {broker}",
            flush=True,
        )
        for rnd in range(args.rounds):
            order = targets if rnd % 2 == 0 else targets[::-1]
            for what in ("chat", "bare"):
                for n in args.clients:
                    for target in order:
                        m = measure(target, what, n, args.seconds)
                        results.append(m)
                        errs = f"  NON-200: {m.errors}" if m.errors else ""
                        print(
                            f"round {rnd + 1} {what:<4} {n:>2} clients {m.side:<8} "
                            f"{m.rps:7.0f} req/s  median {m.median_ms:7.2f} ms  "
                            f"P90 {m.p90_ms:7.2f} ms  CPU {m.cpu_ms:5.2f} ms/req "
                            f"(client {m.client_cpu_ms:4.2f}){errs}",
                            flush=True,
                        )
    finally:
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.stop(timeout=10)
        if database_url:
            with contextlib.suppress(Exception):
                drop_database(database_url)
        if redis:
            redis.cleanup()

    load1 = os.getloadavg()
    summary = report(results, sides, args.clients)
    print(f"\n1-min load average: {load0[0]:.1f} before, {load1[0]:.1f} after")
    if str(args.chart) not in ("", "."):
        chart(
            summary,
            sides,
            args.clients,
            args.chart,
            f"ours (gunicorn + {args.workers} uvicorn, PostgreSQL, Redis) vs LiteLLM "
            f"{LITELLM_VERSION} proxy ({args.workers} workers, mock model); "
            f"median [min-max] of {args.rounds} rounds",
        )
    bad = {f"{m.side} {m.what} {m.clients}": m.errors for m in results if m.errors}
    if bad:
        print(f"\nFAILED: requests that did not answer 200: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A soak of the quick start's own stack (issue 13, "Done when"): `make run` as a newcomer
runs it (SQLite, the embedded filesystem broker, web + worker + beat under deploy/run.sh,
tests/quickstart.py) under mixed load from several client threads for SOAK_SECONDS
(default 90): small jobs with idempotency keys (some repeated, some sent by three
clients at once, a few cancelled), a few small batches (one poisoned), paging through
every list to its end, bad inputs, quota and quote reads, someone else's ids; the worker
SIGKILLed midway.

Afterwards: no client saw a 5xx or a dropped connection, every job reaches a terminal
state (none lost), one job per idempotency key (none duplicated), every batch ends,
`manage.py ledger_check` exits 0, the stack still serves, and the worker log holds no
traceback. The offered load is modest (SOAK_JOBS_PER_SECOND, default 3): this is about
correctness, bench/ measures throughput. Progress lines and a summary are printed
(`pytest -s tests/test_soak.py` to watch)."""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from tests.quickstart import QuickStart
from tests.stack import multipart_file

pytestmark = pytest.mark.realparts

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "90"))
JOBS_PER_SECOND = float(os.environ.get("SOAK_JOBS_PER_SECOND", "3"))
DRAIN_SECONDS = float(os.environ.get("SOAK_DRAIN_SECONDS", "150"))
BATCHES = 4  # small batches over the soak, plus one poisoned

JOB_SHAPES = [
    {"model": "luna", "input_tokens": 200, "output_tokens": 50, "deadline_seconds": 3600},
    {"model": "sol", "input_tokens": 400, "output_tokens": 100, "deadline_seconds": 3600},
    {
        "model": "luna",
        "input_tokens": 1000,
        "output_tokens": 200,
        "turns": 2,
        "deadline_seconds": 900,
    },
]
JOB_TERMINAL = {"succeeded", "failed", "cancelled"}
BATCH_TERMINAL = {"completed", "failed", "expired", "cancelled"}
LISTS = [
    "/api/v1/jobs?limit=40",
    "/api/v1/jobs?status=succeeded&limit=100",
    "/api/v1/batches?limit=2",
    "/api/v1/files?limit=2",
    "/api/v1/notices?limit=5",
    "/api/v1/models/?limit=7",
]


class Client:
    """HTTP to the stack from many threads, every response's status counted (a dropped
    connection or timeout counts as "error"); the first few 5xx and errors kept."""

    def __init__(self, base: str, key: str):
        self.base, self.key = base, key
        self.lock = threading.Lock()
        self.statuses: collections.Counter = collections.Counter()
        self.by_route: collections.Counter = collections.Counter()
        self.failures: list[str] = []
        self.unexpected: list[str] = []

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        data: bytes | None = None,
        headers: dict | None = None,
        key: str | None = None,
        route: str | None = None,
    ) -> tuple[int | str, dict | None]:
        """(status, JSON body or None); `data` sends raw bytes, `key=""` no credentials."""
        key = self.key if key is None else key
        hdrs = {"Content-Type": "application/json"} if body is not None or data else {}
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        hdrs.update(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
        url = path if path.startswith("http") else self.base + path
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except OSError as e:  # refused, reset, timed out
            status, raw = "error", repr(e).encode()
        try:
            parsed = json.loads(raw) if raw and status != "error" else None
        except ValueError:
            parsed = None
        route = route or f"{method} {urllib.parse.urlsplit(path).path}"
        with self.lock:
            self.statuses[status] += 1
            self.by_route[(route, status)] += 1
            if (status == "error" or status >= 500) and len(self.failures) < 20:
                self.failures.append(f"{status} {method} {path}: {raw[:500]!r}")
        return status, parsed

    def expect(self, what: str, status, allowed, body=None) -> None:
        if status not in allowed:
            with self.lock:
                if len(self.unexpected) < 50:
                    self.unexpected.append(
                        f"{what}: {status} (expected {sorted(allowed)}) {str(body)[:300]}"
                    )

    def total(self) -> int:
        with self.lock:
            return sum(self.statuses.values())


class Ledger:
    """What the clients were told: jobs created, idempotency keys and the job each
    answered with, cancels, batches."""

    def __init__(self):
        self.lock = threading.Lock()
        self.created: dict[str, dict] = {}  # job id -> body
        self.by_key: dict[str, set] = collections.defaultdict(set)
        self.keys: list[tuple[str, dict]] = []
        self.replays = self.conflicts = 0
        self.cancelled: set[str] = set()
        self.batches: dict[str, str] = {}  # batch id -> "ok" | "poisoned"

    def job_ids(self) -> list[str]:
        with self.lock:
            return list(self.created)


def soak_job(client: Client, ledger: Ledger, rng: random.Random) -> None:
    """One submission: a fresh key (mostly) or one already used with the same body."""
    with ledger.lock:
        repeat = ledger.keys and rng.random() < 0.25
        key, body = rng.choice(ledger.keys[-30:]) if repeat else (None, None)
    if key is None:
        key, body = f"soak-{uuid.uuid4().hex}", dict(rng.choice(JOB_SHAPES))
        if rng.random() < 0.1:
            key = None  # some clients send no key at all
        else:
            with ledger.lock:
                ledger.keys.append((key, body))
    status, job = client.request(
        "POST",
        "/api/v1/jobs",
        body,
        headers={"Idempotency-Key": key} if key else None,
        route="POST /jobs" + (" (repeat key)" if repeat else ""),
    )
    client.expect("POST /jobs", status, {200, 202, 409} if key else {202}, job)
    if status not in (200, 202):
        if status == 409:
            with ledger.lock:
                ledger.conflicts += 1
        return
    with ledger.lock:
        if status == 202:
            assert job["id"] not in ledger.created, f"job {job['id']} created twice"
            ledger.created[job["id"]] = body
        else:
            ledger.replays += 1
        if key:
            ledger.by_key[key].add(job["id"])
    if status == 202 and rng.random() < 0.05:
        status, _ = client.request(
            "POST", f"/api/v1/jobs/{job['id']}/cancel", route="POST /jobs/{id}/cancel"
        )
        client.expect("cancel", status, {200, 409})
        if status == 200:
            with ledger.lock:
                ledger.cancelled.add(job["id"])


def race_key(client: Client, ledger: Ledger, rng: random.Random, n: int = 3) -> None:
    """`n` clients send one new idempotency key at the same moment: one job, the others
    replays or 409s."""
    key, body = f"race-{uuid.uuid4().hex}", dict(rng.choice(JOB_SHAPES))
    barrier, answers = threading.Barrier(n), []

    def send() -> None:
        barrier.wait(10)
        answers.append(
            client.request(
                "POST",
                "/api/v1/jobs",
                body,
                headers={"Idempotency-Key": key},
                route="POST /jobs (racing key)",
            )
        )

    racers = [threading.Thread(target=send) for _ in range(n)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    created = [job for status, job in answers if status == 202]
    for status, job in answers:
        client.expect("racing POST /jobs", status, {200, 202, 409}, job)
    if len(created) > 1:
        client.expect(f"racing key {key}: {len(created)} jobs created", 0, {})
    with ledger.lock:
        ledger.conflicts += sum(1 for status, _ in answers if status == 409)
        ledger.replays += sum(1 for status, _ in answers if status == 200)
        for status, job in answers:
            if status == 202:
                ledger.created[job["id"]] = body
            if status in (200, 202):
                ledger.by_key[key].add(job["id"])


def page_through(client: Client, path: str) -> int:
    """Follow `next` to the end of a list; each item seen once. The number of items."""
    seen: set = set()
    url, pages = path, 0
    while url:
        status, body = client.request("GET", url, route=f"GET {path.split('?')[0]} (pages)")
        client.expect(f"GET {url}", status, {200})
        if status != 200:
            return len(seen)
        ids = [item.get("id") or item.get("slug") for item in body["data"]]
        doubled = seen.intersection(ids)
        if doubled:
            client.expect(f"{path}: items seen twice while paging {sorted(doubled)[:3]}", 0, {})
        seen.update(ids)
        pages += 1
        url = body.get("next") if body.get("has_more") else None
        if pages > 1000:
            client.expect(f"{path}: more than 1000 pages", 0, {})
            break
    return len(seen)


def batch_lines(n: int, rng: random.Random) -> bytes:
    return b"\n".join(
        json.dumps(
            {
                "custom_id": f"soak-{i}",
                "method": "POST",
                "url": "/v1/jobs",
                "body": rng.choice(JOB_SHAPES) | {"model": "luna"},
            }
        ).encode()
        for i in range(n)
    )


# A batch a careless or hostile client sends: a NUL in a custom_id, a bare NaN, a line
# nested 50,000 deep (issue 13: each once left its batch validating forever and stopped
# the sweep for every other account's batches).
POISON = b"\n".join(
    [
        b'{"custom_id": "ok-1", "method": "POST", "url": "/v1/jobs", "body": '
        b'{"model": "luna", "input_tokens": 200, "output_tokens": 50}}',
        b'{"custom_id": "nul\\u0000", "method": "POST", "url": "/v1/jobs", "body": '
        b'{"model": "luna", "input_tokens": 200, "output_tokens": 50}}',
        b'{"custom_id": "nan", "method": "POST", "url": "/v1/jobs", "body": '
        b'{"model": "luna", "input_tokens": NaN, "output_tokens": 50}}',
        b'{"custom_id": "deep", "body": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    ]
)


def soak_batch(client: Client, ledger: Ledger, data: bytes, kind: str) -> None:
    body, content_type = multipart_file(data, f"soak-{kind}.jsonl")
    status, f = client.request(
        "POST",
        "/api/v1/files",
        data=body,
        headers={"Content-Type": content_type},
        route="POST /files",
    )
    client.expect(f"upload {kind}", status, {201} if kind == "ok" else {201, 400})
    if status != 201:
        return
    status, batch = client.request(
        "POST",
        "/api/v1/batches",
        {"input_file_id": f["id"], "endpoint": "/v1/jobs", "completion_window": "24h"},
        route="POST /batches",
    )
    client.expect(f"create {kind} batch", status, {202} if kind == "ok" else {202, 400})
    if status == 202:
        with ledger.lock:
            ledger.batches[batch["id"]] = kind


def bad_requests(other_job: str, other_file: str) -> list[tuple]:
    """(method, path, body bytes | None, headers, key, allowed statuses): inputs a careless
    or hostile client sends; each a 4xx (OPTIONS a 200), never a 5xx."""
    forged = "bz1hYmM="  # base64 of "o=abc": an offset that is no number
    deep = b"[" * 100_000 + b"]" * 100_000
    job = {"model": "luna", "input_tokens": 200, "output_tokens": 50}

    def raw(d: dict) -> bytes:
        return json.dumps(d).encode()

    bad = [
        ("GET", f"/api/v1/jobs?cursor={forged}", None, {}, None, {400}),
        ("GET", f"/api/v1/batches?cursor={forged}", None, {}, None, {400}),
        ("GET", f"/api/v1/files?cursor={forged}", None, {}, None, {400}),
        ("GET", f"/api/v1/notices?cursor={forged}", None, {}, None, {400}),
        ("GET", f"/api/v1/models/?cursor={forged}", None, {}, None, {400}),
        ("GET", "/api/v1/jobs?cursor=cD0yMDI2LTEzLTQ1", None, {}, None, {400}),  # p=2026-13-45
        ("GET", "/api/v1/jobs?model=%00", None, {}, None, {400}),
        ("GET", "/api/v1/notices?model=%00", None, {}, None, {400}),
        ("GET", "/api/v1/models/?family=%00", None, {}, None, {400}),
        ("GET", "/api/v1/models/%00/", None, {}, None, {400, 404}),
        ("GET", "/api/v1/files/%00", None, {}, None, {400, 404}),
        ("GET", "/api/v1/files/%00/content", None, {}, None, {400, 404}),
        ("GET", "/api/v1/models/?retiring_within_days=99999999", None, {}, None, {400}),
        ("GET", "/api/v1/jobs?status=bogus", None, {}, None, {400}),
        ("GET", "/api/v1/jobs?limit=abc", None, {}, None, {200, 400}),
        ("POST", "/api/v1/jobs", deep, {}, None, {400}),
        ("POST", "/api/v1/quotes", deep, {}, None, {400}),
        ("POST", "/api/v1/batches", deep, {}, None, {400}),
        ("POST", "/api/v1/jobs", b'{"model": "luna", "input_tokens": NaN}', {}, None, {400}),
        ("POST", "/api/v1/jobs", raw(job | {"input_tokens": -5}), {}, None, {400}),
        ("POST", "/api/v1/jobs", raw(job | {"input_tokens": "many"}), {}, None, {400}),
        ("POST", "/api/v1/jobs", b'{"model": "luna", "input_tokens": 1e400}', {}, None, {400}),
        ("POST", "/api/v1/jobs", raw(job | {"deadline_seconds": 10**30}), {}, None, {400}),
        ("POST", "/api/v1/jobs", raw(job | {"model": "gpt-9"}), {}, None, {400, 404}),
        ("POST", "/api/v1/jobs", raw(job | {"prompt": "a\x00b"}), {}, None, {400}),
        ("POST", "/api/v1/jobs", b"{not json", {}, None, {400}),
        ("POST", "/api/v1/jobs", raw(job), {"Idempotency-Key": "k" * 300}, None, {400}),
        ("POST", "/api/v1/quotes", raw(job | {"output_tokens": -1}), {}, None, {400}),
        ("POST", "/api/v1/batches", raw({"input_file_id": "file-nope"}), {}, None, {400, 404}),
        ("POST", "/api/v1/batches", raw({"input_file_id": other_file}), {}, None, {400, 404}),
        ("GET", f"/api/v1/jobs/{other_job}", None, {}, None, {404}),
        ("POST", f"/api/v1/jobs/{other_job}/cancel", None, {}, None, {404}),
        ("GET", f"/api/v1/files/{other_file}", None, {}, None, {404}),
        ("GET", f"/api/v1/files/{other_file}/content", None, {}, None, {404}),
        ("GET", f"/api/v1/batches/{uuid.uuid4()}", None, {}, None, {404}),
        ("GET", "/api/v1/jobs/not-a-uuid", None, {}, None, {404}),
        ("GET", "/api/v1/nope", None, {}, None, {404}),
        ("POST", "/api/v1/nope", raw({}), {}, None, {404}),
        ("DELETE", "/api/v1/jobs", None, {}, None, {405}),
        ("OPTIONS", "/api/v1/jobs", None, {}, None, {200}),
        ("GET", "/api/v1/jobs", None, {}, "", {401}),
        ("GET", "/api/v1/jobs", None, {}, "mlr_not-a-key", {401}),
    ]
    return bad


def run_soak(qs: QuickStart, other_key: str) -> tuple[Client, Ledger, dict]:
    client, ledger = Client(qs.base, qs.key), Ledger()
    # Someone else's job and file, to ask for by id.
    other = Client(qs.base, other_key)
    _, other_job = other.request("POST", "/api/v1/jobs", JOB_SHAPES[0])
    body, content_type = multipart_file(batch_lines(2, random.Random(0)), "other.jsonl")
    _, other_file = other.request(
        "POST", "/api/v1/files", data=body, headers={"Content-Type": content_type}
    )
    assert other_job and other_file, (other_job, other_file)
    bad = bad_requests(other_job["id"], other_file["id"])

    stop = threading.Event()
    started = time.monotonic()
    counts = collections.Counter()
    errors: list[BaseException] = []

    def loop(name: str, step, pause: float) -> None:
        rng = random.Random(name)
        try:
            while not stop.is_set():
                step(rng)
                counts[name] += 1
                stop.wait(pause)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            raise

    def submitter(name: str, offset: float):
        def run() -> None:
            rng, period = random.Random(offset), 2 / JOBS_PER_SECOND
            try:
                for i in itertools.count():
                    due = started + offset + i * period
                    if stop.wait(max(0.0, due - time.monotonic())):
                        return
                    soak_job(client, ledger, rng)
                    counts[name] += 1
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                raise

        return run

    def pager(rng) -> None:
        for path in LISTS:
            page_through(client, path)

    def reader(rng) -> None:
        status, _ = client.request("GET", "/api/v1/quota")
        client.expect("quota", status, {200})
        status, quote = client.request("POST", "/api/v1/quotes", rng.choice(JOB_SHAPES))
        client.expect("quote", status, {200}, quote)
        ids = ledger.job_ids()
        if ids:
            status, _ = client.request(
                "GET", f"/api/v1/jobs/{rng.choice(ids)}", route="GET /jobs/{id}"
            )
            client.expect("job", status, {200})
        with ledger.lock:
            batch_ids = list(ledger.batches)
        if batch_ids:
            status, _ = client.request(
                "GET", f"/api/v1/batches/{rng.choice(batch_ids)}", route="GET /batches/{id}"
            )
            client.expect("batch", status, {200})
        status, _ = client.request("GET", "/api/v1/ping")
        client.expect("ping", status, {200})

    bad_cycle = itertools.cycle(bad)

    def prober(rng) -> None:
        method, path, data, headers, key, allowed = next(bad_cycle)
        route = f"bad {method} {path[:60]}"
        status, body = client.request(
            method, path, data=data, headers=headers, key=key, route=route
        )
        client.expect(route, status, allowed, body)

    batch_plan = iter(["ok", "poisoned", *["ok"] * (BATCHES - 1)])

    def batcher(rng) -> None:
        kind = next(batch_plan, None)
        if kind:
            soak_batch(client, ledger, batch_lines(10, rng) if kind == "ok" else POISON, kind)

    def racer(rng) -> None:
        race_key(client, ledger, rng)

    threads = [
        threading.Thread(target=submitter("jobs-a", 0.0)),
        threading.Thread(target=submitter("jobs-b", 1 / JOBS_PER_SECOND)),
        threading.Thread(target=loop, args=("pages", pager, 1.0)),
        threading.Thread(target=loop, args=("reads", reader, 0.5)),
        threading.Thread(target=loop, args=("bad", prober, 0.25)),
        threading.Thread(target=loop, args=("races", racer, 5.0)),
        threading.Thread(target=loop, args=("batches", batcher, SOAK_SECONDS / (BATCHES + 1))),
    ]
    for t in threads:
        t.start()
    killed = False
    try:
        while (elapsed := time.monotonic() - started) < SOAK_SECONDS and not errors:
            if not killed and elapsed >= SOAK_SECONDS / 2:
                # Midway, the worker dies outright; run.sh restarts it. Load goes on.
                readies = qs.kill_worker()
                killed = True
                print(f"[soak {elapsed:5.1f}s] worker SIGKILLed", flush=True)
                qs.wait_worker_restarted(readies)
                print(f"[soak {time.monotonic() - started:5.1f}s] worker restarted", flush=True)
                continue
            time.sleep(min(10.0, SOAK_SECONDS - elapsed))
            with ledger.lock:
                made = len(ledger.created)
            print(
                f"[soak {time.monotonic() - started:5.1f}s] {client.total()} requests, "
                f"{made} jobs, statuses {dict(client.statuses)}",
                flush=True,
            )
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert killed, "the soak ended before the worker was killed"
    return client, ledger, {"seconds": time.monotonic() - started, **counts}


def drain(client: Client, path: str, active: list[str], seconds: float) -> None:
    """Wait until the account's list at `path` has nothing in the `active` statuses."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = 0
        for status in active:
            code, body = client.request(
                "GET", f"{path}?status={status}&limit=1", route=f"GET {path} (drain)"
            )
            left += 1 if code != 200 or body["data"] else 0
        if not left:
            return
        time.sleep(1)


def statuses_of(client: Client, path: str, ids) -> dict:
    """{id: status} read one by one (an HTTP status where the read fails)."""
    found = {}
    for i in ids:
        code, body = client.request("GET", f"{path}/{i}", route=f"GET {path}/{{id}} (final)")
        found[i] = body["status"] if code == 200 else f"HTTP {code}"
    return found


def all_items(client: Client, path: str) -> list[dict]:
    items, url = [], path
    while url:
        status, body = client.request("GET", url, route=f"GET {path.split('?')[0]} (final)")
        assert status == 200, (url, status, body)
        items += body["data"]
        url = body.get("next") if body.get("has_more") else None
    return items


@pytest.fixture
def quickstart(tmp_path):
    qs = QuickStart(
        tmp_path / "var",
        SIM_TIME_SCALE=200,  # otherwise the quick start's defaults
        API_THROTTLE_RATE="1000000/min",  # if throttling exists: the soak is not about it
    )
    try:
        yield qs
    finally:
        qs.close()
        qs.dump_logs(3000)


def test_quick_start_soak_under_mixed_load_with_a_worker_killed(quickstart):
    qs = quickstart
    qs.setup()
    other_key = json.loads(qs.manage("create_account", "soak-other", "--json", "--credits", "50"))[
        "api_key"
    ]
    qs.start()
    qs.wait_worker_and_beat()

    client, ledger, counts = run_soak(qs, other_key)
    soaked = counts["seconds"]

    # Zero lost: every job a client was told about reaches a terminal state.
    ids = ledger.job_ids()
    drain_started = time.monotonic()
    drain(client, "/api/v1/jobs", ["queued", "running"], DRAIN_SECONDS)
    drain(client, "/api/v1/batches", ["validating", "in_progress", "finalizing"], DRAIN_SECONDS)
    drained = time.monotonic() - drain_started
    job_status = statuses_of(client, "/api/v1/jobs", ids)
    batch_status = statuses_of(client, "/api/v1/batches", ledger.batches)
    outcome = collections.Counter(job_status.values())

    print(
        f"\nsoak: {soaked:.0f} s of load, {client.total()} requests "
        f"({client.total() / soaked:.1f}/s), {len(ids)} jobs created "
        f"({len(ids) / soaked:.2f}/s offered), {ledger.replays} idempotent replays, "
        f"{ledger.conflicts} concurrent-duplicate 409s, {len(ledger.cancelled)} cancelled; "
        f"drained in {drained:.0f} s; jobs {dict(outcome)}; batches "
        f"{ {b: (ledger.batches[b], s) for b, s in batch_status.items()} }; loops {counts}"
    )
    print("statuses:", dict(sorted(client.statuses.items(), key=str)))
    for (route, status), n in sorted(client.by_route.items(), key=str):
        print(f"  {status!s:>5} x{n:<5} {route}")

    assert not client.failures, "server errors or dropped connections:\n" + "\n".join(
        client.failures
    )
    assert not client.unexpected, "unexpected answers:\n" + "\n".join(client.unexpected)
    stuck = {i: s for i, s in job_status.items() if s not in JOB_TERMINAL}
    assert not stuck, f"{len(stuck)} jobs not finished after {DRAIN_SECONDS} s: {stuck}"
    wrong = {
        i: s
        for i, s in job_status.items()
        if s != ("cancelled" if i in ledger.cancelled else "succeeded")
    }
    assert not wrong, f"jobs that did not end as expected: {wrong}"
    assert all(s in BATCH_TERMINAL for s in batch_status.values()), batch_status
    for b, kind in ledger.batches.items():
        assert batch_status[b] == ("completed" if kind == "ok" else "failed"), (kind, b)
    assert sum(1 for k in ledger.batches.values() if k == "ok") == BATCHES

    # Zero duplicated: one job per idempotency key; the account holds exactly the jobs
    # the clients were told were created (plus the batches' requests, not jobs).
    doubled = {k: v for k, v in ledger.by_key.items() if len(v) != 1}
    assert not doubled, f"idempotency keys with several jobs: {doubled}"
    listed = [j["id"] for j in all_items(client, "/api/v1/jobs?limit=500")]
    assert len(listed) == len(set(listed)), "a job listed twice"
    assert set(listed) == set(ids), (
        f"jobs nobody was told about: {set(listed) - set(ids)}; "
        f"jobs told about but missing: {set(ids) - set(listed)}"
    )

    # The money adds up, and the stack still serves.
    report = qs.ledger()  # ledger_check --json; exits 1 (ManageError) on a mismatch
    assert report["ok"], report
    status, health = client.request("GET", "/api/v1/health")
    assert status == 200 and health["status"] == "ok", health
    assert qs.proc.poll() is None, "run.sh stopped"
    worker_log = qs.log("worker")
    assert "Unrecoverable" not in worker_log
    assert worker_log.count("Traceback") == 0, worker_log[-6000:]
    assert "Traceback" not in qs.log("run")
    # run.sh reported one worker exit (the one we killed) and no beat exit.
    exits = re.findall(r"^run\.sh: \S+ (\w+) exited with status", qs.log("run"), re.M)
    assert exits == ["worker"], exits

"""The service on throwaway servers (PostgreSQL, Redis; RabbitMQ as the broker if
asked) with gunicorn, Celery worker and beat processes: used by the end-to-end tests
and the jobs benchmark."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

from tests.realparts import (
    ServiceProcess,
    free_port,
    migrate_project,
    project_env,
    run_manage,
    start_beat,
    start_web,
    start_worker,
)

# A short task on the flagship: ~20 simulated seconds on Standard.
SMALL = {
    "model": "sol",
    "input_tokens": 2000,
    "output_tokens": 1000,
    "turns": 1,
    "tool_seconds": 0,
    "deadline_seconds": 3600,
    "tier": "standard",
}


def multipart_file(data: bytes, filename: str, purpose: str = "batch") -> tuple[bytes, str]:
    """The body and Content-Type of a POST /api/v1/files upload (multipart/form-data)."""
    boundary = "----stack" + uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'
            f'{purpose}\r\n--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{filename}"\r\nContent-Type: application/jsonl\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


class Stack:
    """The service on throwaway servers: web + worker(s) + beat."""

    def __init__(
        self,
        pg,
        redis,
        *,
        scale: float = 20.0,
        resend_after: float = 2.0,
        web_workers: int = 1,
        credits: str = "100",
        broker=None,
        extra_env: dict | None = None,
    ):
        # The broker is Redis unless another (a RabbitServer) is given; the cache (rate
        # limits, shared caches) stays on Redis either way, as in production.
        self.pg, self.redis = pg, redis
        self.broker = broker or redis
        db = f"jobs_{free_port()}"
        pg.create_database(db)
        self.env = project_env(
            pg.url(db),
            self.broker.url,
            CACHE_URL=redis.url,
            SIM_TIME_SCALE=scale,
            JOB_RESEND_AFTER_SECONDS=resend_after,
            JOB_SWEEP_SECONDS=1,
            DB_CONN_MAX_AGE=60,
            LOG_LEVEL="INFO",
            API_THROTTLE_RATE="off",  # end-to-end tests and benchmarks load one account
            **(extra_env or {}),
        )
        migrate_project(self.env, catalog=True)
        self.key = json.loads(
            run_manage(self.env, "create_account", "e2e", "--json", "--credits", credits)
        )["api_key"]
        self.web_workers = web_workers
        self.port = free_port()
        self.procs: list[ServiceProcess] = []
        self.web = self._start_web()
        self.workers: list[ServiceProcess] = []
        self.beat: ServiceProcess | None = None

    def _start_web(self) -> ServiceProcess:
        # As deploy/run.sh starts it: gunicorn with uvicorn workers (ASGI).
        web = start_web(self.env, self.port, workers=self.web_workers)
        self.procs.append(web)
        web.wait_ready(30)
        return web

    def start_worker(self, concurrency: int = 2, queues: str | None = None) -> ServiceProcess:
        """A worker on `queues` (default: all of them, as `make run` starts one)."""
        w = start_worker(self.env, concurrency=concurrency, queues=queues)
        self.procs.append(w)
        self.workers.append(w)
        return w.wait_ready(60)

    def start_beat(self) -> ServiceProcess:
        self.beat = start_beat(self.env)
        self.procs.append(self.beat)
        return self.beat.wait_ready(60)

    def close(self) -> None:
        for p in reversed(self.procs):
            p.kill()

    # --- HTTP -------------------------------------------------------------------------

    def call(self, method: str, path: str, body: dict | None = None, headers=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.key}",
                "Content-Type": "application/json",
                **(headers or {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def upload(self, data: bytes, filename: str = "batch.jsonl", purpose: str = "batch"):
        """POST /api/v1/files as multipart/form-data; (status, body)."""
        body, content_type = multipart_file(data, filename, purpose)
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1/files",
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.key}",
                "Content-Type": content_type,
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def download(self, file_id: str) -> bytes:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1/files/{file_id}/content",
            headers={"Authorization": f"Bearer {self.key}"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read()

    def submit(self, **fields) -> dict:
        code, body = self.call("POST", "/api/v1/jobs", SMALL | fields)
        assert code == 202, body
        return body

    def job(self, job_id: str) -> dict:
        return self.call("GET", f"/api/v1/jobs/{job_id}")[1]

    def wait_status(self, job_ids, statuses=("succeeded",), timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        seen = {}
        while time.monotonic() < deadline:
            seen = {j: self.job(j)["status"] for j in job_ids}
            if all(s in statuses for s in seen.values()):
                return seen
            time.sleep(0.3)
        raise AssertionError(f"not all {statuses} after {timeout} s: {seen}\n" + self.logs())

    def metrics(self) -> str:
        """GET /metrics (from loopback: no token needed), the Prometheus text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            return r.read().decode()

    def ledger(self) -> dict:
        return json.loads(run_manage(self.env, "ledger_check", "--json"))

    def spent(self) -> float:
        return float(self.call("GET", "/api/v1/quota")[1]["data"][0]["spent"])

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_text()[-3000:]}" for p in self.procs)

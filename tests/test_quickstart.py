"""`make run`'s service script on a bare machine: SQLite, filesystem broker, web +
worker + beat. Started for real in a temp folder, on a free port, then stopped."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def quickstart_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(
        VAR_DIR=str(tmp_path / "var"),
        PORT=str(free_port()),
        DJANGO_SETTINGS_MODULE="",
        SIM_TIME_SCALE="50",
        JOB_SWEEP_SECONDS="1",
    )
    env.pop("DJANGO_SETTINGS_MODULE")
    bin_dir = Path(sys.executable).parent
    env.update(PY=str(bin_dir / "python"), CELERY=str(bin_dir / "celery"))
    return env


def manage(env, *args) -> str:
    out = subprocess.run(
        [env["PY"], "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, json.loads(r.read())


def post_json(url: str, body: dict, key: str) -> dict:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def wait_succeeded(base: str, key: str, job_id: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with urllib.request.urlopen(
            urllib.request.Request(
                f"{base}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}
            ),
            timeout=5,
        ) as r:
            status = json.loads(r.read())["status"]
        if status == "succeeded":
            return
        assert time.monotonic() < deadline, f"job still {status}"
        time.sleep(0.5)


def worker_pid(run_sh_pid: int) -> int:
    """The Celery worker's main process: a child of run.sh (in a session of its own)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == run_sh_pid and b"worker" in cmdline and any(b"celery" in a for a in cmdline):
            return int(proc.name)
    raise AssertionError("no worker process under run.sh")


def test_run_script_serves_the_catalog_with_worker_and_beat(quickstart_env):
    env = quickstart_env
    manage(env, "migrate", "--noinput")
    assert "Catalog loaded" in manage(env, "loadcatalog")
    setup = manage(env, "demo_setup")
    assert "Demo admin created" in setup and "demo api key: mlr_" in setup
    run_log = Path(env["VAR_DIR"]) / "run.log"
    proc = subprocess.Popen(
        ["bash", "deploy/run.sh"],
        cwd=ROOT,
        env=env,
        stdout=run_log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{env['PORT']}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = get_json(f"{base}/api/v1/models/gpt-5.3-codex-spark/")
                break
            except OSError:
                assert proc.poll() is None, run_log.read_text()
                assert time.monotonic() < deadline, "the service did not come up in 60 s"
                time.sleep(0.5)
        assert status == 200
        assert body["status"] == "retired" and body["successor"] == "gpt-5.6-sol"
        assert get_json(f"{base}/api/v1/health")[1]["status"] == "ok"
        # Printed links and problem types name the port the service runs on.
        assert f"Admin:  {base}/admin/" in setup
        with pytest.raises(urllib.error.HTTPError) as missing:
            get_json(f"{base}/api/v1/models/gpt-9/")
        assert missing.value.code == 404
        assert json.loads(missing.value.read())["type"].startswith(f"{base}/problems/")
        # A job through the filesystem broker and the quick start's worker.
        key = next(line.split(": ", 1)[1] for line in setup.splitlines() if "demo api key" in line)
        job = post_json(
            f"{base}/api/v1/jobs",
            {"model": "sol", "input_tokens": 2000, "output_tokens": 1000, "deadline_seconds": 3600},
            key,
        )
        assert job["status"] == "queued"
        wait_succeeded(base, key, job["id"])
        log_dir = Path(env["VAR_DIR"]) / "log"
        deadline = time.monotonic() + 30
        while not (
            "ready." in (log_dir / "worker.log").read_text()
            and "beat: Starting" in (log_dir / "beat.log").read_text()
        ):
            assert time.monotonic() < deadline, "worker or beat did not start"
            time.sleep(0.5)
        # The filesystem broker's URL names a host: kombu has nothing to warn about.
        for log in [run_log, log_dir / "worker.log", log_dir / "beat.log"]:
            assert "No hostname was supplied" not in log.read_text(), log.name
        # A worker killed outright is reported on the console and started again (its log
        # appended to); jobs still run.
        os.kill(worker_pid(proc.pid), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not (
            "worker restarted" in run_log.read_text()
            and (log_dir / "worker.log").read_text().count("ready.") >= 2
        ):
            assert proc.poll() is None, "run.sh stopped when the worker died"
            assert time.monotonic() < deadline, "the worker was not restarted"
            time.sleep(0.5)
        assert "worker exited with status" in run_log.read_text()
        job = post_json(
            f"{base}/api/v1/jobs",
            {"model": "sol", "input_tokens": 200, "output_tokens": 50, "deadline_seconds": 3600},
            key,
        )
        wait_succeeded(base, key, job["id"])
        # SIGTERM to the process group stops everything within a few seconds.
        stopping = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.monotonic() - stopping < 10
    except Exception:
        # What the web server, worker and beat said, to see why.
        for log in [run_log, *sorted((Path(env["VAR_DIR"]) / "log").glob("*.log"))]:
            print(f"===== {log.name}\n{log.read_text()[-6000:]}")
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

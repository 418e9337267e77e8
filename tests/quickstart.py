"""The quick start's own stack, as `make run` starts it: migrate, loadcatalog, demo_setup,
then deploy/run.sh (web + Celery worker + beat on SQLite and the filesystem broker) on a
temp VAR_DIR and a free port, whatever DATABASE_URL / CELERY_BROKER_URL the test process
has. Used by tests/test_quickstart.py and tests/test_soak.py.

    qs = QuickStart(tmp_path / "var", SIM_TIME_SCALE=50)
    qs.setup()              # migrate, loadcatalog, demo_setup; qs.key is the demo API key
    qs.start()              # run.sh, until /api/v1/ping answers
    os.kill(qs.worker_pid(), signal.SIGKILL); qs.wait_worker_restarted()
    qs.close()              # SIGTERM to run.sh's group, SIGKILL if it lingers
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.realparts import BIN_DIR, ROOT, free_port, inherited_environ, run_manage


def quickstart_env(var_dir: str | Path, **extra) -> dict[str, str]:
    """os.environ without the database, broker and settings variables (the quick start's
    SQLite and filesystem broker under `var_dir`), a free PORT, and `extra` (a None value
    removes a variable)."""
    env = inherited_environ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
    env.update(
        VAR_DIR=str(var_dir),
        PORT=str(free_port()),
        PYTHONUNBUFFERED="1",
        PY=str(BIN_DIR / "python"),
        CELERY=str(BIN_DIR / "celery"),
    )
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def children_of(pid: int) -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every live process whose parent is `pid`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append((int(proc.name), cmdline))
    return found


class QuickStart:
    """`make run` on a temp VAR_DIR: see the module docstring."""

    def __init__(self, var_dir: str | Path, *, root: str | Path = ROOT, **extra_env):
        self.root = Path(root)  # the checkout run.sh runs from (a fresh copy in a test)
        self.var_dir = Path(var_dir)
        self.env = quickstart_env(self.var_dir, **extra_env)
        self.base = f"http://127.0.0.1:{self.env['PORT']}"
        self.log_dir = self.var_dir / "log"
        self.run_log = self.var_dir / "run.log"
        self.proc: subprocess.Popen | None = None
        self.key: str | None = None

    def manage(self, *args: str, timeout: float = 120) -> str:
        return run_manage(self.env, *args, timeout=timeout, cwd=self.root)

    def setup(self) -> str:
        """What `make run` does before run.sh; returns demo_setup's output (self.key is
        the demo account's API key)."""
        self.manage("migrate", "--noinput")
        self.manage("loadcatalog")
        out = self.manage("demo_setup")
        self.key = next(
            line.split(": ", 1)[1].strip() for line in out.splitlines() if "demo api key" in line
        )
        return out

    def start(self, timeout: float = 60, argv: list[str] | None = None) -> QuickStart:
        """deploy/run.sh (or `argv` that runs it, e.g. make) in a session of its own, its
        console in var/run.log; returns once the web server answers /api/v1/ping."""
        self.var_dir.mkdir(parents=True, exist_ok=True)
        with self.run_log.open("ab") as console:
            self.proc = subprocess.Popen(
                argv or ["bash", "deploy/run.sh"],
                cwd=self.root,
                env=self.env,
                stdout=console,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.base}/api/v1/ping", timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            assert self.proc.poll() is None, self.run_log.read_text()
            assert time.monotonic() < deadline, f"the service did not come up in {timeout} s"
            time.sleep(0.5)

    def log(self, name: str) -> str:
        """var/run.log ("run") or var/log/<name>.log ("worker", "beat"); "" if absent."""
        path = self.run_log if name == "run" else self.log_dir / f"{name}.log"
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, name: str, done, timeout: float, what: str) -> str:
        """Poll log `name` until `done(text)`; fails if run.sh stops or after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log(name)
            if done(text):
                return text
            assert self.proc is not None and self.proc.poll() is None, (
                f"run.sh stopped while waiting for {what}"
            )
            assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
            time.sleep(0.5)

    def wait_worker_and_beat(self, timeout: float = 30) -> None:
        self.wait_log("worker", lambda t: "ready." in t, timeout, "the worker to start")
        self.wait_log("beat", lambda t: "beat: Starting" in t, timeout, "beat to start")

    def worker_pid(self) -> int:
        """The Celery worker's main process: a child of run.sh (in a session of its own)."""
        assert self.proc is not None
        for pid, argv in children_of(self.proc.pid):
            if b"worker" in argv and any(b"celery" in a for a in argv):
                return pid
        raise AssertionError("no worker process under run.sh")

    def kill_worker(self) -> int:
        """SIGKILL the worker's main process (run.sh reaps its pool and restarts it); the
        number of times the worker has been ready so far, for wait_worker_restarted."""
        readies = self.log("worker").count("ready.")
        os.kill(self.worker_pid(), signal.SIGKILL)
        return readies

    def wait_worker_restarted(self, readies_before: int, timeout: float = 60) -> None:
        self.wait_log(
            "run", lambda t: "worker restarted" in t, timeout, "run.sh to restart the worker"
        )
        self.wait_log(
            "worker",
            lambda t: t.count("ready.") > readies_before,
            timeout,
            "the restarted worker to be ready",
        )

    def stop(self, timeout: float = 15) -> float:
        """SIGTERM to run.sh's process group; the seconds it took to stop."""
        assert self.proc is not None
        stopping = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=timeout)
        return time.monotonic() - stopping

    def close(self) -> None:
        """Stop whatever still runs (SIGTERM, SIGKILL after 20 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def dump_logs(self, chars: int = 6000) -> None:
        """Print the end of what the web server, worker and beat said (shown on failure)."""
        for path in [self.run_log, *sorted(self.log_dir.glob("*.log"))]:
            try:
                print(f"===== {path.name}\n{path.read_text(errors='replace')[-chars:]}")
            except OSError:
                pass

    def ledger(self) -> dict:
        return json.loads(self.manage("ledger_check", "--json"))

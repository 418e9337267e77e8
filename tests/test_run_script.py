"""deploy/run.sh (the quick start's supervisor) with stand-ins for Celery and the web
server, so it runs in seconds: logs appended and rotated, a crashed worker restarted and
reported, SIGTERM stopping everything (issue 13: a worker crash stopped web and beat too,
a restart truncated worker.log, and SIGTERM left the worker in warm shutdown for 45 s).
tests/test_quickstart.py runs it with the real processes."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Stands in for `celery -A deploy worker|beat ...`: counts its runs, crashes on the first
# worker run when FAKE_CRASH is set, else runs with a child (like the worker's pool).
FAKE_CELERY = """#!/usr/bin/env bash
role=$3
n=$(( $(cat "$FAKE_DIR/$role.count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$FAKE_DIR/$role.count"
echo $$ >> "$FAKE_DIR/pids"
echo "$role run $n started"
if [[ $role == worker && $n == 1 && -n ${FAKE_CRASH:-} ]]; then
  echo "Unrecoverable error: JSONDecodeError('Expecting value')"
  exit 1
fi
[[ -n ${FAKE_IGNORE_TERM:-} ]] && trap '' TERM
sleep 300 &
echo $! >> "$FAKE_DIR/pids"
while :; do wait; sleep 0.1; done
"""
# Stands in for `python manage.py runserver ...`.
FAKE_PY = """#!/usr/bin/env bash
echo $$ >> "$FAKE_DIR/pids"
echo 1 > "$FAKE_DIR/web.count"
echo $$ > "$FAKE_DIR/web.pid"
exec sleep 300
"""


@pytest.fixture
def fake_env(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    for name, text in [("celery", FAKE_CELERY), ("python", FAKE_PY)]:
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    env = dict(os.environ)
    env.update(
        VAR_DIR=str(tmp_path / "var"),
        PY=str(fake / "python"),
        CELERY=str(fake / "celery"),
        FAKE_DIR=str(fake),
        STOP_GRACE_SECONDS="2",
        LOG_MAX_BYTES="1000",
    )
    return env


def start(env) -> tuple[subprocess.Popen, Path]:
    console = Path(env["FAKE_DIR"]) / "console.txt"
    proc = subprocess.Popen(
        ["bash", "deploy/run.sh"],
        cwd=ROOT,
        env=env,
        stdout=console.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, console


def wait_for(predicate, seconds: float, what: str, console: Path) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what}; console:\n{console.read_text()}"
        time.sleep(0.1)


def count(env, role: str) -> int:
    path = Path(env["FAKE_DIR"]) / f"{role}.count"
    return int(path.read_text().strip() or 0) if path.exists() else 0


def started_pids(env) -> list[int]:
    return [int(p) for p in (Path(env["FAKE_DIR"]) / "pids").read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its new parent to reap it is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def stop_and_check(proc: subprocess.Popen, env, console: Path, within: float) -> None:
    """SIGTERM to the process group (as the issue did): everything gone in `within` s."""
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"run.sh still running {within}s after SIGTERM:\n{console.read_text()}")
    wait_for(
        lambda: not [p for p in started_pids(env) if alive(p)],
        within - (time.monotonic() - started),
        "a process outlived run.sh",
        console,
    )


def cleanup(env) -> None:
    path = Path(env["FAKE_DIR"]) / "pids"
    for pid in [int(p) for p in path.read_text().split()] if path.exists() else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_crashed_worker_is_reported_and_restarted_and_logs_are_kept(fake_env):
    env = dict(fake_env, FAKE_CRASH="1")
    log_dir = Path(env["VAR_DIR"]) / "log"
    log_dir.mkdir(parents=True)
    (log_dir / "worker.log").write_text("what the previous run said\n")
    (log_dir / "beat.log").write_text("x" * 2000 + "\n")  # over LOG_MAX_BYTES: rotated
    proc, console = start(env)
    try:
        wait_for(lambda: count(env, "worker") == 2, 10, "the worker was not restarted", console)
        wait_for(lambda: "worker restarted" in console.read_text(), 5, "no restart line", console)
        assert proc.poll() is None, "run.sh stopped when the worker crashed"
        assert count(env, "beat") == 1 and count(env, "web") == 1  # not restarted
        said = console.read_text()
        assert "worker exited with status 1" in said
        assert "Unrecoverable error: JSONDecodeError" in said  # the end of its log, shown
        worker_log = (log_dir / "worker.log").read_text()
        assert worker_log.startswith("what the previous run said\n")
        assert worker_log.index("worker run 1 started") < worker_log.index("worker run 2 started")
        assert "worker exited with status 1" in worker_log
        assert (log_dir / "beat.log.1").read_text() == "x" * 2000 + "\n"
        assert "beat run 1 started" in (log_dir / "beat.log").read_text()
        stop_and_check(proc, env, console, within=5)
    finally:
        cleanup(env)


def test_sigterm_stops_everything_within_the_grace_even_a_stuck_worker(fake_env):
    env = dict(fake_env, FAKE_IGNORE_TERM="1")  # like a worker stuck in warm shutdown
    proc, console = start(env)
    try:
        wait_for(
            lambda: count(env, "worker") and count(env, "beat") and count(env, "web"),
            10,
            "not all three started",
            console,
        )
        time.sleep(0.3)  # the stand-ins are past their `trap`
        started = time.monotonic()
        stop_and_check(proc, env, console, within=6)
        assert time.monotonic() - started < 5
        assert "still running after 2s: killed" in console.read_text()
        assert proc.returncode == 0
    finally:
        cleanup(env)


def test_the_web_server_exiting_stops_everything(fake_env):
    env = dict(fake_env)
    proc, console = start(env)
    try:
        wait_for(lambda: count(env, "web") and count(env, "worker"), 10, "not started", console)
        web_pid = int((Path(env["FAKE_DIR"]) / "web.pid").read_text())
        os.kill(web_pid, signal.SIGKILL)
        proc.wait(timeout=6)
        assert proc.returncode == 1
        assert "the web server exited" in console.read_text()
        wait_for(lambda: not [p for p in started_pids(env) if alive(p)], 3, "left behind", console)
    finally:
        cleanup(env)

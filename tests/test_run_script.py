"""deploy/run.sh (the quick start's supervisor) with stand-ins for Celery and the web
server, so it runs in seconds: logs appended and rotated, a crashed worker restarted and
reported, SIGTERM stopping everything (issue 13: a worker crash stopped web and beat too,
a restart truncated worker.log, and SIGTERM left the worker in warm shutdown for 45 s).
tests/test_quickstart.py runs it with the real processes.

Issue 23: stopping left orphans (a second TERM during the stop killed run.sh before its
services, and nothing killed them when run.sh was SIGKILLed). The last tests start the
real stack as `make run` does (make, run.sh, gunicorn + uvicorn workers, a Celery worker
with its pool, beat) and stop it four ways; every process carries RUNSH_TEST_TOKEN in its
environment, so /proc shows whatever is left."""

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.quickstart import QuickStart, children_of
from tests.realparts import inherited_environ

ROOT = Path(__file__).resolve().parent.parent
TOKEN_VAR = "RUNSH_TEST_TOKEN"

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
    env = inherited_environ()
    env.update(
        VAR_DIR=str(tmp_path / "var"),
        PY=str(fake / "python"),
        CELERY=str(fake / "celery"),
        FAKE_DIR=str(fake),
        STOP_GRACE_SECONDS="2",
        LOG_MAX_BYTES="1000",
    )
    env[TOKEN_VAR] = uuid.uuid4().hex
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
    path = Path(env["FAKE_DIR"]) / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


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


def marked(token: str) -> list[tuple[int, bytes]]:
    """(pid, command line) of every live process (zombies aside) whose environment holds
    RUNSH_TEST_TOKEN=token: everything run.sh started, and what those started."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            found.append((int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ")))
        except (OSError, IndexError):
            continue
    return found


def kill_marked(token: str) -> None:
    for pid, _ in marked(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_none_marked(token: str, seconds: float, what: str, console: Path) -> None:
    deadline = time.monotonic() + seconds
    while left := marked(token):
        if time.monotonic() > deadline:
            kill_marked(token)
            listing = "\n".join(f"  {pid} {cmd.decode(errors='replace')}" for pid, cmd in left)
            pytest.fail(f"{what}: left running\n{listing}\nconsole:\n{console.read_text()}")
        time.sleep(0.1)


@pytest.mark.parametrize(
    "first", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"]
)
def test_a_second_signal_during_the_stop_does_not_cut_it_short(fake_env, first):
    """make forwards the TERM it got to run.sh, which got the group's TERM too; a second
    Ctrl-C is common. Whichever signal starts it (TERM, Ctrl-C's INT, a closed terminal's
    HUP), the stop goes on (TERM, the grace, KILL) and run.sh exits last."""
    # a worker that ignores TERM: the stop lasts the whole grace
    env = dict(fake_env, FAKE_IGNORE_TERM="1", STOP_GRACE_SECONDS="1")
    proc, console = start(env)
    try:
        wait_for(
            lambda: count(env, "worker") and count(env, "beat") and count(env, "web"),
            10,
            "not all three started",
            console,
        )
        time.sleep(0.3)  # the stand-ins are past their `trap`
        os.killpg(proc.pid, first)
        for sig in [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]:
            time.sleep(0.2)
            os.killpg(proc.pid, sig)
        proc.wait(timeout=10)
        assert "worker still running after 1s: killed" in console.read_text()
        assert console.read_text().count("stopping") == 1
        wait_none_marked(env[TOKEN_VAR], 3, "run.sh exited before its services", console)
    finally:
        cleanup(env)
        kill_marked(env[TOKEN_VAR])


def test_sigkill_of_run_sh_leaves_nothing(fake_env):
    """No trap runs: the services' parent-death signal and the watchdog end them, and the
    worker stand-in's child too (a grandchild of run.sh, like Celery's pool)."""
    env = dict(fake_env)
    proc, console = start(env)
    try:
        # web; worker and beat, each with its child
        wait_for(lambda: len(started_pids(env)) == 5, 10, "not all started", console)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        wait_none_marked(env[TOKEN_VAR], 5, "SIGKILL of run.sh", console)
    finally:
        cleanup(env)
        kill_marked(env[TOKEN_VAR])


# --- the real stack, as `make run` runs it ------------------------------------------------

MAKEFILE = "run:\n\texec bash deploy/run.sh\n"  # the `make run` recipe's last line


@pytest.fixture(scope="module")
def stack_var(tmp_path_factory):
    """A var/ folder with the quick start's database migrated and seeded, once."""
    var_dir = tmp_path_factory.mktemp("runsh") / "var"
    QuickStart(var_dir).setup()
    return var_dir


def port_free(port: int) -> bool:
    """Whether the next `make run` could listen there (gunicorn sets SO_REUSEADDR too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.realparts
@pytest.mark.parametrize("how", ["term", "term-twice", "kill-supervisor", "kill-group"])
def test_make_run_stopped_or_killed_leaves_no_process_and_frees_the_port(stack_var, how):
    """`make run`'s process group gets TERM (make forwards one more to run.sh), or TERM
    twice 0.3 s apart; or run.sh alone, or make's whole group, gets SIGKILL. Within a
    bounded wait no process run.sh started is left (web, its workers, the Celery worker,
    its pool, beat, the watchdog) and the port can be bound again."""
    token = uuid.uuid4().hex
    qs = QuickStart(stack_var, STOP_GRACE_SECONDS=3, **{TOKEN_VAR: token})
    makefile = stack_var.parent / "Makefile"
    makefile.write_text(MAKEFILE)
    port = int(qs.env["PORT"])
    try:
        qs.start(argv=["make", "-s", "-f", str(makefile), "run"])
        qs.wait_worker_and_beat()

        def roles() -> dict[str, int]:
            found = {"gunicorn": 0, "worker": 0, "beat": 0}
            for _, cmd in marked(token):
                for role in found:
                    if f" {role}".encode() in cmd or f".{role}".encode() in cmd:
                        found[role] += 1
            return found

        # arbiter + 2 uvicorn workers, worker + its pool of 2, beat: the 7
        wait_for(
            lambda: roles() == {"gunicorn": 3, "worker": 3, "beat": 1},
            30,
            f"not all processes up: {roles()}",
            qs.run_log,
        )
        make = qs.proc
        assert make is not None
        run_sh = next(pid for pid, argv in children_of(make.pid) if b"deploy/run.sh" in argv)
        if how == "term":
            os.killpg(make.pid, signal.SIGTERM)
        elif how == "term-twice":
            os.killpg(make.pid, signal.SIGTERM)
            time.sleep(0.3)
            os.killpg(make.pid, signal.SIGTERM)
        elif how == "kill-supervisor":
            os.kill(run_sh, signal.SIGKILL)
        else:
            os.killpg(make.pid, signal.SIGKILL)
        make.wait(timeout=15)
        wait_none_marked(token, 10, f"{how} of make run", qs.run_log)
        # A process that is exiting has lost its environment (/proc shows none) a moment
        # before its sockets: the port may take that moment longer.
        deadline = time.monotonic() + 5
        while not port_free(port):
            if time.monotonic() > deadline:
                ss = subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
                taken = "\n".join(line for line in ss.splitlines() if f":{port} " in line)
                pytest.fail(f"port {port} still taken after {how}:\n{taken}")
            time.sleep(0.1)
        assert not marked(token)
    finally:
        kill_marked(token)
        qs.close()
        qs.dump_logs()

"""Real servers for tests: a throwaway Redis, a throwaway RabbitMQ node, a throwaway
PostgreSQL cluster, and the project's Celery worker / beat as subprocesses, all
started, stopped, killed and restarted by the test itself.

Nothing here touches the machine's shared PostgreSQL (5432), Redis (6379) or RabbitMQ
(5672; only its epmd, 4369, which every node on the machine registers with): every
server listens on 127.0.0.1 on a port of its own, in a temp folder of its own, so two
pytest-xdist workers can run these tests side by side.

Registered as a plugin by tests/conftest.py (`pytest_plugins = ["tests.realparts"]`):

    fixtures  redis_server, redis_cache, rabbit_server, broker_server, postgres_server, services,
              real_project
    helpers   free_port, RedisServer, RabbitServer, PostgresServer, ServiceProcess, start_worker,
              start_beat, start_web, web_argv, project_env, run_manage, send_task, group_pids, pid_alive

Cleanup happens three ways: the fixtures stop and delete what they started (also when
the test fails); an atexit hook kills whatever is still alive when the test process
exits; and each new server first sweeps temp folders left by a test process that died
without cleaning up (SIGKILL, CI timeout), killing their processes.

Temp folders go to /dev/shm when it is a roomy tmpfs (else $TMPDIR or /tmp; or
$REALPARTS_TMPDIR), named realparts-<kind>-*, each with an `.owner` file (pid and start
time of the test process) and a `.pids` file (process groups it started).

PostgreSQL refuses to run as root: when the tests run as root, its binaries run as the
`postgres` OS user (`runuser -u postgres --`, or `su postgres` without runuser) and
the cluster's folder is owned by postgres.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN_DIR = Path(sys.executable).parent
HOST = "127.0.0.1"
TMP_PREFIX = "realparts-"
# The Celery queues a worker started here consumes unless told (deploy/settings.py
# CELERY_QUEUES_ALL; tests/routing/test_queues.py checks they agree).
ALL_QUEUES = "interactive,batch,housekeeping"
PG_OS_USER = "postgres"

# Settings of every throwaway cluster: local only, no durability, small.
PG_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "60",
    "max_wal_size": "64MB",
    "min_wal_size": "32MB",
    "jit": "off",
    "dynamic_shared_memory_type": "mmap",  # in the data dir: nothing left in /dev/shm
    "log_line_prefix": "'%m [%p] %q%u@%d '",
}


# --- small helpers ---------------------------------------------------------------------


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 right now.

    Picked below the kernel's ephemeral range when there is room, so that an outgoing
    connection (a worker reconnecting to a stopped Redis, say) cannot take the port of
    a server that is down "for a while" and about to come back on it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low > 12000:
        for _ in range(50):
            port = random.randint(10000, low - 1)
            if _port_is_free(port):
                return port
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> object:
    """Poll `predicate` until it returns something truthy; TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time in clock ticks) of a live process, else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 of proc(5): state; pgrp is field 5, starttime field 22.
    return fields[0], int(fields[2]), int(fields[19])


def _start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return stat[2] if stat and stat[0] not in "ZX" else None


def pid_alive(pid: int) -> bool:
    """True if `pid` is a live process (a zombie is not)."""
    return _start_time(pid) is not None


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat and stat[1] == pgid and stat[0] not in "ZX":
                pids.append(int(entry))
    return sorted(pids)


def _kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_pg_user(argv: list[str]) -> list[str]:
    """`argv` run as the postgres OS user when we are root (initdb refuses root)."""
    if not _is_root():
        return argv
    if shutil.which("runuser"):
        return ["runuser", "-u", PG_OS_USER, "--", *argv]
    return ["su", PG_OS_USER, "-s", "/bin/sh", "-c", shlex.join(argv)]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- temp folders owned by this process; orphans swept ---------------------------------

_LIVE: set = set()  # servers and processes still running, killed at exit
_OWNED_DIRS: set[Path] = set()  # temp folders removed at exit
_swept = False
_lock = threading.RLock()


def _reachable_by_pg_user(folder: Path) -> bool:
    """The postgres OS user can reach folder (only matters when we are root)."""
    return not _is_root() or all(os.stat(p).st_mode & 0o001 for p in (folder, *folder.parents))


def _roomy_tmpfs(folder: Path, min_free: int = 1 << 30) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return os.access(folder, os.W_OK) and st.f_bavail * st.f_frsize >= min_free


def _tmp_parent() -> Path:
    """Where temp folders go: $REALPARTS_TMPDIR; else /dev/shm when it is a roomy tmpfs
    (initdb 0.5 s instead of 1.5 s, a cluster copy 0.06 s instead of 0.3-1 s on a busy
    disk); else the temp dir, if the postgres user can reach it; else /tmp."""
    if os.environ.get("REALPARTS_TMPDIR"):
        return Path(os.environ["REALPARTS_TMPDIR"])
    shm = Path("/dev/shm")
    if shm.is_dir() and _roomy_tmpfs(shm) and _reachable_by_pg_user(shm):
        return shm
    parent = Path(tempfile.gettempdir())
    return parent if _reachable_by_pg_user(parent) else Path("/tmp")


def _sweep_parents() -> set[Path]:
    return {_tmp_parent(), Path("/dev/shm"), Path(tempfile.gettempdir()), Path("/tmp")}


def _owner_line(pid: int) -> str:
    return f"{pid} {_start_time(pid)}\n"


def _alive(line: str) -> int | None:
    """The pid recorded on `line` ("pid starttime") if that very process still runs."""
    try:
        pid, started = line.split()
        pid = int(pid)
    except ValueError:
        return None
    return pid if str(_start_time(pid)) == started else None


def owned_tempdir(kind: str) -> Path:
    """A fresh temp folder tagged with this process as its owner; removed at exit (or
    by a later sweep if this process dies first)."""
    sweep_orphans()
    path = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{kind}-", dir=_tmp_parent()))
    os.chmod(path, 0o755)
    (path / ".owner").write_text(_owner_line(os.getpid()))
    _OWNED_DIRS.add(path)
    return path


def _record_leader(folder: Path, pid: int) -> None:
    """Remember a process group we started, so a sweep can kill it if we die."""
    with open(folder / ".pids", "a") as f:
        f.write(_owner_line(pid))


_process_dir: Path | None = None


def process_dir() -> Path:
    """This test process's own temp folder (created on first use): default log folder,
    and the record of the service processes it started, for the sweep."""
    global _process_dir
    with _lock:
        if _process_dir is None or not _process_dir.exists():
            _process_dir = owned_tempdir("proc")
        return _process_dir


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _OWNED_DIRS.discard(path)


def sweep_orphans() -> None:
    """Kill the processes and delete the folders of test processes that died without
    cleaning up. Runs once per process, before the first server starts."""
    global _swept
    with _lock:
        if _swept:
            return
        _swept = True
    folders = [f for parent in _sweep_parents() for f in parent.glob(f"{TMP_PREFIX}*")]
    for folder in folders:
        try:
            owner = (folder / ".owner").read_text()
        except OSError:
            continue  # not ours, or just being created
        if _alive(owner):
            continue
        with contextlib.suppress(Exception):  # a cluster: its backends too
            pid = int((folder / "data" / "postmaster.pid").read_text().split()[0])
            if pid_alive(pid):
                _kill_postmaster(pid, folder / "data")
        with contextlib.suppress(OSError):
            for line in (folder / ".pids").read_text().splitlines():
                pid = _alive(line)
                if pid:
                    _kill_group(pid)
        shutil.rmtree(folder, ignore_errors=True)


@atexit.register
def _cleanup_at_exit() -> None:
    for thing in list(_LIVE):
        with contextlib.suppress(Exception):
            thing._emergency_kill()
    for folder in list(_OWNED_DIRS):
        remove_tree(folder)


class _StoppableServer:
    """A throwaway server with a folder of its own: `cleanup` stops it (kills it if it
    will not stop) and deletes the folder; usable as a context manager."""

    dir: Path

    def stop(self, timeout: float = 15) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        try:
            try:
                self.stop(timeout=15)
            except Exception:
                self.kill()
        finally:
            remove_tree(self.dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


# --- Redis -----------------------------------------------------------------------------


def redis_server_binary() -> str | None:
    return os.environ.get("REALPARTS_REDIS_SERVER") or shutil.which("redis-server")


class RedisServer:
    """A redis-server of our own on 127.0.0.1:port (no persistence), in a temp folder.

    `stop()` and `start()` keep the port, so clients can reconnect to the same URL."""

    def __init__(self, *, port: int | None = None, extra_args: Iterable[str] = (), start=True):
        binary = redis_server_binary()
        if not binary:
            raise FileNotFoundError("redis-server is not on PATH")
        self.binary = binary
        self.host = HOST
        self._fixed_port = port is not None
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.dir = owned_tempdir("redis")
        self.log_path = self.dir / "redis.log"
        self.proc: subprocess.Popen | None = None
        self._ever_started = False
        if start:
            self.start()

    def __repr__(self) -> str:
        return f"<RedisServer {self.url} {'up' if self.is_running() else 'down'}>"

    @property
    def url(self) -> str:
        return self.url_for(0)

    def url_for(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def _argv(self) -> list[str]:
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--logfile", "",
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 10) -> RedisServer:
        if self.is_running():
            return self
        for attempt in range(5):
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    self._argv(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            _LIVE.add(self)
            _record_leader(self.dir, self.proc.pid)
            try:
                wait_until(
                    lambda: self.ping() or self.proc.poll() is not None,
                    timeout,
                    f"redis-server on port {self.port}",
                )
            except TimeoutError:
                self.kill()
                raise RuntimeError(
                    f"redis-server did not answer:\n{_tail(self.log_path)}"
                ) from None
            if self.proc.poll() is None:
                self._ever_started = True
                return self
            # It exited. Another test may have taken a port we picked ourselves: pick
            # another, but only on the first start (a restart must keep the port).
            self.proc.wait()
            _LIVE.discard(self)
            if self._fixed_port or self._ever_started or attempt == 4:
                raise RuntimeError(f"redis-server exited:\n{_tail(self.log_path)}")
            self.port = free_port()
        raise AssertionError("unreachable")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ping(self, timeout: float = 0.5) -> bool:
        """True if the server answers PING (a raw socket; no client library)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def client(self, db: int = 0, **kwargs):
        """A redis-py client (short timeouts) on this server."""
        import redis

        kwargs.setdefault("socket_timeout", 2)
        kwargs.setdefault("socket_connect_timeout", 2)
        return redis.Redis(host=self.host, port=self.port, db=db, **kwargs)

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM (redis exits at once: nothing to save), SIGKILL after `timeout`."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc.pid)
                self.proc.wait()
        _kill_group(self.proc.pid)
        _LIVE.discard(self)

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation."""
        if self.proc is None:
            return
        _kill_group(self.proc.pid)
        self.proc.wait()
        _LIVE.discard(self)

    _emergency_kill = kill

    def cleanup(self) -> None:
        """Stop the server and delete its folder."""
        try:
            self.stop()
        finally:
            remove_tree(self.dir)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


# --- RabbitMQ --------------------------------------------------------------------------


def rabbitmq_server_script() -> str | None:
    """RabbitMQ's own start script (runs as the calling user; /usr/sbin/rabbitmq-server
    is a wrapper that switches to the rabbitmq user and its shared node)."""
    if os.environ.get("REALPARTS_RABBITMQ_SERVER"):
        return os.environ["REALPARTS_RABBITMQ_SERVER"]
    script = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
    if script.exists():
        return str(script)
    return shutil.which("rabbitmq-server")


# RabbitMQ's AMQP 0-9-1 protocol header; a broker that is up answers with a method frame
# (Connection.Start, frame type 1).
_AMQP_HEADER = b"AMQP\x00\x00\x09\x01"


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


class RabbitServer(_StoppableServer):
    """A RabbitMQ node of our own on 127.0.0.1:port, in a temp folder: its own node name,
    Mnesia folder, Erlang cookie (HOME) and distribution port; it registers with the
    machine's epmd (4369, started on demand) like any node. Guest may connect from
    anywhere it listens (127.0.0.1 only).

    `stop()` and `start()` keep the port and the Mnesia folder: durable queues and
    persistent messages (Celery's defaults) survive a restart; `kill()` is SIGKILL to
    the node. A first start takes ~5 s on a busy 2-core machine, a restart ~4 s."""

    def __init__(self, *, port: int | None = None, config: Iterable[str] = (), start=True):
        script = rabbitmq_server_script()
        if not script:
            raise FileNotFoundError("rabbitmq-server is not installed")
        self.script = script
        self.host = HOST
        self._fixed_port = port is not None
        self.port = port or free_port()
        self.dist_port = free_port()
        self.config = list(config)
        self.dir = owned_tempdir("rabbit")
        self.nodename = f"realparts{os.getpid()}x{self.port}@localhost"
        self.log_path = self.dir / "rabbitmq.log"
        self.proc: subprocess.Popen | None = None
        self._ever_started = False
        (self.dir / "enabled_plugins").write_text("[].\n")
        cookie = self.dir / ".erlang.cookie"
        cookie.write_text(uuid.uuid4().hex.upper())
        os.chmod(cookie, 0o400)
        if start:
            self.start()

    def __repr__(self) -> str:
        return f"<RabbitServer {self.url} {'up' if self.is_running() else 'down'}>"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}//"

    def _write_config(self) -> None:
        lines = [
            f"listeners.tcp.default = {self.host}:{self.port}",
            "loopback_users = none",
            "log.console = true",
            "log.console.level = warning",
            "log.file = false",
            *self.config,
        ]
        (self.dir / "rabbitmq.conf").write_text("\n".join(lines) + "\n")

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(
            HOME=str(self.dir),  # the Erlang cookie
            RABBITMQ_NODENAME=self.nodename,
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.dir / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(self.dir / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(self.dir / "plugins-expand"),
            RABBITMQ_PID_FILE=str(self.dir / "rabbitmq.pid"),
            RABBITMQ_FEATURE_FLAGS_FILE=str(self.dir / "feature_flags"),
        )
        return env

    def start(self, timeout: float = 60) -> RabbitServer:
        if self.is_running():
            return self
        for attempt in range(5):
            self._write_config()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.script],
                    env=self._env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            _LIVE.add(self)
            _record_leader(self.dir, self.proc.pid)
            try:
                wait_until(
                    lambda: self.ping() or self.proc.poll() is not None,
                    timeout,
                    f"rabbitmq-server on port {self.port}",
                    0.2,
                )
            except TimeoutError:
                self.kill()
                raise RuntimeError(f"rabbitmq did not answer:\n{_tail(self.log_path)}") from None
            if self.proc.poll() is None:
                self._ever_started = True
                return self
            self.proc.wait()
            _LIVE.discard(self)
            if self._fixed_port or self._ever_started or attempt == 4:
                raise RuntimeError(f"rabbitmq-server exited:\n{_tail(self.log_path)}")
            self.port, self.dist_port = free_port(), free_port()  # taken meanwhile
        raise AssertionError("unreachable")

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ping(self, timeout: float = 1) -> bool:
        """True if the broker answers an AMQP 0-9-1 handshake (raw socket)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                s.sendall(_AMQP_HEADER)
                return s.recv(1) == b"\x01"
        except OSError:
            return False

    def connection(self, **kwargs):
        """A kombu connection (short timeouts) to this broker."""
        from kombu import Connection

        kwargs.setdefault("connect_timeout", 2)
        return Connection(self.url, **kwargs)

    def queue_depth(self, name: str = "celery") -> int:
        """Ready messages in queue `name` (0 if it does not exist)."""
        with self.connection() as conn:
            try:
                return conn.default_channel.queue_declare(name, passive=True).message_count
            except Exception as error:  # 404 NOT_FOUND: no such queue
                if getattr(error, "code", None) == 404:
                    return 0
                raise

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the start script: RabbitMQ stops cleanly (closing its connections);
        SIGKILL after `timeout`."""
        if self.proc is None:
            return
        tree = _descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self._kill_tree(tree)
        _LIVE.discard(self)

    def _kill_tree(self, tree: list[int]) -> None:
        # The Erlang VM's helpers (erl_child_setup, inet_gethost) run in sessions of
        # their own: kill the whole tree, not only the group.
        if self.proc is None:
            return
        tree = [*tree, *_descendants(self.proc.pid)]
        _kill_group(self.proc.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        wait_until(lambda: not any(pid_alive(p) for p in tree), 10, "rabbitmq to die")

    def kill(self) -> None:
        """SIGKILL to the node: it vanishes mid-conversation (durable data stays)."""
        if self.proc is None:
            return
        self._kill_tree(_descendants(self.proc.pid))
        _LIVE.discard(self)

    _emergency_kill = kill


# --- PostgreSQL ------------------------------------------------------------------------


def _pg_version_key(path: Path) -> tuple:
    return tuple(int(n) if n.isdigit() else 0 for n in re.split(r"[.]", path.parent.name))


def pg_bin_dir() -> Path | None:
    """The folder with initdb / pg_ctl / postgres: $REALPARTS_PG_BIN, else the newest
    /usr/lib/postgresql/*/bin, else wherever initdb is on PATH."""
    if os.environ.get("REALPARTS_PG_BIN"):
        return Path(os.environ["REALPARTS_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_pg_version_key)
    for bin_dir in reversed(found):
        if (bin_dir / "initdb").exists() and (bin_dir / "pg_ctl").exists():
            return bin_dir
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _run_checked(argv: list[str], what: str, timeout: float = 60, **kwargs) -> str:
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"{what} failed ({out.returncode}): {shlex.join(argv)}\n{out.stdout}\n{out.stderr}"
        )
    return out.stdout


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(raw[raw.rindex(")") + 2 :].split()[1]) == pid:
                kids.append(int(entry))
    return kids


def _kill_postmaster(pid: int, data: Path) -> None:
    """SIGKILL a postmaster and its children (each backend is a process group of its
    own, so killpg is not enough), then release what a clean stop would have."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)  # no new backend from here on
    victims = [pid, *_children(pid)]
    for victim in reversed(victims):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not any(pid_alive(v) for v in victims), 10, "postgres processes to die")
    # The SysV interlock segment outlives the processes (the rest of shared memory
    # is anonymous mmap, and dynamic shared memory lives in the data dir): remove it.
    # Then drop the lock file: a killed postmaster nobody reaped yet is a zombie, and
    # a zombie's pid still "exists" for the next postmaster's lock-file check.
    with contextlib.suppress(OSError, ValueError, IndexError):
        shmid = (data / "postmaster.pid").read_text().splitlines()[6].split()[1]
        subprocess.run(["ipcrm", "-m", shmid], capture_output=True, timeout=10)
    with contextlib.suppress(OSError):
        (data / "postmaster.pid").unlink()


def _give_to_pg_user(path: Path) -> None:
    if _is_root():
        shutil.chown(path, PG_OS_USER, PG_OS_USER)


def _initdb(bin_dir: Path, data: Path) -> None:
    argv = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
    argv += ["-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"]
    _run_checked(_as_pg_user(argv), "initdb")
    with open(data / "postgresql.conf", "a") as conf:
        conf.write("\n# tests/realparts.py\n")
        conf.writelines(f"{key} = {value}\n" for key, value in PG_SETTINGS.items())


_template: Path | None = None  # per process: an initdb'd data dir that is copied


def _pg_template(bin_dir: Path) -> Path:
    """initdb once per test process; each cluster is then a copy (`cp -a`, ~0.1 s
    instead of initdb's ~1.5 s)."""
    global _template
    with _lock:
        if _template is not None and (_template / "PG_VERSION").exists():
            return _template
        folder = owned_tempdir("pgtemplate")
        _give_to_pg_user(folder)
        data = folder / "data"
        _initdb(bin_dir, data)
        _template = data
        return data


class PostgresServer(_StoppableServer):
    """A throwaway PostgreSQL cluster: its own data dir in a temp folder, trust auth,
    127.0.0.1 only, its own port; `stop()` / `start()` / `restart()` keep both."""

    def __init__(
        self,
        *,
        port: int | None = None,
        settings: dict[str, str] | None = None,
        use_template: bool = True,
        start: bool = True,
    ):
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError("PostgreSQL binaries (initdb, pg_ctl) not found")
        self.bin_dir = bin_dir
        self.host = HOST
        self.user = "postgres"
        self._fixed_port = port is not None
        self.port = port or free_port()
        self.dir = owned_tempdir("pg")
        _give_to_pg_user(self.dir)
        self.data = self.dir / "data"
        self.log_path = self.dir / "postgres.log"
        self._ever_started = False
        if use_template:
            _run_checked(["cp", "-a", str(_pg_template(bin_dir)), str(self.data)], "copy cluster")
        else:
            _initdb(bin_dir, self.data)
        self._extra_settings = dict(settings or {})
        self._write_port()
        if start:
            self.start()

    def __repr__(self) -> str:
        return f"<PostgresServer {self.host}:{self.port} {'up' if self.is_running() else 'down'}>"

    def _write_port(self) -> None:
        # The instance's own settings go last in postgresql.conf: the last value wins.
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"port = {self.port}\n")
            conf.writelines(f"{key} = {value}\n" for key, value in self._extra_settings.items())

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://{self.user}@{self.host}:{self.port}/{dbname}"

    def _pg_ctl(self, *args: str, timeout: float = 60) -> str:
        argv = _as_pg_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *args])
        return _run_checked(argv, f"pg_ctl {args[-1]}", timeout=timeout)

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _start_time(pid) is not None else None

    def is_running(self) -> bool:
        return self.postmaster_pid() is not None

    def pids(self) -> list[int]:
        """The postmaster and its children (backends, checkpointer, ...), if running."""
        pid = self.postmaster_pid()
        return [pid, *_children(pid)] if pid else []

    def start(self, timeout: float = 30) -> PostgresServer:
        if self.is_running():
            return self
        for attempt in range(5):
            try:
                self._pg_ctl("-l", str(self.log_path), "-w", "-t", str(int(timeout)), "start")
            except RuntimeError as error:
                in_use = "could not bind" in _tail(self.log_path, 20)
                if self._fixed_port or self._ever_started or attempt == 4 or not in_use:
                    raise RuntimeError(f"{error}\n{_tail(self.log_path)}") from None
                self.port = free_port()  # a port we picked was taken meanwhile
                self._write_port()
                continue
            break
        pid = self.postmaster_pid()
        if pid:  # pg_ctl runs the postmaster in a session of its own: pgid == pid
            _record_leader(self.dir, pid)
        _LIVE.add(self)
        self._ever_started = True
        self.wait_ready(timeout)
        return self

    def accepts_connections(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def wait_ready(self, timeout: float = 30) -> None:
        try:
            wait_until(self.accepts_connections, timeout, f"PostgreSQL on port {self.port}", 0.1)
        except TimeoutError as error:
            raise RuntimeError(f"{error}\n{_tail(self.log_path)}") from None

    def stop(self, mode: str = "fast", timeout: float = 30) -> None:
        """`pg_ctl stop -m fast` (open connections are cut); `mode="immediate"` is a
        crash-like stop (recovery at the next start)."""
        if self.is_running():
            self._pg_ctl("-m", mode, "-w", "-t", str(int(timeout)), "stop", timeout=timeout + 10)
        _LIVE.discard(self)

    def restart(self, mode: str = "fast", timeout: float = 30) -> PostgresServer:
        self.stop(mode, timeout)
        return self.start(timeout)

    def kill(self) -> None:
        """SIGKILL the postmaster and all its backends (a machine losing power, as far as
        clients can tell). `start()` recovers the cluster."""
        pid = self.postmaster_pid()
        if pid:
            _kill_postmaster(pid, self.data)
        _LIVE.discard(self)

    def _emergency_kill(self) -> None:
        self.kill()

    def connect(self, dbname: str = "postgres", **kwargs):
        """A psycopg connection (autocommit unless told otherwise)."""
        import psycopg

        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 5)
        return psycopg.connect(self.url(dbname), **kwargs)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE name; returns its URL."""
        from psycopg import sql

        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        from psycopg import sql

        with self.connect() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


# --- the project's processes -----------------------------------------------------------


# Variables of the test process itself that a project it starts must not inherit:
# pytest's (PYTEST_*), the eager-Celery switch, and PROMETHEUS_MULTIPROC_DIR, the test
# process's metrics folder (routing.core.metrics sets it to VAR_DIR/metrics, one folder
# for every test worker). A child keeps its metrics under its own VAR_DIR; given the
# test's folder, `make run` (deploy/run.sh) empties it at start, deleting the test
# workers' own counters under tests/routing/api/test_metrics.py's scrapes.
TEST_PROCESS_VARIABLES = frozenset({"CELERY_TASK_ALWAYS_EAGER", "PROMETHEUS_MULTIPROC_DIR"})


def inherited_environ(*drop: str) -> dict[str, str]:
    """os.environ without the test process's own variables (TEST_PROCESS_VARIABLES,
    PYTEST_*) and without `drop`: what every process a test starts begins from."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_") and k not in TEST_PROCESS_VARIABLES and k not in drop
    }


def project_env(
    database_url: str, broker_url: str, *, var_dir: str | Path | None = None, **extra
) -> dict[str, str]:
    """An environment for the project's subprocesses: os.environ plus the database and
    broker URLs, the settings module and a VAR_DIR of their own (a temp folder removed
    at exit unless `var_dir` is given). `extra` adds variables; a None value removes one."""
    env = inherited_environ()
    if var_dir is None:
        var_dir = owned_tempdir("var")
    env.update(
        DATABASE_URL=database_url,
        CELERY_BROKER_URL=broker_url,
        DJANGO_SETTINGS_MODULE="deploy.settings",
        VAR_DIR=str(var_dir),
        PYTHONUNBUFFERED="1",
    )
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


class ManageError(RuntimeError):
    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str):
        super().__init__(
            f"manage.py {shlex.join(args)} exited with {returncode}\n{stderr or stdout}"
        )
        self.command, self.returncode = args, returncode
        self.stdout, self.stderr = stdout, stderr


def run_manage(
    env: dict[str, str], *args: str, timeout: float = 120, cwd: Path | None = None
) -> str:
    """`python manage.py ARGS` in the repo root (or `cwd`) with `env`; its stdout, or
    ManageError (carrying stderr) if it fails."""
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if out.returncode != 0:
        raise ManageError(list(args), out.returncode, out.stdout, out.stderr)
    return out.stdout


# A migrated database per process, for each kind (SQLite, PostgreSQL) and with or
# without the built-in catalog, which later databases are filled from instead of running
# the commands again: `manage.py migrate` is ~4 s of CPU (Django renders the model state
# of each migration) and `loadcatalog` ~1.5 s, and the real-parts tests start some
# thirty throwaway projects on a two-core machine.
_migrated: dict[tuple[str, bool], Path] = {}
_migrated_lock = threading.Lock()


def _sqlite_path(url: str) -> Path | None:
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def _copy_sqlite(source: Path, target: Path) -> None:
    import sqlite3

    # The backup API: a consistent copy whatever the source's journal (WAL) holds.
    with contextlib.closing(sqlite3.connect(source)) as src:
        with contextlib.closing(sqlite3.connect(target)) as dst:
            src.backup(dst)


def _pg_tool(name: str) -> str:
    bin_dir = pg_bin_dir()
    return str(bin_dir / name) if bin_dir and (bin_dir / name).exists() else name


def migrate_project(env: dict[str, str], *, catalog: bool = False) -> None:
    """The project's (empty) database at `env`'s DATABASE_URL as `manage.py migrate`
    leaves it (and `manage.py loadcatalog` after it if `catalog`). The first time in a
    process for each kind of database, the commands run and what they made is kept (a
    SQLite copy, a `pg_dump`); after that the database is filled from it: the same
    tables, rows (content types, permissions, the catalog) and migration records. Tests
    whose subject is migrating itself run `manage.py migrate` (the quick start's
    `make run`, tests/quickstart.py)."""
    url = env["DATABASE_URL"]
    sqlite = _sqlite_path(url)
    key = ("sqlite" if sqlite else "postgres", catalog)
    with _migrated_lock:
        kept = _migrated.get(key)
        if kept is None or not kept.exists():
            run_manage(env, "migrate", "--noinput")
            if catalog:
                run_manage(env, "loadcatalog")
            kept = owned_tempdir("migrated") / ("db.sqlite3" if sqlite else "dump.sql")
            if sqlite:
                _copy_sqlite(sqlite, kept)
            else:
                _run_checked(
                    [_pg_tool("pg_dump"), "--no-owner", "--no-privileges", "-f", str(kept), url],
                    "pg_dump of the migrated database",
                )
            _migrated[key] = kept
            return
    if sqlite:
        _copy_sqlite(kept, sqlite)
    else:
        _run_checked(
            [_pg_tool("psql"), "-q", "-X", "-v", "ON_ERROR_STOP=1", "-f", str(kept), url],
            "restoring the migrated database",
        )


def sqlite_project(
    broker_url: str = "memory://", *, catalog: bool = False, **extra
) -> dict[str, str]:
    """A throwaway project on SQLite (in its own VAR_DIR, `env["VAR_DIR"]`) and
    `broker_url`, migrated (the built-in catalog loaded if `catalog`): its env. `extra`
    as project_env's."""
    var = owned_tempdir("var")
    env = project_env(f"sqlite:///{var / 'db.sqlite3'}", broker_url, var_dir=var, **extra)
    migrate_project(env, catalog=catalog)
    return env


def catalog_site(*accounts: str, credits: str = "100", **extra) -> tuple[dict[str, str], list]:
    """A throwaway project on SQLite and the in-memory broker, migrated, the catalog
    loaded and an account (with `credits`) per name: (env, the accounts' API keys).
    `extra` as project_env's."""
    env = sqlite_project(catalog=True, **extra)
    keys = [
        json.loads(run_manage(env, "create_account", name, "--json", "--credits", credits))[
            "api_key"
        ]
        for name in accounts
    ]
    return env, keys


class ServiceProcess:
    """A long-running subprocess in a process group of its own, its output in a log file.

    Popen-like: pid, poll(), wait(), returncode, send_signal(). `kill()` SIGKILLs the
    whole group (for a Celery worker: the main process and its pool children at once,
    "the worker died mid-job"); `stop()` is SIGTERM to the main process (Celery: warm
    shutdown), then SIGKILL to the group after `timeout`."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        name: str,
        log_path: Path,
        ready_marker: str | None = None,
        cwd: Path = ROOT,
    ):
        self.argv, self.env, self.name = list(argv), env, name
        self.log_path = Path(log_path)
        self.ready_marker = ready_marker
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid = self.pgid = self.proc.pid
        _LIVE.add(self)
        _record_leader(process_dir(), self.pid)

    def __repr__(self) -> str:
        return f"<ServiceProcess {self.name} pid={self.pid} rc={self.proc.poll()}>"

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def group_pids(self) -> list[int]:
        """Live processes of this service's group (main process and pool children)."""
        return group_pids(self.pgid)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 30, *, regex: bool = False) -> str:
        """Wait until the log contains `pattern` (a substring, or a regex); returns the log.
        Fails at once, with the log, if the process exits first."""
        found = (lambda text: re.search(pattern, text)) if regex else (lambda t: pattern in t)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if found(text):
                return text
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.proc.returncode}) before logging {pattern!r}:\n"
                    + "\n".join(text.splitlines()[-60:])
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} did not log {pattern!r} in {timeout:g} s:\n"
                    + "\n".join(text.splitlines()[-60:])
                )
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 30) -> ServiceProcess:
        if self.ready_marker:
            self.wait_for_log(self.ready_marker, timeout)
        return self

    def kill(self) -> None:
        """SIGKILL to the whole process group; returns once the main process is reaped
        and no process of the group is left."""
        _kill_group(self.pgid)
        self.proc.wait()
        wait_until(lambda: not self.group_pids(), 10, f"{self.name}'s processes to die")
        _LIVE.discard(self)

    _emergency_kill = kill

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM to the main process, SIGKILL to the group after `timeout`; any
        process of the group still around after the main one exits is killed too."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.proc.returncode

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_counter = 0


def _unique_name(prefix: str) -> str:
    global _counter
    _counter += 1
    return f"{prefix}{_counter}-{os.getpid()}"


def _log_path(env: dict[str, str], log_dir: str | Path | None, name: str) -> Path:
    if log_dir is None:
        log_dir = Path(env["VAR_DIR"]) / "log" if env.get("VAR_DIR") else process_dir()
    return Path(log_dir) / f"{name}.log"


def start_worker(
    env: dict[str, str],
    *,
    concurrency: int = 1,
    queues: Iterable[str] | str | None = None,
    name: str | None = None,
    loglevel: str = "INFO",
    extra_args: Iterable[str] = (),
    log_dir: str | Path | None = None,
) -> ServiceProcess:
    """`celery -A deploy worker --pool=prefork` in the repo root with `env`; its log is
    `<log_dir or $VAR_DIR/log>/<name>.log`. Call `.wait_ready()` before relying on it.
    It consumes `queues`, by default every queue (CELERY_QUEUES_ALL: interactive, batch,
    housekeeping), as `make run`'s one worker does."""
    name = name or _unique_name("worker")
    argv = [
        str(BIN_DIR / "celery"),
        "-A", "deploy",
        "worker",
        f"--loglevel={loglevel}",
        f"--concurrency={concurrency}",
        "--pool=prefork",
        "-n", f"{name}@%h",
    ]  # fmt: skip
    queues = queues or ALL_QUEUES
    argv += ["-Q", queues if isinstance(queues, str) else ",".join(queues)]
    argv += list(extra_args)
    return ServiceProcess(
        argv, env=env, name=name, log_path=_log_path(env, log_dir, name), ready_marker="ready."
    )


def web_argv(host: str, port: int, *, workers: int = 1) -> list[str]:
    """The web server as deploy/run.sh starts it: gunicorn with uvicorn workers on the
    ASGI application (async views: streaming chat completions)."""
    return [
        str(BIN_DIR / "python"), "-m", "gunicorn",
        "-c", str(ROOT / "deploy" / "gunicorn.conf.py"),  # deploy.webserver.Worker
        "deploy.asgi:application",
        "-b", f"{host}:{port}",
        "-w", str(workers),
        "--no-control-socket",  # gunicorn 27's default path is one per user
    ]  # fmt: skip


def start_web(
    env: dict[str, str],
    port: int,
    *,
    workers: int = 1,
    name: str = "web",
    extra_args: Iterable[str] = (),
    log_dir: str | Path | None = None,
) -> ServiceProcess:
    """The web server (`web_argv`) in the repo root with `env` (migrated database);
    ready when a worker has started its application."""
    return ServiceProcess(
        [*web_argv(HOST, port, workers=workers), *extra_args],
        env=env,
        name=name,
        log_path=_log_path(env, log_dir, name),
        ready_marker="Application startup complete",
    )


def start_beat(
    env: dict[str, str],
    *,
    name: str | None = None,
    loglevel: str = "INFO",
    extra_args: Iterable[str] = (),
    log_dir: str | Path | None = None,
) -> ServiceProcess:
    """`celery -A deploy beat` (the DatabaseScheduler: migrate first); no pidfile."""
    name = name or _unique_name("beat")
    argv = [str(BIN_DIR / "celery"), "-A", "deploy", "beat", f"--loglevel={loglevel}"]
    argv += ["--pidfile=", *extra_args]
    return ServiceProcess(
        argv,
        env=env,
        name=name,
        log_path=_log_path(env, log_dir, name),
        ready_marker="beat: Starting",
    )


def send_task(broker_url: str, task_name: str, args=(), kwargs=None, **options) -> str:
    """Publish a task by name on `broker_url` (JSON, like the project) without touching
    the test process's own Celery configuration; returns the task id."""
    from celery import Celery
    from django.conf import settings

    app = Celery("realparts-client", broker=broker_url, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True)
    # On the queue the project routes it to (its workers consume those, not "celery").
    route = settings.CELERY_TASK_ROUTES.get(task_name, {})
    options.setdefault("queue", route.get("queue", settings.CELERY_TASK_DEFAULT_QUEUE))
    try:
        # An explicit connection: Celery lets a CELERY_BROKER_URL in the environment (CI
        # exports one for the test process) win over any configured broker URL.
        with app.connection_for_write(url=broker_url) as conn:
            return app.send_task(
                task_name, args=args, kwargs=kwargs or {}, connection=conn, **options
            ).id
    finally:
        app.close()


# --- fixtures --------------------------------------------------------------------------


def _require_redis() -> None:
    if not redis_server_binary():
        pytest.skip("redis-server is not on PATH (needed to start a throwaway Redis)")


def _require_postgres() -> None:
    bin_dir = pg_bin_dir()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        pytest.skip("PostgreSQL's initdb was not found (/usr/lib/postgresql/*/bin or PATH)")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A running throwaway Redis; stopped and deleted after the test."""
    _require_redis()
    server = RedisServer()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def redis_cache(redis_server: RedisServer):
    """Django's default cache on a throwaway Redis (deploy.cache.RedisCache, db 3)."""
    from django.core.cache import cache
    from django.test import override_settings

    caches = {
        "default": {
            "BACKEND": "deploy.cache.RedisCache",
            "LOCATION": redis_server.url_for(3),
            "KEY_PREFIX": "t",
        }
    }
    with override_settings(CACHES=caches):
        yield cache


@pytest.fixture
def rabbit_server() -> Iterator[RabbitServer]:
    """A running throwaway RabbitMQ node; stopped and deleted after the test."""
    if not rabbitmq_server_script():
        pytest.skip("rabbitmq-server is not installed (needed to start a throwaway RabbitMQ)")
    server = RabbitServer()
    try:
        yield server
    finally:
        server.cleanup()


BROKERS = ("redis", "rabbitmq")


@pytest.fixture
def broker_server(request) -> RedisServer | RabbitServer:
    """The Celery broker a test runs on: the `redis_server` fixture, unless the test
    parametrizes it indirectly, e.g.
    `@pytest.mark.parametrize("broker_server", BROKERS, indirect=True)`."""
    kind = getattr(request, "param", "redis")
    if kind == "redis":
        return request.getfixturevalue("redis_server")
    if kind == "rabbitmq":
        return request.getfixturevalue("rabbit_server")
    raise ValueError(f"unknown broker {kind!r}; one of {BROKERS}")


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    """A running throwaway PostgreSQL cluster; stopped and deleted after the test."""
    _require_postgres()
    server = PostgresServer()
    try:
        yield server
    finally:
        server.cleanup()


class Services:
    """Workers and beats started through the `services` fixture; all SIGKILLed after
    the test, and their log tails printed (pytest shows them when the test fails)."""

    def __init__(self) -> None:
        self.started: list[ServiceProcess] = []

    def add(self, proc: ServiceProcess) -> ServiceProcess:
        self.started.append(proc)
        return proc

    def worker(self, env: dict[str, str], **kwargs) -> ServiceProcess:
        return self.add(start_worker(env, **kwargs))

    def beat(self, env: dict[str, str], **kwargs) -> ServiceProcess:
        return self.add(start_beat(env, **kwargs))

    def close(self) -> None:
        for proc in self.started:
            with contextlib.suppress(Exception):
                proc.kill()  # a warm shutdown costs ~3 s a worker; nothing to save here
            print(f"--- {proc.name} ({proc.log_path}), last lines ---")
            print("\n".join(proc.log_text().splitlines()[-30:]))


@pytest.fixture
def services() -> Iterator[Services]:
    group = Services()
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def real_project(redis_server, postgres_server, tmp_path) -> SimpleNamespace:
    """Throwaway Redis + PostgreSQL with a migrated database `app`, and the `env` for
    the project's subprocesses (VAR_DIR under tmp_path)."""
    database_url = postgres_server.create_database("app")
    env = project_env(database_url, redis_server.url, var_dir=tmp_path / "var")
    migrate_project(env)
    return SimpleNamespace(
        redis=redis_server,
        postgres=postgres_server,
        env=env,
        database_url=database_url,
        broker_url=redis_server.url,
    )


def unique_db_name(prefix: str = "t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def api_call(base: str, key: str, method: str, path: str, body: dict | None = None):
    """A request to a server of the stack with an API key: (status, headers, JSON body);
    a new connection each time."""
    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")

"""PostgreSQL, with the idle connections of this process kept for the next request
(issue 16): the web server as deployed (ASGI, deploy/asgi.py) cannot keep a connection
across requests (Django holds it in the request's context: CONN_MAX_AGE is 0 there),
so without this every request opened a new one (~5-10 ms on a busy machine, the
largest part of a quote). Django's own pool (OPTIONS "pool") needs psycopg_pool;
this keeps a short list instead.

A connection goes back to the list when Django closes it (each request's end) only if
it is clean: autocommit, no transaction open or failed, no database error during the
request, nothing unread on its socket. It is handed out again only if it still is,
and the socket check (select(), no round trip) also sees one the server closed (a
restart, a terminated backend): that one is dropped and a new connection opened, so
a database restart costs no failed request beyond those made while it was down.
Idle connections older than DB_POOL_IDLE_SECONDS are closed instead of reused; at
most DB_POOL_IDLE stay per process (settings.py: both from the environment).

ENGINE "deploy.db" (settings.py, when DB_POOL=1: deploy/asgi.py sets it)."""

from __future__ import annotations

import select
import threading
import time

from django.conf import settings
from django.db.backends.postgresql import base
from psycopg import IsolationLevel, pq

_idle: dict[tuple, list[tuple[float, object]]] = {}
_lock = threading.Lock()


def _clean(conn) -> bool:
    """Autocommit, idle, not closed, nothing (data or end of file) on its socket."""
    try:
        if (
            conn.closed
            or not conn.autocommit
            or conn.pgconn.status != pq.ConnStatus.OK
            or conn.info.transaction_status != pq.TransactionStatus.IDLE
        ):
            return False
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, base.Database.Error):
        return False
    return not readable


def _close_quietly(conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a dead connection may fail to close
        pass


def idle_count() -> int:
    with _lock:
        return sum(len(v) for v in _idle.values())


def close_idle() -> None:
    """Close every kept connection of this process (tests)."""
    with _lock:
        conns = [c for v in _idle.values() for _, c in v]
        _idle.clear()
    for conn in conns:
        _close_quietly(conn)


class DatabaseWrapper(base.DatabaseWrapper):
    def _pool_key(self) -> tuple:
        s = self.settings_dict
        return (s["NAME"], s["HOST"], s["PORT"], s["USER"], self.alias)

    def get_new_connection(self, conn_params):
        now = time.monotonic()
        max_idle = settings.DB_POOL_IDLE_SECONDS
        while True:
            with _lock:
                kept = _idle.get(self._pool_key())
                returned_at, conn = kept.pop() if kept else (None, None)
            if conn is None:
                return super().get_new_connection(conn_params)
            if now - returned_at <= max_idle and _clean(conn):
                break
            _close_quietly(conn)
        # What the base class sets when it connects (the level itself stays on the
        # connection, set when it was opened).
        level = self.settings_dict["OPTIONS"].get("isolation_level")
        self.isolation_level = (
            IsolationLevel.READ_COMMITTED if level is None else IsolationLevel(level)
        )
        return conn

    def _close(self):
        conn = self.connection
        if (
            conn is not None
            and not self.in_atomic_block
            and not self.errors_occurred
            and settings.DB_POOL_IDLE > 0
            and _clean(conn)
        ):
            with _lock:
                kept = _idle.setdefault(self._pool_key(), [])
                if len(kept) < settings.DB_POOL_IDLE:
                    kept.append((time.monotonic(), conn))
                    return None
        return super()._close()

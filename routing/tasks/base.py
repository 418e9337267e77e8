"""What every task shares: retry on passing database errors, and fresh connections."""

from __future__ import annotations

from django.db import DatabaseError, InterfaceError, OperationalError, connections

# Expected, passing errors (the database restarting, a connection cut): retry with
# exponential backoff and jitter. Anything else is a bug and is logged by Celery.
TRANSIENT = (OperationalError, InterfaceError, DatabaseError)
RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 20,
}


def reset_connections() -> None:
    # A connection broken by a database restart must not be reused by the retry. (Not
    # inside a transaction: a task run eagerly in a test must keep its connection.)
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()

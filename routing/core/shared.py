"""Per-process memos that every replica drops at once: a generation number per kind of
data, kept in the shared cache (Redis in production, files in the quick start).

A process keeps what it read from the database (the catalog, package scopes) together
with the generation it read *before* the query; every use compares that with the shared
generation (one cache GET) and reloads when they differ. A save bumps the generation
after its transaction commits, so a replica that reloads never reads the old rows
under the new number. Data stays in the process (no pickling of ORM rows through the
cache); only the numbers are shared.

When the cache cannot be reached the memo is not trusted: `generation` answers None
and the caller reads the database (correct, only slower).
"""

from __future__ import annotations

import logging
import uuid

from django.core.cache import cache
from django.db import transaction
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

PREFIX = "gen:"
TIMEOUT = None  # generations never expire (a lost one is re-made: see generation)


def generation(name: str) -> str | None:
    """The current shared generation of `name` (made on first use), None when the
    cache is away."""
    key = PREFIX + name
    try:
        value = cache.get(key)
        if value is None:
            cache.add(key, uuid.uuid4().hex, timeout=TIMEOUT)
            value = cache.get(key)
    except (OSError, RedisError) as exc:
        logger.warning("shared cache unavailable, reading %s from the database: %s", name, exc)
        return None
    return value


def bump_now(name: str) -> None:
    """A new generation of `name` at once: every process's memo of it is stale."""
    try:
        cache.set(PREFIX + name, uuid.uuid4().hex, timeout=TIMEOUT)
    except (OSError, RedisError) as exc:  # pragma: no cover - logged; readers retry
        logger.error("could not bump generation %s: %s", name, exc)


def bump(name: str) -> None:
    """A new generation of `name` when the current transaction commits (at once outside
    one), and now as well, so no process keeps the old memo meanwhile."""
    bump_now(name)
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(lambda: bump_now(name))


def bumper(name: str):
    """A signal receiver that bumps `name`."""

    def receiver(**_kwargs) -> None:
        bump(name)

    receiver.__name__ = f"bump_{name}"
    return receiver

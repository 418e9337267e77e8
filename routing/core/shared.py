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

`SharedMemo` is that memo, the one mechanism of the catalog snapshot
(routing.router.snapshot), the package scopes (routing.quota.packages), the key-to-account
memo (routing.accounts.keys) and the worker's tier slugs (routing.jobs.worker). A memo
is registered explicitly (`register`); `clear_memos` drops every registered one (or
those of one generation) and bumps the generation, which is what the signal receivers
(connected in RoutingConfig.ready) and the tests call.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable, Hashable, Iterable
from typing import Any

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


class SharedMemo:
    """A per-process memo of database reads, valid while the shared generation `name`
    holds: a new generation (another process's change) drops every entry; an entry also
    expires `max_age` seconds after it was read (changes made without signals).

    Use: `token = memo.sync(now)` before reading the database (reads the generation, at
    most every `check_seconds`); `memo.get(key, now)` (None: not kept); after the read,
    `memo.put(key, value, read_at, token)`, which keeps nothing when the memo was
    cleared or forgot entries meanwhile (the read may have raced a change). Without the
    shared cache the memo is not used, unless `keep_without_cache` (then `max_age`
    alone bounds it). Times are the caller's (time.monotonic())."""

    def __init__(
        self,
        name: str,
        *,
        max_age: float = math.inf,
        check_seconds: float = 0.0,
        keep_without_cache: bool = False,
        max_entries: int = 0,
    ) -> None:
        self.name = name
        self.max_age = max_age
        self.check_seconds = check_seconds
        self.keep_without_cache = keep_without_cache
        self.max_entries = max_entries
        self.entries: dict[Hashable, tuple[float, Any]] = {}  # key -> (read at, value)
        self.lock = threading.Lock()
        self._generation: str | None = None
        self._checked_at = -math.inf
        self._usable = False
        self._changes = 0  # clears and forgets: a read that raced one is not kept

    def __repr__(self) -> str:
        return f"SharedMemo({self.name!r}, {len(self.entries)} entries)"

    def register(self) -> SharedMemo:
        """Add the memo to those `clear_memos` drops; returns it."""
        if self not in MEMOS:
            MEMOS.append(self)
        return self

    def sync(self, now: float, check_seconds: float | None = None) -> int:
        """Compare with the shared generation (at most every `check_seconds`); a new one
        drops every entry. Returns the token `put` wants (take it before the read)."""
        every = self.check_seconds if check_seconds is None else check_seconds
        if now - self._checked_at >= every:
            gen = generation(self.name)
            with self.lock:
                if gen is None:
                    self._usable = self.keep_without_cache
                else:
                    self._usable = True
                    if gen != self._generation:
                        self.entries.clear()
                        self._generation = gen
                        self._changes += 1
                self._checked_at = now
        return self._changes

    def get(self, key: Hashable, now: float, max_age: float | None = None) -> Any:
        """The value kept for `key`, or None (not kept, expired, or the memo unused)."""
        if not self._usable:
            return None
        entry = self.entries.get(key)
        if entry is None:
            return None
        if now - entry[0] >= (self.max_age if max_age is None else max_age):
            self.entries.pop(key, None)
            return None
        return entry[1]

    def put(self, key: Hashable, value: Any, read_at: float, token: int) -> None:
        with self.lock:
            if not self._usable or token != self._changes:
                return
            if self.max_entries and len(self.entries) >= self.max_entries:
                self.entries.clear()
            self.entries[key] = (read_at, value)

    def replace(self, key: Hashable, value: Any) -> None:
        """A kept entry's value, updated in place (its age unchanged)."""
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries[key] = (entry[0], value)

    def forget(
        self,
        keys: Iterable[Hashable] = (),
        where: Callable[[Any], bool] | None = None,
        *,
        everywhere: bool = True,
    ) -> None:
        """Drop the entries of `keys` and those whose value satisfies `where` now, and,
        `everywhere`, bump the generation so that other processes drop theirs."""
        with self.lock:
            self._changes += 1
            for key in keys:
                self.entries.pop(key, None)
            if where is not None:
                for key, (_, value) in list(self.entries.items()):
                    if where(value):
                        self.entries.pop(key, None)
        if everywhere:
            bump(self.name)

    def clear(self, *, everywhere: bool = True) -> None:
        """Drop every entry (and, `everywhere`, every other process's: a new generation)."""
        with self.lock:
            self.entries.clear()
            self._generation = None
            self._checked_at = -math.inf
            self._changes += 1
        if everywhere:
            bump(self.name)


MEMOS: list[SharedMemo] = []


def clear_memos(name: str | None = None, *, everywhere: bool = True) -> None:
    """Drop every registered memo (or those of generation `name`) in this process and,
    `everywhere`, in every other (their generations bumped). Also a signal receiver."""
    names = set()
    for memo in MEMOS:
        if name is None or memo.name == name:
            memo.clear(everywhere=False)
            names.add(memo.name)
    if everywhere:
        for each in sorted(names | ({name} if name else set())):
            bump(each)


def memo_clearer(name: str):
    """A signal receiver that clears the memos of generation `name` everywhere."""

    def receiver(**_kwargs) -> None:
        clear_memos(name)

    receiver.__name__ = f"clear_{name}"
    return receiver

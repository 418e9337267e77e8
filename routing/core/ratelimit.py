"""Fixed-window counters in the shared cache, taken atomically across every replica.

`take` adds amounts to several counters (e.g. an account's requests and tokens, and the
paying package's) only if every one of them stays within its limit: all or nothing. On
Redis that is one Lua script (atomic on the server, whatever the number of web
processes); on other caches (the quick start's files, local memory in tests) it is
`add` + `incr` per counter, rolled back when one overflows (the file cache's `incr` is a
read and a write: two processes at the same instant may both count once).

A counter's key names its window (`int(time // period)`), so it resets by itself at the
window's end and expires a little after.

The cache unreachable, `take` fails open: the request goes through uncounted (a rate limit
is a safeguard, not accounting; money is held by quota reservations in PostgreSQL), with a
warning in the log and `routing_ratelimit_fail_open_total{scope}` counted once per scope
of the counters it could not take (the scope is the counter name's first part: `req` in
`req:account-7`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from django.core.cache import cache
from django.core.cache.backends.redis import RedisCacheClient
from redis.exceptions import RedisError

from routing.core import metrics

logger = logging.getLogger(__name__)

CACHE_ERRORS = (OSError, RedisError)

# KEYS: the counters; ARGV: ttl, then (amount, limit) per key. Returns {1, counts...}
# when taken, {0, index, count} (1-based index of the first counter that would overflow)
# when refused.
_TAKE_LUA = """
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  local amount = tonumber(ARGV[2 * i])
  local limit = tonumber(ARGV[2 * i + 1])
  local current = tonumber(redis.call('GET', KEYS[i]) or '0')
  if current + amount > limit then
    return {0, i, current}
  end
end
local counts = {1}
for i = 1, #KEYS do
  local c = redis.call('INCRBY', KEYS[i], tonumber(ARGV[2 * i]))
  if c == tonumber(ARGV[2 * i]) then redis.call('EXPIRE', KEYS[i], ttl) end
  counts[#counts + 1] = c
end
return counts
"""


@dataclass(frozen=True)
class Counter:
    """One limit: `limit` per `period` seconds for `name` (e.g. 'req:account-7')."""

    name: str
    limit: int
    period: int = 60

    @property
    def scope(self) -> str:
        """The kind of limit: the name's part before the first colon ('req')."""
        return self.name.split(":", 1)[0]

    def window(self, at: float) -> int:
        return int(at // self.period)

    def key(self, at: float) -> str:
        return f"rl:{self.name}:{self.period}:{self.window(at)}"

    def reset_seconds(self, at: float) -> float:
        """Seconds until this window ends (the counter starts again at zero)."""
        return (self.window(at) + 1) * self.period - at


@dataclass(frozen=True)
class Taken:
    ok: bool
    counts: tuple[int, ...]  # each counter's count after the take (or as it stood)
    refused: Counter | None = None
    retry_after: int = 0  # whole seconds until the refusing counter's window ends


def now() -> float:
    return time.time()


def _redis():
    """The redis-py client behind Django's RedisCache, None for other backends.
    (`cache` is Django's proxy to the backend: its own type names no backend.)"""
    backend = getattr(cache, "_cache", None)
    if not isinstance(backend, RedisCacheClient):
        return None
    return backend.get_client(None, write=True)


def take(counters: list[tuple[Counter, int]], at: float | None = None) -> Taken:
    """Add each amount to its counter if all stay within their limits. The cache away:
    taken (a rate limit is a safeguard, not accounting), with a warning."""
    at = now() if at is None else at
    counters = [(c, amount) for c, amount in counters if amount > 0]
    if not counters:
        return Taken(True, ())
    keys = [cache.make_and_validate_key(c.key(at)) for c, _ in counters]
    ttl = max(c.period for c, _ in counters) + 5
    try:
        client = _redis()
        if client is not None:
            args = [ttl]
            for c, amount in counters:
                args += [amount, c.limit]
            result = client.eval(_TAKE_LUA, len(keys), *keys, *args)
            if int(result[0]) == 1:
                return Taken(True, tuple(int(n) for n in result[1:]))
            index = int(result[1]) - 1
            refused = counters[index][0]
            return _refusal(refused, at, tuple(int(result[2]) for _ in counters))
        return _take_generic(counters, at, ttl)
    except CACHE_ERRORS as exc:
        logger.warning("rate-limit cache unavailable, not limiting: %s", exc)
        for scope in sorted({c.scope for c, _ in counters}):
            metrics.RATE_LIMIT_FAIL_OPEN.labels(scope=scope).inc()
        return Taken(True, ())


def _refusal(counter: Counter, at: float, counts: tuple[int, ...]) -> Taken:
    return Taken(False, counts, counter, max(1, math.ceil(counter.reset_seconds(at))))


def _take_generic(counters, at: float, ttl: int) -> Taken:
    done: list[tuple[str, int]] = []
    counts = []
    for c, amount in counters:
        key = c.key(at)
        cache.add(key, 0, timeout=ttl)
        try:
            count = cache.incr(key, amount)
        except ValueError:  # expired between add and incr
            cache.set(key, amount, timeout=ttl)
            count = amount
        done.append((key, amount))
        counts.append(count)
        if count > c.limit:
            for k, a in done:
                try:
                    cache.decr(k, a)
                except ValueError:
                    pass
            return _refusal(c, at, tuple(counts))
    return Taken(True, tuple(counts))


def peek(counters: list[Counter], at: float | None = None) -> list[int]:
    """Each counter's count in the current window (0 when the cache is away)."""
    at = now() if at is None else at
    keys = [c.key(at) for c in counters]
    try:
        found = cache.get_many(keys)
    except CACHE_ERRORS:
        return [0] * len(counters)
    return [int(found.get(k) or 0) for k in keys]


def give_back(counters: list[tuple[Counter, int]], at: float) -> None:
    """Undo a take whose work was not accepted after all (best effort)."""
    for c, amount in counters:
        if amount <= 0:
            continue
        try:
            cache.decr(c.key(at), amount)
        except (ValueError, *CACHE_ERRORS):
            pass

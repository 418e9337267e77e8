"""deploy.cache.RedisCache on a throwaway Redis: one redis-py client per pool (not one
per operation), Django's cache API unchanged, and the rate-limit counters taken by the
Lua script (routing.core.ratelimit) on it, atomic, compatible with `peek`."""

import pytest

from routing.core import ratelimit
from routing.core.ratelimit import Counter

pytestmark = pytest.mark.realparts


def test_one_client_per_pool_and_the_cache_api_unchanged(redis_cache):
    backend = redis_cache._cache
    assert backend.get_client(write=True) is backend.get_client(write=False)
    redis_cache.set("n", 41)
    assert redis_cache.incr("n") == 42
    redis_cache.set("obj", {"a": [1, 2]}, timeout=30)
    assert redis_cache.get("obj") == {"a": [1, 2]}
    assert redis_cache.add("obj", "other") is False
    redis_cache.delete("obj")
    assert redis_cache.get("obj") is None


def test_rate_limit_counters_use_the_lua_script_on_redis(redis_cache, monkeypatch):
    assert ratelimit._redis() is not None
    monkeypatch.setattr(
        ratelimit, "_take_generic", lambda *a: pytest.fail("the generic path ran on Redis")
    )
    a, b = Counter("req:account-1", 3), Counter("tok:account-1", 100)
    at = 1_000_000.0
    assert ratelimit.take([(a, 1), (b, 60)], at).counts == (1, 60)
    refused = ratelimit.take([(a, 1), (b, 60)], at)  # b would overflow: nothing is taken
    assert not refused.ok and refused.refused == b
    assert ratelimit.peek([a, b], at) == [1, 60]
    assert ratelimit.take([(a, 2)], at).counts == (3,)
    assert not ratelimit.take([(a, 1)], at).ok

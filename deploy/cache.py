"""Django's Redis cache with one redis-py client per connection pool, made once.

Django's RedisCacheClient builds a new `redis.Redis` for every operation (its
constructor fills a table of ~150 response callbacks: ~0.1 ms each time), and the
quote path makes about ten cache operations (throttle counters, rate-limit headers,
shared generations). The client object holds no connection of its own (connections
live in the pool, which is per process and fork-safe), so one per pool serves every
thread. Same keys, values and errors as Django's backend."""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = self._client(
                connection_pool=self._get_connection_pool(write)
            )
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient

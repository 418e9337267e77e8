import sys

import pytest
from django.core.cache import cache
from django.db import connection

from routing.core import dispatch, shared
from tests import catalog_copy

pytest_plugins = ["tests.realparts"]


@pytest.fixture
def builtin_catalog(db):
    """The built-in catalog, as catalog_load loads catalog/data/catalog.toml (loaded once
    per test process, then copied: tests/catalog_copy.py)."""
    return catalog_copy.builtin_catalog()


@pytest.fixture
def on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture(autouse=True)
def no_api_throttling(settings):
    """No test is rate limited by accident: the throttling tests set their own rates
    (tests/routing/api/test_throttling.py)."""
    settings.API_THROTTLE_RATES = dict.fromkeys(settings.API_THROTTLE_RATES)
    settings.API_TOKENS_PER_MINUTE = None


@pytest.fixture(autouse=True)
def fresh_process_caches(settings):
    """Each test starts with empty caches: the shared one in this process's memory
    (test processes run side by side on their own databases, so they must not share
    pool loads or generations through var/cache), and the per-process memos (rows roll
    back between tests, ids do not)."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "tests",
            "KEY_PREFIX": "mlr",
        }
    }
    cache.clear()
    shared.clear_memos()  # every registered memo (routing.core.shared.SharedMemo)
    yield


class Dispatched(list):
    """The tasks services sent, in order, as `(task_name, args)` pairs."""

    def of(self, task_name: str) -> list[tuple]:
        """The argument tuples of every send of `task_name`."""
        return [args for name, args in self if name == task_name]


@pytest.fixture
def dispatched(monkeypatch) -> Dispatched:
    """Record every task sent through `routing.core.dispatch.send_now` (directly or
    after commit) instead of sending it; each send reports success.

    Services send tasks by name through that one function, so this is the only place
    a test replaces dispatch. A module that imported the function itself
    (`from routing.core.dispatch import send_now`) is patched too."""
    sent = Dispatched()
    original = dispatch.send_now

    def record(task_name: str, *args, countdown: float = 0.0, retry: bool | None = None):
        sent.append((task_name, args))
        return True

    monkeypatch.setattr(dispatch, "send_now", record)
    for name, module in list(sys.modules.items()):
        if name.startswith("routing.") and getattr(module, "send_now", None) is original:
            monkeypatch.setattr(module, "send_now", record)
    return sent


@pytest.fixture
def stack(postgres_server, redis_server, broker_server):
    """The service's own processes (web, workers, beat) on throwaway PostgreSQL and Redis
    (tests/stack.py); the broker is `broker_server` (Redis unless the test parametrizes
    it); a test module may override it with other settings."""
    from tests.stack import Stack

    s = Stack(postgres_server, redis_server, broker=broker_server)
    try:
        yield s
    finally:
        s.close()

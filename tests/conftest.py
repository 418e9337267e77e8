import pytest
from django.db import connection

pytest_plugins = ["tests.realparts"]


@pytest.fixture
def builtin_catalog(db):
    """The built-in catalog, loaded from catalog/data/catalog.toml (idempotent)."""
    from catalog.loader import catalog_load

    return catalog_load()


@pytest.fixture
def on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture(autouse=True)
def fresh_process_caches():
    """Each test starts with empty per-process caches (rows roll back between tests,
    ids do not)."""
    from routing.quota import clear_scopes
    from routing.router.snapshot import clear_pool_loads, clear_snapshot

    clear_snapshot()
    clear_pool_loads()
    clear_scopes()
    yield

import pytest
from django.db import connection


@pytest.fixture
def builtin_catalog(db):
    """The built-in catalog, loaded from catalog/data/catalog.toml (idempotent)."""
    from catalog.loader import catalog_load

    return catalog_load()


@pytest.fixture
def on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")

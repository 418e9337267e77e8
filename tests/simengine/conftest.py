"""Fixtures for the simulation-engine tests: the catalog's Sol and Spark specs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # plain `pytest tests/simengine` without an installed package
    sys.path.insert(0, str(ROOT))

from simengine import ModelSpec, load_catalog_models  # noqa: E402

CATALOG = ROOT / "catalog" / "data" / "catalog.toml"
SOL_SLUG, SPARK_SLUG = "gpt-5.6-sol", "gpt-5.3-codex-spark"


def _spec(slug: str) -> ModelSpec:
    # The catalog's own data file: the engine is tested on the figures the service uses.
    return load_catalog_models(CATALOG)[slug]


def pytest_collection_modifyitems(items):
    # Every test here is the engine's (marker ``engine``; pyproject.toml): CI's SQLite
    # pass deselects them (`-m "not engine"`), since a database cannot change them.
    # The hook sees the whole session's items, so only those under this folder.
    here = Path(__file__).resolve().parent
    for item in items:
        if here in item.path.resolve().parents:
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def sol() -> ModelSpec:
    """GPT-5.6 Sol (MoE, needs a wafer pipeline)."""
    return _spec(SOL_SLUG)


@pytest.fixture(scope="session")
def spark() -> ModelSpec:
    """GPT-5.3-Codex-Spark (dense, fits one wafer)."""
    return _spec(SPARK_SLUG)

"""The built-in catalog for tests, loaded once per test process and copied after that.

About half the suite's tests start from the built-in catalog. `catalog_load` reads the
file and writes ~120 rows one by one through the lifecycle service (~180 queries,
~0.11 s on PostgreSQL): some two minutes of the PostgreSQL pass's CPU. Here the first
test of a process (per database) that asks for the catalog runs `catalog_load` for
real and keeps the rows it wrote; every later one gets the same rows back with one
INSERT per table, same ids and values. tests/catalog/test_loadcatalog.py runs the
loader itself, and checks that a copy is what the loader writes (a load on top of it
changes nothing).

A copy is only made into empty catalog tables; and if the first load wrote to any table
outside the catalog app, this refuses to copy (it would miss those rows): loudly, so
the loader and this stay in step.
"""

from __future__ import annotations

import copy

from django.apps import apps
from django.core.management.color import no_style
from django.core.serializers import sort_dependencies
from django.db import connection

from catalog.loader import LoadReport, catalog_load
from routing.core import shared

# Per database (a test process has one): [(model, [field values by attname]), ...]
_COPIES: dict[str, list[tuple[type, list[dict]]]] = {}


def catalog_models() -> list[type]:
    config = apps.get_app_config("catalog")
    return sort_dependencies([(config, list(config.get_models()))], allow_cycles=True)


def _counts(models) -> dict[str, int]:
    return {m._meta.label: m._default_manager.count() for m in models}


def _tables_empty(models) -> bool:
    sql = " UNION ALL ".join(
        f"SELECT 1 FROM {connection.ops.quote_name(m._meta.db_table)}" for m in models
    )
    with connection.cursor() as cur:
        cur.execute(f"SELECT EXISTS ({sql})")
        return not cur.fetchone()[0]


def _values(model) -> list[dict]:
    fields = model._meta.concrete_fields
    return [
        {f.attname: getattr(o, f.attname) for f in fields}
        for o in model._default_manager.order_by("pk")
    ]


def builtin_catalog() -> LoadReport | None:
    """The built-in catalog in the test's database (the loader's report the first time,
    None for a copy)."""
    key = connection.settings_dict["NAME"]
    models = catalog_models()
    rows = _COPIES.get(key)
    empty = _tables_empty(models)
    if rows is not None and empty:
        for model, values in rows:
            model._default_manager.bulk_create([model(**copy.deepcopy(v)) for v in values])
        if connection.vendor == "postgresql":  # sequences past the copied ids
            with connection.cursor() as cur:
                for sql in connection.ops.sequence_reset_sql(no_style(), models):
                    cur.execute(sql)
        shared.clear_memos()  # as the rows' post_save signals do (routing.router.snapshot)
        return None
    if rows is not None or not empty:  # something is there already: the loader merges
        return catalog_load()
    others = [m for m in apps.get_models() if m not in models and not m._meta.proxy]
    before = _counts(others)
    report = catalog_load()
    changed = {k for k, v in _counts(others).items() if before[k] != v}
    if changed:
        raise AssertionError(
            f"catalog_load wrote to {sorted(changed)} too: tests/catalog_copy.py copies "
            "only the catalog app's tables; make it copy those as well"
        )
    _COPIES[key] = [(m, _values(m)) for m in models]
    return report

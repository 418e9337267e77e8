import datetime as dt
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from catalog import lifecycle
from catalog.loader import CatalogFileError, catalog_load
from catalog.models import (
    Benchmark,
    Deployment,
    HardwarePool,
    LifecycleChange,
    ModelVersion,
    Price,
    Tier,
)
from tests import catalog_copy

pytestmark = pytest.mark.django_db

SLUGS = {
    "gpt-5.2",
    "gpt-5.3-codex",
    "gpt-5.3-codex-spark",
    "gpt-5.4",
    "gpt-5.4-mini",
    "gpt-5.6-luna",
    "gpt-5.6-terra",
    "gpt-5.6-sol",
    "gpt-6-astra",
    "deepseek-v4.1-flash",
    "neohorse-1-4b",
    "neohorse-1-9b",
}


def snapshot():
    tables = [ModelVersion, Deployment, Price, Benchmark, LifecycleChange, Tier]
    return {t.__name__: sorted(map(str, t.objects.values_list())) for t in tables}


def test_every_published_model_is_loaded(builtin_catalog):
    assert set(ModelVersion.objects.values_list("slug", flat=True)) == SLUGS


def test_published_events_are_in_the_catalog(builtin_catalog):
    get = ModelVersion.objects.get
    spark = get(slug="gpt-5.3-codex-spark")
    assert spark.released_on == dt.date(2026, 2, 12)
    assert spark.retirement_announced_on == dt.date(2026, 9, 11)
    assert spark.retires_on == dt.date(2026, 9, 18)  # the week after the announcement
    assert spark.successor.slug == "gpt-5.6-sol" and spark.successor_tier.slug == "ultrafast"
    assert spark.context_window == 128_000 and spark.input_modalities == ["text"]
    for slug in ("gpt-5.2", "gpt-5.3-codex"):
        assert get(slug=slug).retires_on == dt.date(2026, 6, 2)
    for slug in ("gpt-5.4", "gpt-5.4-mini"):
        assert get(slug=slug).retires_on == dt.date(2026, 8, 31)
    assert Deployment.objects.get(
        model__slug="gpt-5.6-sol", tier__slug="ultrafast"
    ).available_from == (dt.date(2026, 8, 13))
    ds = get(slug="deepseek-v4.1-flash")
    assert (ds.total_params, ds.active_params_prefill, ds.active_params_decode) == (
        552_000_000_000,
        8_000_000_000,
        16_000_000_000,
    )
    assert ds.kv_bytes_per_token == 890 and ds.context_window == 1_000_000
    assert get(slug="gpt-6-astra").context_window == 1_050_000


def test_swe_bench_curve_is_stored_with_durations(builtin_catalog):
    points = list(
        Benchmark.objects.filter(model__slug="gpt-5.3-codex", name="SWE-Bench Pro")
        .order_by("duration_minutes")
        .values_list("duration_minutes", "score")
    )
    assert points == [(3.0, 51.0), (9.0, 56.0), (16.0, 57.0)]
    assert (
        Benchmark.objects.get(model__slug="gpt-5.3-codex-spark", name="Terminal-Bench 2.0").score
        == 58.4
    )


def test_tier_prices_follow_published_multipliers_and_are_marked_estimates(builtin_catalog):
    prices = {
        p.tier.slug: p
        for p in Price.objects.filter(model__slug="gpt-5.6-sol").select_related("tier")
    }
    std = prices["standard"].output_per_million
    assert prices["flex"].output_per_million == std * Decimal("0.5")
    assert prices["priority"].output_per_million == std * 2
    assert prices["ultrafast"].output_per_million == std * 6
    assert all(p.is_estimate for p in prices.values())


def test_a_second_load_changes_nothing(builtin_catalog):
    before = snapshot()
    report = catalog_load()
    assert not report.changed
    assert snapshot() == before


def test_a_second_load_reads_each_table_once_and_writes_nothing(
    builtin_catalog, django_assert_max_num_queries
):
    """The loader reads what is there one table at a time (not one query per row, nor one
    per relation it compares), so loading the catalog stays cheap as it grows."""
    tables = {m._meta.db_table for m in (Tier, HardwarePool, ModelVersion, Deployment, Price)}
    with django_assert_max_num_queries(12) as queries:  # nine tables + the savepoint
        report = catalog_load()
    assert not report.changed
    sql = [q["sql"].lstrip().upper() for q in queries.captured_queries]
    assert not [q for q in sql if q.startswith(("INSERT", "UPDATE", "DELETE"))]
    assert all(any(t.upper() in q for q in sql) for t in tables)


def test_a_deployment_moved_to_another_pool_in_the_file_is_applied(builtin_catalog, tmp_path):
    from catalog.loader import DEFAULT_CATALOG

    text = DEFAULT_CATALOG.read_text()
    moved = '{ tier = "flex", pool = "h100-legacy" }'
    assert moved in text
    path = tmp_path / "catalog.toml"
    path.write_text(text.replace(moved, '{ tier = "flex", pool = "h200-main" }', 1))
    report = catalog_load(path=path)
    assert report.updated["deployments"] == 1
    assert Deployment.objects.get(model__slug="gpt-5.2", tier__slug="flex").pool.slug == (
        "h200-main"
    )
    assert not catalog_load(path=path).changed


def _catalog_content() -> dict[str, list[tuple]]:
    """Every catalog row's values, ids and timestamps left out, relations by name."""
    out = {}
    for m in catalog_copy.catalog_models():
        fields = [
            f
            for f in m._meta.concrete_fields
            if not (f.primary_key or getattr(f, "auto_now", False) or f.name.endswith("_at"))
        ]
        out[m.__name__] = sorted(
            tuple(str(getattr(o, f.name)) for f in fields) for o in m.objects.all()
        )
    return out


def _empty_the_catalog() -> None:
    for m in reversed(catalog_copy.catalog_models()):
        m.objects.all()._raw_delete(m.objects.db)


def test_the_tests_copy_of_the_catalog_is_what_the_loader_writes(db):
    """tests/catalog_copy.py loads the catalog once per test process and copies it for
    the other tests: the copy has the same rows as a load, and a load on top of it
    changes nothing."""
    catalog_copy.builtin_catalog()  # loaded (this process's first) or copied
    _empty_the_catalog()
    catalog_load()
    loaded = _catalog_content()
    _empty_the_catalog()
    assert catalog_copy.builtin_catalog() is None  # a copy, not a load
    assert _catalog_content() == loaded
    assert sum(map(len, loaded.values())) > 100
    assert not catalog_load().changed


def test_the_command_is_idempotent(db, capsys):
    call_command("loadcatalog")
    first = snapshot()
    call_command("loadcatalog")
    assert "already up to date" in capsys.readouterr().out
    assert snapshot() == first


def test_admin_lifecycle_changes_survive_a_reload(builtin_catalog):
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=luna,
        retires_on=dt.date(2027, 6, 1),
        successor=None,
        actor="admin:bob",
    )
    catalog_load()
    luna.refresh_from_db()
    assert luna.retires_on == dt.date(2027, 6, 1)


def test_reset_lifecycle_restores_the_file_through_the_history(builtin_catalog):
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        notice_override="short notice in a test",
        model=luna,
        retires_on=dt.date(2027, 6, 1),
        successor=None,
        actor="admin:bob",
    )
    catalog_load(reset_lifecycle=True)
    luna.refresh_from_db()
    assert luna.retires_on is None
    assert LifecycleChange.objects.filter(
        model=luna, actor="loadcatalog", field="retires_on"
    ).exists()


def test_an_edited_value_in_the_file_is_applied(builtin_catalog, tmp_path):
    from catalog.loader import DEFAULT_CATALOG

    text = DEFAULT_CATALOG.read_text().replace("nodes = 64", "nodes = 96")
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    report = catalog_load(path=path)
    assert report.updated["pools"] == 1
    assert (
        Deployment.objects.get(model__slug="gpt-5.6-sol", tier__slug="ultrafast").pool.nodes == 96
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t + "\n[[models]\n", "not valid TOML"),
        (lambda t: t.replace('family = "sol"', 'family = "nope"'), "unknown family `nope`"),
        (
            lambda t: t.replace('successor = "gpt-5.6-luna"', 'successor = "gpt-9"'),
            "unknown successor `gpt-9`",
        ),
        (
            lambda t: t.replace("retires_on = 2026-09-18", "retires_on = 2026-01-01"),
            "before its release",
        ),
    ],
)
def test_a_broken_file_is_refused_with_a_clear_message_and_writes_nothing(
    db, tmp_path, edit, message
):
    from catalog.loader import DEFAULT_CATALOG

    path = tmp_path / "catalog.toml"
    path.write_text(edit(DEFAULT_CATALOG.read_text()))
    with pytest.raises(CommandError, match=message):
        call_command("loadcatalog", file=str(path))
    assert ModelVersion.objects.count() == 0  # one transaction: nothing half-written


def test_a_missing_file_is_a_clear_error(db):
    with pytest.raises(CatalogFileError, match="No catalog file"):
        catalog_load(path="/nonexistent/catalog.toml")

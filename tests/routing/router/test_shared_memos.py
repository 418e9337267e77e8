"""The quote path's memos (catalog rows, model options, package scopes, pool loads)
agree across processes: a save anywhere bumps a generation in the shared cache, and a
process holding an old memo reloads on its next read.

"Another replica" is played by changing rows without signals (queryset.update, as the
other process's memo never saw them) and bumping the shared generation as that
replica's save would."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from django.core.cache import cache
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from catalog.models import ModelVersion, Price
from routing.core import shared
from routing.models import PoolLoad
from routing.quota import account_packages
from routing.router import snapshot
from tests.helpers import make_account, make_model, make_package, make_tier

pytestmark = pytest.mark.django_db


def test_catalog_rows_are_kept_until_the_shared_generation_moves():
    model = make_model("m1")
    assert {m.slug for m in snapshot.catalog_rows()} == {"m1"}
    retires = timezone.now() - dt.timedelta(days=1)
    # Another replica retires the model: its rows change, this process's memo does not.
    ModelVersion.objects.filter(pk=model.pk).update(retires_on=retires.date())
    assert snapshot.catalog_rows()[0].retires_on is None  # the memo is used
    shared.bump_now(snapshot.CATALOG)  # that replica's save, seen through the cache
    assert snapshot.catalog_rows()[0].retires_on == retires.date()


def test_a_save_in_this_process_moves_the_shared_generation():
    model = make_model("m1")
    before = shared.generation(snapshot.CATALOG)
    model.retires_on = dt.date(2026, 1, 2)
    model.save()
    assert shared.generation(snapshot.CATALOG) != before


def test_model_options_follow_a_price_change_made_elsewhere():
    model = make_model("m1", price_input="1.00")
    assert snapshot.model_option(model).tiers[0].price_input == 1
    Price.objects.filter(model=model).update(input_per_million=7)
    assert snapshot.model_option(model).tiers[0].price_input == 1
    shared.bump_now(snapshot.CATALOG)
    assert snapshot.model_option(model).tiers[0].price_input == 7


def test_without_the_shared_cache_nothing_is_kept():
    model = make_model("m1")
    snapshot.catalog_rows()
    ModelVersion.objects.filter(pk=model.pk).update(context_window=1000)
    with mock.patch.object(cache, "get", side_effect=RedisConnectionError("away")):
        assert snapshot.catalog_rows()[0].context_window == 1000


def test_package_scopes_follow_a_change_made_elsewhere():
    make_model("m1")
    tier = make_tier("standard")
    account = make_account()
    package = make_package(account)
    assert account_packages(account)[0].tier_ids == frozenset()
    package.tiers.through.objects.bulk_create(  # no m2m_changed: another replica's edit
        [package.tiers.through(quotapackage_id=package.pk, tier_id=tier.pk)]
    )
    assert account_packages(account)[0].tier_ids == frozenset()
    shared.bump_now("package-scopes")
    assert account_packages(account)[0].tier_ids == frozenset({tier.pk})


def test_pool_loads_are_shared_and_dropped_on_a_pool_load_save():
    make_model("m1")
    pool_id = ModelVersion.objects.get(slug="m1").deployments.get().pool_id
    assert snapshot.pool_loads().get(pool_id, 0.0) == 0.0
    assert cache.get(snapshot.POOL_LOADS_KEY) == {}  # what other processes read
    PoolLoad.objects.create(pool_id=pool_id, background_utilisation=0.5)
    assert cache.get(snapshot.POOL_LOADS_KEY) is None
    assert snapshot.pool_loads()[pool_id] == 0.5


def test_the_workers_tier_slugs_follow_a_change_of_the_tier():
    from catalog.models import Tier
    from routing.jobs import worker

    tier = make_tier("standard")
    assert worker.tier_slug(tier.pk) == "standard"
    Tier.objects.filter(pk=tier.pk).update(slug="renamed")  # no signal: still kept
    assert worker.tier_slug(tier.pk) == "standard"
    tier.refresh_from_db()
    tier.slug = "fast"
    tier.save()  # the catalog's receiver drops every catalog memo, this one included
    assert worker.tier_slug(tier.pk) == "fast"


def test_clear_memos_drops_every_registered_memo():
    from routing.accounts import keys
    from routing.jobs import worker
    from routing.quota import packages

    names = {memo.name for memo in shared.MEMOS}
    assert {snapshot.CATALOG, packages.SCOPES, keys.GENERATION} <= names
    assert worker.TIER_SLUGS in shared.MEMOS
    model = make_model("m1")
    snapshot.catalog_rows()
    snapshot.model_option(model)
    assert snapshot.MEMO.entries
    shared.clear_memos()
    assert all(not memo.entries for memo in shared.MEMOS)

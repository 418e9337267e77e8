"""Reads for the router: catalog snapshots and pool loads (background and our own jobs)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from redis.exceptions import RedisError

from catalog.engine import engine_deployment, model_spec
from catalog.models import (
    Benchmark,
    Deployment,
    HardwarePool,
    ModelFamily,
    ModelVersion,
    Price,
    Tier,
)
from routing.core import shared
from routing.core.shared import SharedMemo
from routing.models import PoolLoad
from routing.router import occupancy
from routing.router.route import Benchmark as RouterBenchmark
from routing.router.route import ModelOption, TierOption
from routing.router.timing import OwnSlots

# The catalog changes only when an admin edits it, and the quote path reads it on every
# request: each process keeps what it read, valid while the shared generation "catalog"
# (routing.core.shared) is unchanged. Any save or delete of a catalog row bumps it (now
# and at commit), so an admin's retirement or price change reaches every replica on its
# next request; without the shared cache nothing is kept. Lifecycle *status* is computed
# from the dates at request time, and jobs re-check the lifecycle on the row in their own
# transaction. SNAPSHOT_MAX_AGE_SECONDS bounds a memo's life for changes made without
# signals (raw SQL).
SNAPSHOT_MAX_AGE_SECONDS = 300.0
CATALOG = "catalog"
# Pool loads (background utilisation plus our own jobs' occupancy) are shared by every
# process through the cache for POOL_LOAD_TTL_SECONDS: the only figure on the quote path
# that may be stale, and only by that much (a PoolLoad save drops it at once). They
# steer the wait estimate, never money or lifecycle: slot booking locks the pool row.
POOL_LOAD_TTL_SECONDS = 1.0
POOL_LOADS_KEY = "router:pool-loads"
POOL_STATE_KEY = "router:pool-state"
OWN_QUEUE_UTILISATION = 0.999
MEMO = SharedMemo(CATALOG, max_age=SNAPSHOT_MAX_AGE_SECONDS).register()
CATALOG_MODELS = (ModelVersion, ModelFamily, Deployment, Price, Benchmark, Tier, HardwarePool)


def clear_snapshot(**_kwargs) -> None:
    """Drop this process's catalog memos and every other process's (a new generation)."""
    shared.clear_memos(CATALOG)


def connect_receivers() -> None:
    """Any save or delete of a catalog row drops the catalog memos everywhere, a
    PoolLoad's the pool loads (RoutingConfig.ready)."""
    for model in CATALOG_MODELS:
        name = model.__name__
        post_save.connect(clear_snapshot, sender=model, dispatch_uid=f"snapshot-save-{name}")
        post_delete.connect(clear_snapshot, sender=model, dispatch_uid=f"snapshot-delete-{name}")
    post_save.connect(clear_pool_loads, sender=PoolLoad, dispatch_uid="pool-load-save")
    post_delete.connect(clear_pool_loads, sender=PoolLoad, dispatch_uid="pool-load-delete")


def catalog_rows() -> list[ModelVersion]:
    """Every model version with family, successor and recommended tier (kept while the
    catalog's shared generation holds)."""
    now = time.monotonic()
    token = MEMO.sync(now)  # before the rows: a later bump reloads
    rows = MEMO.get("rows", now)
    if rows is None:
        rows = list(ModelVersion.objects.select_related("family", "successor", "successor_tier"))
        MEMO.put("rows", rows, now, token)
    return rows


def model_option(model: ModelVersion) -> ModelOption:
    now = time.monotonic()
    token = MEMO.sync(now)
    option = MEMO.get(model.pk, now)
    if option is None:
        option = _build_option(model)
        MEMO.put(model.pk, option, now, token)
    return option


def tier_option(deployment: Deployment, price: Price) -> TierOption:
    """What the router sells of one deployment (tier and pool loaded) at its price."""
    return TierOption(
        tier=deployment.tier.slug,
        tier_id=deployment.tier_id,
        rank=deployment.tier.rank,
        pool=deployment.pool.slug,
        pool_id=deployment.pool_id,
        deployment=engine_deployment(deployment.pool, deployment.tier.slug),
        price_input=price.input_per_million,
        price_output=price.output_per_million,
        available_from=deployment.available_from,
    )


def _build_option(model: ModelVersion) -> ModelOption:
    prices = {p.tier_id: p for p in Price.objects.filter(model=model)}
    tiers = []
    for d in Deployment.objects.filter(model=model).select_related("tier", "pool"):
        price = prices.get(d.tier_id)
        if price is None:
            continue  # an unpriced deployment cannot be sold
        tiers.append(tier_option(d, price))
    tiers.sort(key=lambda t: t.rank)
    benchmarks = tuple(
        RouterBenchmark(b.name, b.score, b.duration_minutes)
        for b in Benchmark.objects.filter(model=model)
    )
    return ModelOption(
        id=model.pk,
        slug=model.slug,
        family_id=model.family_id,
        spec=model_spec(model),
        context_window=model.context_window,
        tiers=tuple(tiers),
        benchmarks=benchmarks,
    )


def pool_loads() -> dict[int, float]:
    """Utilisation per pool: traffic outside this service (PoolLoad) plus our own
    work occupying the pool's slots. Shared by every process for POOL_LOAD_TTL_SECONDS
    (loads move slowly); computed here when the cache has none or is away."""
    try:
        loads = cache.get(POOL_LOADS_KEY)
    except (OSError, RedisError):
        loads = None
    if loads is not None:
        return loads
    loads = _compute_pool_loads()
    try:
        cache.set(POOL_LOADS_KEY, loads, timeout=POOL_LOAD_TTL_SECONDS)
    except (OSError, RedisError):
        pass
    return loads


def _compute_pool_loads() -> dict[int, float]:
    loads = dict(PoolLoad.objects.values_list("pool_id", "background_utilisation"))
    for pool_id, busy in own_pool_occupancy().items():
        background = loads.get(pool_id, 0.0)
        if background >= 1.0:
            continue  # declared full: refused whatever we add
        # Our own jobs beyond the pool's slots are a real queue, not a refusal: the pool
        # counts as all but full, so the wait estimate is long and only work whose
        # deadline allows it still goes there; the rest goes to another tier.
        loads[pool_id] = min(OWN_QUEUE_UTILISATION, background + busy)
    return loads


@dataclass(frozen=True)
class PoolState:
    """What the router reads of the pools: each pool's outside load (PoolLoad, the
    engine's load) and our own work on it (slots; routing.router.timing)."""

    loads: dict[int, float]
    own: dict[int, OwnSlots]


def pool_state(at: dt.datetime | None = None) -> PoolState:
    """The pools as the router sees them at `at` (now by default). The present is
    shared by every process for POOL_LOAD_TTL_SECONDS, like the loads; another moment
    (a replay's simulated clock, a test's) is read as it is then."""
    now = timezone.now()
    if at is not None and abs((at - now).total_seconds()) > POOL_LOAD_TTL_SECONDS:
        return _compute_pool_state(at)
    try:
        state = cache.get(POOL_STATE_KEY)
    except (OSError, RedisError):
        state = None
    if state is not None:
        return state
    state = _compute_pool_state(now)
    try:
        cache.set(POOL_STATE_KEY, state, timeout=POOL_LOAD_TTL_SECONDS)
    except (OSError, RedisError):
        pass
    return state


def _compute_pool_state(at: dt.datetime) -> PoolState:
    loads = dict(PoolLoad.objects.values_list("pool_id", "background_utilisation"))
    return PoolState(loads, occupancy.own_slots(at))


def _drop_pool_loads() -> None:
    try:
        cache.delete_many([POOL_LOADS_KEY, POOL_STATE_KEY])
    except (OSError, RedisError):
        pass


def clear_pool_loads(**_kwargs) -> None:
    """Every process recomputes the pool loads on its next read (now and at commit)."""
    _drop_pool_loads()
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(_drop_pool_loads)


def own_pool_occupancy() -> dict[int, float]:
    """Share of each pool's slots held or awaited by this service's jobs."""
    return own_occupancy(timezone.now())


def own_occupancy(at: dt.datetime) -> dict[int, float]:
    """Share of each pool held or awaited by this service's jobs (queued jobs count:
    they will need a slot; above 1.0 the pool has a queue). From the running totals
    (routing.router.occupancy): flat in the number of jobs."""
    return occupancy.own_occupancy(at)

"""Reads for the router: catalog snapshots and pool loads (background and our own jobs)."""

from __future__ import annotations

import datetime as dt
import threading
import time

from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from catalog.engine import engine_deployment, model_spec
from catalog.models import Benchmark, Deployment, ModelVersion, Price, Tier
from routing.models import PoolLoad
from routing.router import occupancy
from routing.router.route import Benchmark as RouterBenchmark
from routing.router.route import ModelOption, TierOption

# The catalog changes only when an admin edits it, and the quote path reads it on every
# request: keep it for a few seconds per process, and drop it at once on a local save.
# Lifecycle *status* is never cached: it is computed from the cached dates at request
# time, so a retirement takes effect on its day; an admin's edit of the dates reaches
# other processes within SNAPSHOT_TTL_SECONDS. Jobs re-check the lifecycle in their
# own transaction.
SNAPSHOT_TTL_SECONDS = 5.0
POOL_LOAD_TTL_SECONDS = 1.0
OWN_QUEUE_UTILISATION = 0.999
_snapshot_lock = threading.Lock()
_snapshot: dict[int, tuple[float, ModelOption]] = {}
_catalog_rows: list = [0.0, None]  # [loaded_at, list[ModelVersion]]
_pool_loads: list = [0.0, None]


def clear_snapshot(**_kwargs) -> None:
    with _snapshot_lock:
        _snapshot.clear()
        _catalog_rows[:] = [0.0, None]


for _model in (ModelVersion, Deployment, Price, Benchmark, Tier):
    post_save.connect(
        clear_snapshot, sender=_model, dispatch_uid=f"snapshot-save-{_model.__name__}"
    )
    post_delete.connect(
        clear_snapshot, sender=_model, dispatch_uid=f"snapshot-delete-{_model.__name__}"
    )


def catalog_rows() -> list[ModelVersion]:
    """Every model version with family, successor and recommended tier (cached)."""
    loaded_at, rows = _catalog_rows
    now = time.monotonic()
    if rows is None or now - loaded_at >= SNAPSHOT_TTL_SECONDS:
        rows = list(ModelVersion.objects.select_related("family", "successor", "successor_tier"))
        _catalog_rows[:] = [now, rows]
    return rows


def model_option(model: ModelVersion) -> ModelOption:
    now = time.monotonic()
    cached = _snapshot.get(model.pk)
    if cached and now - cached[0] < SNAPSHOT_TTL_SECONDS:
        return cached[1]
    option = _build_option(model)
    with _snapshot_lock:
        _snapshot[model.pk] = (now, option)
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
    work occupying the pool's slots. Cached for a second: loads move slowly."""
    loaded_at, loads = _pool_loads
    now = time.monotonic()
    if loads is not None and now - loaded_at < POOL_LOAD_TTL_SECONDS:
        return loads
    loads = dict(PoolLoad.objects.values_list("pool_id", "background_utilisation"))
    for pool_id, busy in own_pool_occupancy().items():
        background = loads.get(pool_id, 0.0)
        if background >= 1.0:
            continue  # declared full: refused whatever we add
        # Our own jobs beyond the pool's slots are a real queue, not a refusal: the pool
        # counts as all but full, so the wait estimate is long and only work whose
        # deadline allows it still goes there; the rest goes to another tier.
        loads[pool_id] = min(OWN_QUEUE_UTILISATION, background + busy)
    _pool_loads[:] = [now, loads]
    return loads


def clear_pool_loads(**_kwargs) -> None:
    _pool_loads[:] = [0.0, None]


post_save.connect(clear_pool_loads, sender=PoolLoad, dispatch_uid="pool-load-save")
post_delete.connect(clear_pool_loads, sender=PoolLoad, dispatch_uid="pool-load-delete")


def own_pool_occupancy() -> dict[int, float]:
    """Share of each pool's slots held or awaited by this service's jobs."""
    return own_occupancy(timezone.now())


def own_occupancy(at: dt.datetime) -> dict[int, float]:
    """Share of each pool held or awaited by this service's jobs (queued jobs count:
    they will need a slot; above 1.0 the pool has a queue). From the running totals
    (routing.router.occupancy): flat in the number of jobs."""
    return occupancy.own_occupancy(at)

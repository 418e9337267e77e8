"""What a replay's throwaway database holds: the built-in catalog, its pools scaled to
the replay's share, and one account per policy with credits enough for the trace."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import simengine
from catalog import lifecycle
from catalog.engine import model_spec
from catalog.loader import catalog_load
from catalog.models import Deployment, HardwarePool, ModelVersion
from routing.models import Account, Job, LedgerEntry, QuotaPackage, QuotaReservation
from routing.quota.packages import package_create
from routing.router.route import ModelOption
from routing.router.snapshot import clear_pool_loads, clear_snapshot, model_option

# The model a replay runs on unless told otherwise: the catalog's flagship.
DEFAULT_MODEL = "gpt-5.6-sol"
# The replay's clock starts here (UTC): the trace's own day and hour in the catalog's
# year, fixed so that a replay repeats whatever the day it runs.
DEFAULT_START = dt.datetime(2026, 11, 16, 18, 0, tzinfo=dt.UTC)
# The pools are scaled to this share of their nodes: the trace is one service of a few
# requests a second, the catalog's pools hold thousands of GPUs (a full pool would never
# queue at any arrival rate a trace has: a 4,096-GPU pool serves ~10,000 Standard
# streams of Sol at once). A pool keeps at least one replica of every model it serves.
DEFAULT_POOL_SCALE = 1 / 64
CREDITS = Decimal("1000000000")


class WorldError(ValueError):
    pass


def world_build(*, model: str, pool_scale: float, at: dt.datetime) -> ModelOption:
    """Load the catalog, scale the pools, and return the model's routing option (the
    snapshot the router reads). Raises WorldError for a model that cannot be replayed."""
    catalog_load()
    version = ModelVersion.objects.filter(slug=model).first()
    if version is None:
        known = ", ".join(ModelVersion.objects.order_by("slug").values_list("slug", flat=True))
        raise WorldError(f"unknown model {model!r}; known: {known}")
    if not lifecycle.is_serving(version, at):
        raise WorldError(f"{model} is not serving on {at:%Y-%m-%d} (the replay's clock)")
    pools_scale(pool_scale)
    clear_snapshot()
    clear_pool_loads()
    option = model_option(version)
    if not option.tiers:
        raise WorldError(f"{model} has no priced deployment")
    if "standard" not in {t.tier for t in option.tiers}:
        raise WorldError(f"{model} has no Standard tier (deadlines are set from its time)")
    return option


def pools_scale(scale: float) -> dict[str, int]:
    """Every pool's nodes times `scale`, at least one replica of each model deployed on
    it (the engine refuses a pool smaller than one replica). Returns {pool: nodes}."""
    out = {}
    for pool in HardwarePool.objects.all():
        least = 1
        for d in Deployment.objects.filter(pool=pool).select_related("model"):
            try:
                place = simengine.placement(model_spec(d.model), pool.device)
            except simengine.SimEngineError:
                continue  # cannot run there at all; the router says so per request
            least = max(least, place.nodes_per_replica)
        nodes = max(least, round(pool.nodes * scale))
        if nodes != pool.nodes:
            pool.nodes = nodes
            pool.save(update_fields=["nodes"])  # the catalog memo is dropped (signals)
        out[pool.slug] = nodes
    return out


def account_for(name: str, *, at: dt.datetime) -> Account:
    """A replay account paying from one package with credits enough for any trace (a
    one-off period, so no reset falls inside the replay), no rate limit."""
    account = Account.objects.create(name=name)
    package_create(
        account=account,
        name="replay",
        limit=CREDITS,
        period=QuotaPackage.Period.ONCE,
        at=at - dt.timedelta(days=1),
    )
    return account


def account_forget(account: Account) -> None:
    """Delete an account and everything it did (jobs, reservations, ledger, packages):
    the next policy's jobs reuse the same ids, and a reservation's reference (`job:<id>`)
    is unique, so nothing of a finished run may stay."""
    Job.objects.filter(account=account).delete()
    LedgerEntry.objects.filter(package__account=account).delete()
    QuotaReservation.objects.filter(package__account=account).delete()
    QuotaPackage.objects.filter(account=account).delete()
    account.delete()

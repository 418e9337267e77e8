"""This service's own work per pool, from the running totals the database keeps
(routing.models.PoolOccupancy, maintained by triggers in the job's own transaction,
generated from the rule in routing.models.occupancy):
no read grows with the number of jobs. `occupancy_mismatches` compares the totals with
the jobs (`ledger_check` reports it; beat reconciles every minute)."""

from __future__ import annotations

import datetime as dt
import logging

from django.db import connection, transaction
from django.db.models import Count, Sum

from catalog.models import HardwarePool
from routing.models import Job, PoolOccupancy
from routing.models.occupancy import COUNT_COLUMNS, FILL, SHARE_COLUMNS, totals_by_status
from routing.router.timing import OwnSlots

logger = logging.getLogger(__name__)

# Float totals drift by rounding (~1e-16 per change): equal within this.
TOLERANCE = 1e-6

_POOL_LOCK_SQL = f"SELECT 1 FROM {HardwarePool._meta.db_table} WHERE id = %s FOR NO KEY UPDATE"


def pool_lock(pool_id: int) -> None:
    """Lock the pool's row until the transaction ends (PostgreSQL; SQLite has one
    writer at a time): one slot booking at a time per pool. The lock order is the pool
    row, then the occupancy rows its jobs' triggers write: a transaction that writes a
    job of the pool and then books its slot (a chat completion: insert, then claim)
    takes it before the insert, so it never holds an occupancy row while it waits for
    the pool (the deadlock a claim holding the pool and wanting that row made)."""
    if connection.features.has_select_for_update:
        with connection.cursor() as cur:
            cur.execute(_POOL_LOCK_SQL, [pool_id])


def pool_totals(pool_id: int | None = None) -> dict[int, dict]:
    """{pool_id: {queued_share, running_share, queued, running}} from the counters."""
    qs = PoolOccupancy.objects.all()
    if pool_id is not None:
        qs = qs.filter(pool_id=pool_id)
    return {
        r["pool_id"]: r
        for r in qs.values("pool_id").annotate(
            queued_share=Sum("queued_share"),
            running_share=Sum("running_share"),
            queued=Sum("queued"),
            running=Sum("running"),
        )
    }


def running_share(pool_id: int) -> float:
    """Slot share held by the pool's running jobs (those past their end whose finish
    has not run yet included)."""
    row = pool_totals(pool_id).get(pool_id)
    return max(0.0, row["running_share"]) if row else 0.0


# A pool's running jobs are read (by end) for the router's slot wait when the pool is at
# least this busy, or holds few enough of them that reading is cheap: below both, every
# tier's stream fits (a share of one stream is at most 1 / its stream capacity).
HOLDING_BUSY = 0.5
HOLDING_FEW = 64


def own_occupancy(at: dt.datetime) -> dict[int, float]:
    """Share of each pool held or awaited by this service's jobs: queued jobs plus
    running jobs not yet past their end (`at`)."""
    return {pool_id: slots.busy for pool_id, slots in own_slots(at, holding=False).items()}


def own_slots(at: dt.datetime, *, holding: bool = True) -> dict[int, OwnSlots]:
    """Our own work on each pool at `at` (routing.router.timing.OwnSlots): the slot
    share of queued jobs and of running jobs not yet past their end, and, with
    `holding`, the running jobs by end where the router may need them. The counters hold
    every running job; the few past their end and awaiting their finish are read by
    index and taken off."""
    ended = {
        r["pool_id"]: r
        for r in Job.objects.filter(status=Job.Status.RUNNING, finishes_at__lte=at)
        .values("pool_id")
        .annotate(share=Sum("slot_share"), n=Count("id"))
    }
    out = {}
    for pool_id, r in pool_totals().items():
        gone = ended.get(pool_id, {"share": 0.0, "n": 0})
        running_n = r["running"] - gone["n"]
        if r["queued"] <= 0 and running_n <= 0:
            continue  # nothing of ours on the pool (as if no job row matched)
        running = max(0.0, r["running_share"] - gone["share"])
        queued = max(0.0, r["queued_share"])
        held: tuple = ()
        if (
            holding
            and running_n > 0
            and (running + queued >= HOLDING_BUSY or running_n <= HOLDING_FEW)
        ):
            held = tuple(
                Job.objects.filter(pool_id=pool_id, status=Job.Status.RUNNING, finishes_at__gt=at)
                .order_by("finishes_at")
                .values_list("finishes_at", "slot_share")
            )
        out[pool_id] = OwnSlots(running, queued, held)
    return out


def _actual() -> dict[int, dict]:
    rows = (
        Job.objects.filter(status__in=Job.ACTIVE).values("pool_id").annotate(**totals_by_status())
    )
    return {r["pool_id"]: r for r in rows}


def occupancy_mismatches() -> list[dict]:
    """Pools whose counters differ from their active jobs (a full scan of the active
    jobs: for the periodic check, never on a request path)."""
    zero = {**dict.fromkeys(SHARE_COLUMNS, 0.0), **dict.fromkeys(COUNT_COLUMNS, 0)}
    counted, actual = pool_totals(), _actual()
    out = []
    for pool_id in sorted(set(counted) | set(actual)):
        c, a = counted.get(pool_id, zero), actual.get(pool_id, zero)
        if (
            c["queued"] != a["queued"]
            or c["running"] != a["running"]
            or abs(c["queued_share"] - a["queued_share"]) > TOLERANCE
            or abs(c["running_share"] - a["running_share"]) > TOLERANCE
        ):
            out.append(
                {
                    "pool_id": pool_id,
                    "counted": {k: c[k] for k in zero},
                    "jobs": a and {k: a[k] for k in zero},
                }
            )
    return out


def occupancy_reconcile() -> list[dict]:
    """Check the counters; when they differ from the jobs, log it and rewrite them from
    the jobs (PostgreSQL: under a lock that waits for transactions changing them, so
    none is lost). Returns the mismatches found (before the repair)."""
    if not occupancy_mismatches():
        return []
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("LOCK TABLE routing_pooloccupancy IN SHARE ROW EXCLUSIVE MODE")
        found = occupancy_mismatches()
        if found:
            logger.warning("pool occupancy counters differed from the jobs: %s", found)
            with connection.cursor() as cur:
                cur.execute("DELETE FROM routing_pooloccupancy")
                cur.execute(FILL)
    return found

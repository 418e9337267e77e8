"""Each pool's occupancy counters (routing.models.PoolOccupancy, kept by triggers) equal
its queued and running jobs through every change of a job, and the reads built on them
answer what a scan of the jobs answers."""

import datetime as dt
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Q, Sum

from routing.jobs import cancel as jobs_cancel
from routing.jobs import worker as jobs_worker
from routing.models import Job, PoolOccupancy
from routing.router import occupancy
from routing.tasks.housekeeping import reconcile_occupancy
from tests.helpers import job_submit as submit

pytestmark = pytest.mark.django_db


def scanned(at: dt.datetime) -> dict[int, float]:
    """What own_occupancy answered before the counters: a scan of the active jobs."""
    rows = (
        Job.objects.filter(
            Q(status=Job.Status.QUEUED) | Q(status=Job.Status.RUNNING, finishes_at__gt=at)
        )
        .values("pool_id")
        .annotate(share=Sum("slot_share"))
    )
    return {r["pool_id"]: r["share"] for r in rows}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=1e-9) for k in a)


def test_counters_follow_every_change_of_a_job(api, account):
    assert occupancy.occupancy_mismatches() == [] and occupancy.pool_totals() == {}
    ids = [submit(api).json()["id"] for _ in range(4)]
    job = Job.objects.get(pk=ids[0])
    totals = occupancy.pool_totals()[job.pool_id]
    assert totals["queued"] == 4 and totals["running"] == 0
    assert totals["queued_share"] == pytest.approx(4 * job.slot_share)
    running = jobs_worker.job_run(ids[0])
    jobs_worker.job_run(ids[1])
    jobs_cancel.job_cancel(job=Job.objects.get(pk=ids[2]))
    totals = occupancy.pool_totals()[job.pool_id]
    assert (totals["queued"], totals["running"]) == (1, 2)
    assert occupancy.occupancy_mismatches() == []
    jobs_worker.job_finish(ids[0], at=running.finishes_at + dt.timedelta(seconds=1))
    # Bulk writes behind the ORM's back are counted too (triggers, not signals).
    Job.objects.filter(pk=ids[3]).update(status=Job.Status.FAILED)
    Job.objects.filter(pk=ids[1]).delete()
    totals = occupancy.pool_totals()[job.pool_id]
    assert (totals["queued"], totals["running"]) == (0, 0)
    assert totals["queued_share"] == pytest.approx(0) and totals["running_share"] == pytest.approx(
        0
    )
    assert occupancy.occupancy_mismatches() == []


def test_own_occupancy_answers_what_the_scan_answered(api):
    ids = [submit(api).json()["id"] for _ in range(3)]
    assert occupancy.own_occupancy(dt.datetime.now(dt.UTC)) == pytest.approx(
        scanned(dt.datetime.now(dt.UTC))
    )
    job = jobs_worker.job_run(ids[0])
    for at in (job.started_at, job.finishes_at, job.finishes_at + dt.timedelta(seconds=1)):
        assert same(occupancy.own_occupancy(at), scanned(at)), at
    Job.objects.filter(pk__in=ids[1:]).update(status=Job.Status.CANCELLED)
    past = job.finishes_at + dt.timedelta(seconds=1)
    assert occupancy.own_occupancy(past) == scanned(past) == {}  # no row: pool unmeasured


def test_a_drifted_counter_is_reported_and_reconciled(api, account):
    submit(api)
    call_command("ledger_check", "--json", stdout=StringIO())
    PoolOccupancy.objects.update(queued_share=5.0)  # behind the triggers' back
    found = occupancy.occupancy_mismatches()
    assert len(found) == 1 and found[0]["counted"]["queued_share"] == 5.0
    with pytest.raises(CommandError):
        call_command("ledger_check", stdout=StringIO())
    assert reconcile_occupancy() == 1
    assert occupancy.occupancy_mismatches() == []
    assert reconcile_occupancy() == 0
    call_command("ledger_check", stdout=StringIO())


def pool_occupancy(pool_id: int, at: dt.datetime) -> list[tuple[dt.datetime, float]]:
    """The oracle's input: (finishes_at, share) of the jobs holding slots of a pool at `at`,
    every one read."""
    return list(
        Job.objects.filter(pool_id=pool_id, status=Job.Status.RUNNING, finishes_at__gt=at)
        .order_by("finishes_at")
        .values_list("finishes_at", "slot_share")
    )


def next_slot(
    holding: list[tuple[dt.datetime, float]], share: float, at: dt.datetime
) -> dt.datetime:
    """The oracle: when a stream of `share` fits the pool, from every running job (sorted
    by end): now if there is room, else when enough of them have finished."""
    busy = sum(s for _, s in holding)
    if busy + share <= 1.0 + 1e-9:
        return at
    for ends, s in holding:
        busy -= s
        if busy + share <= 1.0 + 1e-9:
            return ends
    return at


def test_a_full_pool_walks_the_running_jobs_like_next_slot(api):
    from tests.routing.jobs.test_jobs import fill_pool, small_pool

    small_pool()
    ran = fill_pool(api)
    pool_id = ran[0].pool_id
    for at in sorted({j.started_at for j in ran} | {j.finishes_at for j in ran}):
        for share in (ran[0].slot_share, 0.5, 1.0):
            want = next_slot(pool_occupancy(pool_id, at), share, at)
            assert jobs_worker.slot_start(pool_id, share, at) == want


def _words(sql: str) -> str:
    return " ".join(sql.split())


def test_the_installed_triggers_are_the_ones_generated_from_the_rule():
    """The database's triggers (installed by the migrations) are the SQL that
    routing.models.occupancy generates from Job.ACTIVE and COUNTED, on either database."""
    from django.db import connection

    from routing.models import occupancy as rule

    assert set(rule.COUNTED) == set(Job.ACTIVE)
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                "AND tbl_name = 'routing_job' ORDER BY name"
            )
            installed = sorted(_words(row[0]) for row in cur.fetchall())
            assert installed == sorted(_words(sql) for sql in rule.SQLITE_UP)
        else:
            cur.execute("SELECT prosrc FROM pg_proc WHERE proname = 'routing_job_occupancy'")
            (body,) = cur.fetchone()
            generated = rule.POSTGRES_UP.split("$$")[1]
            assert _words(body) == _words(generated)

"""Jobs through the API and the services, in process (the worker's steps are called
directly with explicit times; tests/routing/jobs/test_jobs_e2e.py runs real workers)."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from catalog.models import HardwarePool
from routing import quota
from routing.accounts.accounts import account_create
from routing.jobs import sweep as jobs_sweep_mod
from routing.jobs import worker as jobs_worker
from routing.models import Job, LedgerEntry, QuotaPackage, QuotaReservation
from tests.helpers import GDPVAL, ApiClient
from tests.helpers import job_submit as submit

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def later(job: Job, seconds=1) -> dt.datetime:
    return job.finishes_at + dt.timedelta(seconds=seconds)


def test_a_job_is_accepted_with_its_prediction_and_reservation(api, account):
    r = submit(api, prompt="Fix the failing test")
    assert r.status_code == 202, r.json()
    body = r.json()
    assert body["status"] == "queued" and body["tier"] == "standard"
    assert body["model"] == "sol" and body["served_model"] == "gpt-5.6-sol"
    assert body["predicted"]["total_seconds"] <= 600 and body["predicted"]["cost"] == "0.920000"
    assert body["package"]["name"] == "Main (monthly)"
    assert r["Location"].endswith(f"/api/v1/jobs/{body['id']}")
    job = Job.objects.get(pk=body["id"])
    assert job.prompt == "Fix the failing test"
    assert job.reservation.amount == Decimal("0.92") and job.reservation.state == "held"
    pkg = account.packages.get()
    assert pkg.reserved == Decimal("0.92")
    assert quota.ledger_mismatches() == []


def test_the_task_is_sent_only_after_commit(api, django_capture_on_commit_callbacks, dispatched):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        body = submit(api).json()
    assert len(callbacks) == 1 and dispatched == [("routing.run_job", (body["id"],))]


def test_run_then_finish_settles_once(api, account):
    job_id = submit(api).json()["id"]
    job = jobs_worker.job_run(job_id)
    assert job.status == "running" and job.finishes_at > job.started_at
    assert jobs_worker.job_run(job_id) is None  # a redelivered message does nothing
    assert jobs_worker.job_finish(job_id) is None  # not yet: the simulated run goes on
    done = jobs_worker.job_finish(job_id, at=later(job))
    assert done.status == "succeeded" and done.cost == Decimal("0.92")
    assert jobs_worker.job_finish(job_id, at=later(job, 5)) is None  # once only
    pkg = account.packages.get()
    assert (pkg.spent, pkg.reserved) == (Decimal("0.92"), 0)
    assert LedgerEntry.objects.filter(kind="settle").count() == 1
    assert quota.ledger_mismatches() == []


def test_a_run_ended_at_the_claim_is_settled_by_the_run_task_alone(
    api, account, settings, dispatched, django_capture_on_commit_callbacks
):
    # A simulated hour passes in a wall nanosecond: the run has ended when the claim
    # writes, so the run task settles it in the same transaction (no finish message).
    settings.SIM_TIME_SCALE = 3.6e12
    job_id = submit(api).json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        job = jobs_worker.job_run(job_id)
    assert job.status == "succeeded" and job.cost == Decimal("0.92")
    assert job.started_at <= job.finishes_at <= job.finished_at
    assert dispatched.of(jobs_worker.FINISH_TASK) == []
    assert jobs_worker.job_run(job_id) is None  # a redelivered message does nothing
    assert jobs_worker.job_finish(job_id, at=later(job, 5)) is None
    job.refresh_from_db()
    assert job.status == "succeeded" and job.reservation.state == "settled"
    pkg = account.packages.get()
    assert (pkg.spent, pkg.reserved) == (Decimal("0.92"), 0)
    assert LedgerEntry.objects.filter(kind="settle").count() == 1
    assert quota.ledger_mismatches() == []


def test_a_run_that_ends_later_gets_one_finish_message(
    api, dispatched, django_capture_on_commit_callbacks
):
    job_id = submit(api).json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        job = jobs_worker.job_run(job_id)
    assert job.status == "running" and job.reservation.state == "held"
    assert dispatched.of(jobs_worker.FINISH_TASK) == [(str(job.pk),)]


def test_the_finished_job_reads_back_with_timings_usage_and_simulated_output(api):
    job_id = submit(api, output_tokens=300, input_tokens=1000, turns=1, tool_seconds=0).json()["id"]
    job = jobs_worker.job_run(job_id)
    jobs_worker.job_finish(job_id, at=later(job))
    body = api.get(f"/api/v1/jobs/{job_id}").json()
    assert body["status"] == "succeeded"
    for key in (
        "queue_seconds",
        "ttft_seconds",
        "generation_seconds",
        "tool_seconds",
        "total_seconds",
    ):
        assert key in body["predicted"] and key in body["simulated"]
    assert body["usage"] == {"input_tokens": 1000, "output_tokens": 300}
    assert body["cost"] == body["predicted"]["cost"]
    output = body["output"]
    assert output["simulated"] is True and output["tokens"] == 300
    # An excerpt by default: the first 200 words, saying there is more and where.
    assert output["truncated"] is True and len(output["text"].split()) == 200
    assert output["full_url"].endswith(f"/api/v1/jobs/{job_id}?output=full")
    full = api.get(f"/api/v1/jobs/{job_id}?output=full").json()["output"]
    assert full["truncated"] is False and "full_url" not in full
    assert len(full["text"].split()) == 300
    assert full["text"].startswith(output["text"] + " ")  # the excerpt is the text's start
    again = api.get(f"/api/v1/jobs/{job_id}?output=full").json()
    assert again["output"]["text"] == full["text"]  # deterministic
    assert body["meets_deadline"] is True


def test_a_short_output_is_whole_by_default(api):
    job_id = submit(api, output_tokens=50, input_tokens=1000, turns=1, tool_seconds=0).json()["id"]
    job = jobs_worker.job_run(job_id)
    jobs_worker.job_finish(job_id, at=later(job))
    output = api.get(f"/api/v1/jobs/{job_id}").json()["output"]
    assert output["truncated"] is False and len(output["text"].split()) == 50
    assert "full_url" not in output
    assert api.get(f"/api/v1/jobs/{job_id}?output=excerpt").json()["output"] == output


def test_a_gdpval_sized_job_reads_back_small_by_default(api):
    job_id = submit(api, deadline_seconds=3600).json()["id"]
    job = jobs_worker.job_run(job_id)
    jobs_worker.job_finish(job_id, at=later(job, seconds=3600))
    small = api.get(f"/api/v1/jobs/{job_id}")
    full = api.get(f"/api/v1/jobs/{job_id}?output=full")
    assert len(small.content) < 5_000 < 100_000 < len(full.content)
    assert len(full.json()["output"]["text"].split()) == GDPVAL["output_tokens"]


@pytest.mark.parametrize("query", ["output=all", "output=", "output=full&output=full"])
def test_a_bad_output_parameter_is_a_400(api, query):
    job_id = submit(api).json()["id"]
    r = api.get(f"/api/v1/jobs/{job_id}?{query}")
    assert r.status_code == 400 and r.json()["parameter"] == "output"


def test_an_idempotency_key_replays_the_same_job(api, account):
    first = submit(api, key="abc-1")
    again = submit(api, key="abc-1")
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1 and QuotaReservation.objects.count() == 1
    other = submit(api, key="abc-2")
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]


def test_an_idempotency_key_with_another_body_is_refused(api):
    submit(api, key="abc-1")
    r = submit(api, key="abc-1", deadline_seconds=3600)
    assert r.status_code == 422 and r.json()["type"].endswith("/idempotency-key-reused")
    assert Job.objects.count() == 1


def test_keys_are_per_account(api, builtin_catalog):
    _, other_key = account_create(name="other")
    a = submit(api, key="same").json()["id"]
    b = submit(ApiClient(other_key), key="same").json()["id"]
    assert a != b


def test_refusals_write_nothing(api, account):
    QuotaPackage.objects.filter(account=account).update(spent=Decimal("99.99"))
    assert submit(api).status_code == 429
    QuotaPackage.objects.filter(account=account).update(spent=0)
    assert submit(api, model="gpt-5.3-codex-spark", turns=1).status_code == 410
    assert submit(api, deadline_seconds=30).status_code == 422
    assert submit(api, input_tokens=-4).status_code == 400
    assert not Job.objects.exists() and not QuotaReservation.objects.exists()
    assert account.packages.get().reserved == 0


def test_cancel_a_queued_job_releases_its_reservation(api, account):
    job_id = submit(api).json()["id"]
    r = api.post_json(f"/api/v1/jobs/{job_id}/cancel", {})
    assert (
        r.status_code == 200
        and r.json()["status"] == "cancelled"
        and r.json()["cost"] == "0.000000"
    )
    assert api.post_json(f"/api/v1/jobs/{job_id}/cancel", {}).json()["status"] == "cancelled"
    assert jobs_worker.job_run(job_id) is None  # a late message does not revive it
    pkg = account.packages.get()
    assert (pkg.spent, pkg.reserved) == (0, 0)
    assert quota.ledger_mismatches() == []


def test_cancel_a_running_job_frees_its_slot_and_charges_nothing(api, account):
    job_id = submit(api).json()["id"]
    job = jobs_worker.job_run(job_id)
    r = api.post_json(f"/api/v1/jobs/{job_id}/cancel", {})
    assert r.json()["status"] == "cancelled"
    job.refresh_from_db()
    assert job.finishes_at <= job.cancelled_at
    assert jobs_worker.job_finish(job_id, at=later(job, 600)) is None
    assert account.packages.get().spent == 0


def test_a_finished_job_cannot_be_cancelled(api):
    job_id = submit(api).json()["id"]
    job = jobs_worker.job_run(job_id)
    jobs_worker.job_finish(job_id, at=later(job))
    r = api.post_json(f"/api/v1/jobs/{job_id}/cancel", {})
    assert r.status_code == 409 and r["Content-Type"] == PROBLEM


def test_someone_elses_job_is_a_404(api, builtin_catalog):
    _, other_key = account_create(name="other")
    other = ApiClient(other_key)
    job_id = submit(api).json()["id"]
    assert other.get(f"/api/v1/jobs/{job_id}").status_code == 404
    assert other.post_json(f"/api/v1/jobs/{job_id}/cancel", {}).status_code == 404
    assert other.get("/api/v1/jobs").json()["data"] == []
    assert api.get("/api/v1/jobs/not-a-uuid").status_code == 404


def test_list_filters_and_pages(api):
    ids = [submit(api).json()["id"] for _ in range(3)]
    jobs_worker.job_run(ids[0])
    page = api.get("/api/v1/jobs?limit=2").json()
    assert [j["id"] for j in page["data"]] == ids[::-1][:2] and page["has_more"]
    rest = api.get(page["next"]).json()
    assert [j["id"] for j in rest["data"]] == [ids[0]]
    assert [j["id"] for j in api.get("/api/v1/jobs?status=running").json()["data"]] == [ids[0]]
    assert len(api.get("/api/v1/jobs?model=gpt-5.6-sol").json()["data"]) == 3
    assert api.get("/api/v1/jobs?model=gpt-5.6-luna").json()["data"] == []
    assert api.get("/api/v1/jobs?status=done").status_code == 400


def small_pool():
    # One replica of Sol Standard: 8 H200s, a few dozen streams.
    HardwarePool.objects.filter(slug="h200-main").update(nodes=8)


def fill_pool(api) -> list[Job]:
    """Submit and run Standard jobs with a loose deadline until the pool is over full."""
    from routing.router.snapshot import clear_pool_loads

    first = jobs_worker.job_run(submit(api, tier="standard", deadline_seconds=86400).json()["id"])
    ran = [first]
    for _ in range(round(1 / first.slot_share) + 1):
        clear_pool_loads()  # the router sees every job at once (no 1 s cache lag)
        body = submit(api, tier="standard", deadline_seconds=86400).json()
        ran.append(jobs_worker.job_run(body["id"]))
    return ran


def test_a_full_pool_makes_later_jobs_wait(api):
    small_pool()
    ran = fill_pool(api)
    capacity = round(1 / ran[0].slot_share)
    first_end = min(j.finishes_at for j in ran[:capacity])
    assert all(j.started_at < first_end for j in ran[:capacity])  # all fit at once
    late = ran[capacity:]
    assert late and all(j.started_at >= first_end for j in late)  # these wait for a slot
    assert all(j.simulated["queue_seconds"] > 10 for j in late)


def test_a_full_pool_sends_the_next_jobs_to_another_tier(api):
    small_pool()
    assert submit(api).json()["tier"] == "standard"
    fill_pool(api)
    from routing.router.snapshot import clear_pool_loads

    clear_pool_loads()
    nxt = submit(api).json()
    assert nxt["tier"] == "ultrafast", nxt  # the only tier on another pool that meets 600 s
    q = api.post_json("/api/v1/quotes", GDPVAL | {"deadline_seconds": 600}).json()
    standard = next(c for c in q["candidates"] if c["tier"] == "standard")
    assert "misses the deadline" in standard["reason"]
    # The wait is for a slot of the full pool: until enough of our running jobs on it
    # have ended to make room for those already waiting, the queued one and this one.
    ends = list(
        Job.objects.filter(tier__slug="standard", status=Job.Status.RUNNING)
        .order_by("finishes_at")
        .values_list("finishes_at", flat=True)
    )
    capacity = round(1 / Job.objects.filter(tier__slug="standard").first().slot_share)
    queued = Job.objects.filter(tier__slug="standard", status=Job.Status.QUEUED).count()
    expected_wait = (ends[len(ends) + queued - capacity] - timezone.now()).total_seconds()
    assert standard["predicted"]["queue_seconds"] == pytest.approx(expected_wait, abs=5)
    # A deadline the queue allows still goes to the cheap, busy pool.
    assert submit(api, deadline_seconds=86400).json()["tier"] == "flex"


def test_the_sweeper_finishes_overdue_jobs_and_resends_stale_ones(api, dispatched, settings):
    stale_id = submit(api).json()["id"]
    running = jobs_worker.job_run(submit(api).json()["id"])
    settings.JOB_RESEND_AFTER_SECONDS = 30
    soon = running.created_at + dt.timedelta(seconds=5)
    assert jobs_sweep_mod.jobs_sweep(at=soon) == {"finished": 0, "resent": 0}
    report = jobs_sweep_mod.jobs_sweep(at=later(running, 60))
    assert report == {"finished": 1, "resent": 1}
    assert dispatched == [("routing.run_job", (stale_id,))]
    assert jobs_sweep_mod.jobs_sweep(at=later(running, 61)) == {"finished": 0, "resent": 0}
    assert Job.objects.get(pk=running.pk).status == "succeeded"


def test_time_scale_compresses_wall_time(api, settings):
    settings.SIM_TIME_SCALE = 100.0
    job = jobs_worker.job_run(submit(api).json()["id"])
    sim = job.simulated["total_seconds"] - job.simulated["queue_seconds"]
    wall = (job.finishes_at - job.started_at).total_seconds()
    assert wall == pytest.approx(sim / 100, rel=1e-3)
    assert api.get(f"/api/v1/jobs/{job.pk}").json()["time_scale"] == 100.0


def test_ledger_check_command_passes_and_catches_a_mismatch(api, account):
    from io import StringIO

    from django.core.management import CommandError, call_command

    job = jobs_worker.job_run(submit(api).json()["id"])
    jobs_worker.job_finish(job.pk, at=later(job))
    out = StringIO()
    call_command("ledger_check", "--json", stdout=out)
    assert '"ok": true' in out.getvalue()
    QuotaPackage.objects.filter(account=account).update(
        spent=Decimal("5")
    )  # behind the ledger's back
    with pytest.raises(CommandError):
        call_command("ledger_check", stdout=StringIO())


def test_admin_lists_jobs_and_cancels_them(admin_client, api, account):
    job_id = submit(api).json()["id"]
    html = admin_client.get("/admin/routing/job/?status=queued").content.decode()
    assert job_id in html
    admin_client.post(
        "/admin/routing/job/", {"action": "cancel_jobs", "_selected_action": [job_id]}
    )
    assert Job.objects.get(pk=job_id).status == "cancelled"
    assert account.packages.get().reserved == 0


def test_no_countdown_is_longer_than_a_broker_holds_a_message(monkeypatch, settings):
    """A broker holds an unacked countdown message only so long (RabbitMQ's
    consumer_timeout closes the channel, Redis redelivers after its visibility
    timeout): a finish hours away is sent at most BROKER_MAX_COUNTDOWN_SECONDS ahead;
    job_finish_when_due sends it again from there."""
    from routing.batches import send as batch_send
    from routing.core import dispatch

    settings.BROKER_MAX_COUNTDOWN_SECONDS = 600
    sent = []

    def record(name, *args, countdown=0.0, retry=None):
        sent.append((name, args, countdown))

    monkeypatch.setattr(dispatch, "send_now", record)
    monkeypatch.setattr(batch_send, "send_now", record)
    now = timezone.now()
    jobs_worker.send_finish(7, now + dt.timedelta(hours=5))
    jobs_worker.send_finish(8, now + dt.timedelta(seconds=30))
    batch_send.send_advance(9, 3 * 3600.0)  # a batch's next link, hours away
    assert sent[0][:2] == ("routing.finish_job", ("7",)) and sent[0][2] == 600
    assert sent[1][:2] == ("routing.finish_job", ("8",)) and 25 < sent[1][2] <= 30
    assert sent[2] == ("routing.advance_batch", ("9",), 600)

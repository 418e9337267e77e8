"""Interactive jobs (the /v1/ chat completions and responses): accepted and claimed at
once, settled at the end, or charged for what was generated when the client leaves.
Times are explicit; tests/routing/compat/test_chat_sdk.py drives a live server."""

import datetime as dt
import io
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from routing import quota
from routing.jobs.cancel import job_cancel
from routing.jobs.errors import IdempotencyMismatch
from routing.jobs.interactive import (
    Timeline,
    delivered_charge,
    interactive_abandon,
    interactive_finish,
    interactive_start,
    partial_cost,
    stream_deliver,
    stream_mismatches,
)
from routing.jobs.sweep import STREAM_RECOVER_AFTER_SECONDS, jobs_sweep
from routing.jobs.worker import job_finish
from routing.models import Job
from routing.quota.audit import ledger_audit
from routing.router.route import RouteRequest

pytestmark = pytest.mark.django_db


def request(tier="standard", out=1000, inp=100, deadline=3600.0) -> RouteRequest:
    return RouteRequest(
        input_tokens=inp, output_tokens=out, deadline_seconds=deadline, tier=tier, turns=1
    )


def start(account, tier="standard", out=1000, at=None):
    return interactive_start(
        account=account, model="sol", request=request(tier, out), prompt="hi", at=at
    )


def test_timeline_first_token_then_even_pace():
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    tl = Timeline(t0, t0 + dt.timedelta(seconds=1), t0 + dt.timedelta(seconds=11), 11)
    assert tl.seconds_per_token == pytest.approx(1.0)
    assert tl.tokens_by(t0) == 0
    assert tl.tokens_by(t0 + dt.timedelta(seconds=1)) == 1
    assert tl.tokens_by(t0 + dt.timedelta(seconds=3.5)) == 3
    assert tl.tokens_by(t0 + dt.timedelta(seconds=11)) == 11
    assert tl.tokens_by(t0 + dt.timedelta(seconds=99)) == 11
    assert tl.token_at(1) == t0 + dt.timedelta(seconds=1)
    assert tl.token_at(6) == t0 + dt.timedelta(seconds=6)
    assert tl.token_at(11) == tl.finishes_at


def test_start_books_a_running_job_with_its_reservation_and_sends_nothing(
    account, dispatched, django_capture_on_commit_callbacks, settings
):
    settings.SIM_TIME_SCALE = 10
    at = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        started = start(account, at=at)
    job = started.job
    assert job.status == Job.Status.RUNNING and job.account == account
    assert job.tier.slug == "standard" and job.model.slug == "gpt-5.6-sol"
    assert job.started_at == at and job.reservation.state == "held"
    assert dispatched == []  # no Celery run: the web process follows the job itself
    tl = started.timeline
    ttft = job.simulated["ttft_seconds"] / 10
    assert (tl.first_token_at - at).total_seconds() == pytest.approx(ttft, abs=1e-5)
    assert tl.finishes_at == job.finishes_at and tl.output_tokens == 1000
    # The decode pace is the tier's speed (simulated seconds / SIM_TIME_SCALE), stretched
    # by this job's own draw of its run (run / median: the worker's simulation, fixed
    # by the job's id, so the raw pace alone depends on which id the job got).
    sim = job.simulated
    draw = sim["run_seconds"] / sim["run_median_seconds"]
    pace = draw / (sim["tokens_per_second"] * tl.seconds_per_token * 10)
    assert 0.98 < pace < 1.02


def test_finish_settles_the_quote(account):
    started = start(account)
    job = interactive_finish(started.job.pk, at=started.job.finishes_at)
    assert job.status == "succeeded" and job.cost == job.predicted_cost
    pkg = account.packages.get()
    assert (pkg.spent, pkg.reserved) == (job.predicted_cost, 0)
    assert interactive_finish(started.job.pk) is None  # once only


def test_abandon_charges_input_and_tokens_generated_then_releases_the_rest(account):
    started = start(account, out=1000)
    tl = started.timeline
    left_at = tl.token_at(400) + dt.timedelta(microseconds=1)
    job = interactive_abandon(started.job.pk, at=left_at)
    assert job.status == "failed" and "after 400 of 1000" in job.error
    assert job.simulated["generated_tokens"] == 400
    expected = partial_cost(job, 400)
    # Standard Sol: input and 400 output tokens at the list price, below the quote.
    assert Decimal(0) < expected < job.predicted_cost
    assert job.cost == expected
    assert Job.objects.get(pk=job.pk).reservation.state == "settled"
    assert job.finishes_at == left_at  # the slot frees now
    pkg = account.packages.get()
    assert (pkg.spent, pkg.reserved) == (expected, 0)
    assert quota.ledger_mismatches() == []
    # Settled once: a late finish (the sweeper) or a second abandon change nothing.
    assert job_finish(job.pk, at=tl.finishes_at + dt.timedelta(seconds=1)) is None
    assert interactive_abandon(job.pk) is None
    assert account.packages.get().spent == expected


def test_partial_cost_is_the_list_price_of_what_was_generated(account):
    job = start(account, out=1000).job
    full = partial_cost(job, 1000)
    assert full == job.predicted_cost
    none = partial_cost(job, 0)
    per_output = (full - none) / 1000
    assert partial_cost(job, 250) == none + per_output * 250


def test_leaving_while_queued_charges_nothing(account):
    at = timezone.now()
    started = start(account, at=at)
    Job.objects.filter(pk=started.job.pk).update(  # as if the pool were full until later
        started_at=at + dt.timedelta(seconds=30),
        finishes_at=at + dt.timedelta(seconds=60),
    )
    job = interactive_abandon(started.job.pk, at=at + dt.timedelta(seconds=5))
    assert job.status == "failed" and job.cost == 0 and "queued" in job.error
    assert account.packages.get().spent == 0 and account.packages.get().reserved == 0


def test_leaving_after_the_end_is_the_whole_answer(account):
    started = start(account)
    job = interactive_abandon(started.job.pk, at=started.job.finishes_at)
    assert job.status == "succeeded" and job.cost == job.predicted_cost


# --- streamed answers: charged for what was delivered (one rule) -------------------


def start_stream(account, out=1000, at=None):
    return interactive_start(
        account=account, model="sol", request=request("standard", out), prompt="hi", stream=True,
        at=at,
    )  # fmt: skip


def test_a_stream_starts_with_nothing_delivered_and_records_only_while_running(account):
    started = start_stream(account)
    assert Job.objects.get(pk=started.job.pk).delivered_tokens == 0
    assert start(account).job.delivered_tokens is None  # not streamed
    assert stream_deliver(started.job.pk, 40) and stream_deliver(started.job.pk, 90)
    assert not stream_deliver(started.job.pk, 50)  # never backwards
    job_cancel(job=started.job)
    assert not stream_deliver(started.job.pk, 120)  # ended: not one token more
    assert Job.objects.get(pk=started.job.pk).delivered_tokens == 90


def test_cancelling_a_stream_charges_what_it_delivered(account):
    started = start_stream(account, out=1000)
    tl = started.timeline
    assert stream_deliver(started.job.pk, 300)
    job = job_cancel(job=started.job, at=tl.token_at(400) + dt.timedelta(microseconds=1))
    assert job.status == "cancelled" and job.cost == delivered_charge(job, 300)
    assert Decimal(0) < job.cost < job.predicted_cost
    assert job.simulated["generated_tokens"] == 400 and "300 of 1000" in job.error
    assert job.reservation.state == "settled"
    pkg = account.packages.get()
    assert (pkg.spent, pkg.reserved) == (job.cost, 0)
    assert stream_mismatches() == [] and ledger_audit()["ok"]
    assert job_cancel(job=job).cost == job.cost  # again: no change


def test_cancelling_a_stream_before_its_first_token_charges_nothing(account):
    started = start_stream(account)
    job = job_cancel(job=started.job, at=started.timeline.first_token_at)
    assert job.status == "cancelled" and job.cost == 0
    assert job.reservation.state == "released"
    assert account.packages.get().spent == 0 and stream_mismatches() == []


def test_a_client_leaving_a_stream_pays_what_was_delivered_not_generated(account):
    started = start_stream(account, out=1000)
    assert stream_deliver(started.job.pk, 250)
    job = interactive_abandon(
        started.job.pk, at=started.timeline.token_at(400) + dt.timedelta(microseconds=1)
    )
    assert job.status == "failed" and "client disconnected" in job.error
    assert job.cost == delivered_charge(job, 250) < partial_cost(job, 400)
    assert stream_mismatches() == []


def test_the_sweeper_settles_a_dead_web_process_stream_for_what_it_delivered(account):
    started = start_stream(account, out=400)
    assert stream_deliver(started.job.pk, 141)
    ends = started.timeline.finishes_at
    # Its own web process would settle it at its end: left alone for a few seconds.
    jobs_sweep(at=ends + dt.timedelta(seconds=1))
    assert Job.objects.get(pk=started.job.pk).status == "running"
    jobs_sweep(at=ends + dt.timedelta(seconds=STREAM_RECOVER_AFTER_SECONDS + 1))
    job = Job.objects.get(pk=started.job.pk)
    assert job.status == "failed" and "web process stopped" in job.error
    assert job.cost == delivered_charge(job, 141) < job.predicted_cost
    assert job.simulated["generated_tokens"] == 400
    assert stream_mismatches() == [] and ledger_audit()["ok"]


def test_the_sweeper_settles_a_stream_that_delivered_everything_in_full(account):
    started = start_stream(account, out=50)
    assert stream_deliver(started.job.pk, 50)
    jobs_sweep(
        at=started.timeline.finishes_at + dt.timedelta(seconds=STREAM_RECOVER_AFTER_SECONDS + 1)
    )
    job = Job.objects.get(pk=started.job.pk)
    assert job.status == "succeeded" and job.cost == job.predicted_cost
    assert stream_mismatches() == []


def test_ledger_check_reports_streams_charged_otherwise_than_delivered(account):
    # What the service did before: a stream cancelled at no cost kept delivering...
    free = start_stream(account, out=400)
    job_cancel(job=free.job)
    Job.objects.filter(pk=free.job.pk).update(delivered_tokens=400)
    # ...and a stream whose web process died was billed in full (141 of 400 delivered).
    whole = start_stream(account, out=400)
    assert stream_deliver(whole.job.pk, 141)
    job_finish(whole.job.pk, at=whole.timeline.finishes_at)
    found = {m["job"]: m["problems"] for m in stream_mismatches()}
    assert found == {
        str(free.job.pk): ["delivered_not_charged", "delivered_after_end"],
        str(whole.job.pk): ["charged_more_than_delivered"],
    }
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("ledger_check", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert not report["ok"] and len(report["stream_mismatches"]) == 2


def test_an_idempotency_key_replays_the_same_job(account):
    first = interactive_start(
        account=account, model="sol", request=request(), prompt="hi", idempotency_key="k1"
    )
    again = interactive_start(
        account=account, model="sol", request=request(), prompt="hi", idempotency_key="k1"
    )
    assert again.replayed and again.job.pk == first.job.pk and not first.replayed
    assert Job.objects.count() == 1
    with pytest.raises(IdempotencyMismatch):
        interactive_start(
            account=account, model="sol", request=request(), prompt="bye", idempotency_key="k1"
        )

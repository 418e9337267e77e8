"""Interactive jobs (the /v1/ chat completions and responses): accepted and claimed at
once, settled at the end, or charged for what was generated when the client leaves.
Times are explicit; tests/routing/compat/test_chat_sdk.py drives a live server."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from routing import quota
from routing.jobs.interactive import (
    Timeline,
    interactive_abandon,
    interactive_finish,
    interactive_start,
    partial_cost,
)
from routing.jobs.worker import job_finish
from routing.models import Job
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
    # The decode pace is the tier's speed (simulated seconds / SIM_TIME_SCALE).
    pace = 1 / (job.simulated["tokens_per_second"] * tl.seconds_per_token * 10)
    assert 0.8 < pace < 1.25


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

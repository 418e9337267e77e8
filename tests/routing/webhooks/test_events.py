"""Each event type is emitted where it happens, in the transaction of the change it
tells, once: batches ending (completed, failed, expired), a job failing, and a
retirement announced (model.deprecated), coming (model.retiring: 7 days and the day
before) and done (model.retired). quota.threshold: test_budget_alerts.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from standardwebhooks import Webhook

from catalog import lifecycle
from catalog.models import ModelVersion
from routing.accounts.accounts import account_create
from routing.batches.sweep import batches_sweep
from routing.jobs.interactive import interactive_abandon, interactive_start
from routing.models import WebhookEndpoint, WebhookEvent
from routing.retirement import day, notices
from routing.retirement.events import retirement_events_due
from routing.router.route import RouteRequest
from routing.webhooks.endpoints import new_secret
from tests.helpers import ApiClient, job_submit, jsonl
from tests.helpers import batch_make as make
from tests.helpers import batch_run as run
from tests.routing.webhooks.conftest import deliver_due

pytestmark = pytest.mark.django_db


def endpoint_for(account, receiver) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(account=account, url=receiver.url, secret=new_secret())


def events(kind: str):
    return list(WebhookEvent.objects.filter(type=kind))


def test_batch_completed_is_emitted_and_delivered_signed(account, receiver, dispatched):
    e = endpoint_for(account, receiver)
    at = timezone.now()
    b = make(account, jsonl(3), window="1h", at=at)
    run(b, at)
    b.refresh_from_db()
    assert b.status == "completed"
    [event] = events("batch.completed")
    assert event.data["id"] == str(b.pk) and event.data["request_counts"]["completed"] == 3
    assert event.data["output_file_id"] == b.output_file_id
    deliver_due()
    headers, body = receiver.requests[-1]
    assert Webhook(e.secret).verify(body, headers)["data"]["status"] == "completed"


def test_batch_failed_is_emitted(account, receiver, dispatched):
    endpoint_for(account, receiver)
    b = make(account, jsonl(10, input_tokens=8000, output_tokens=22000, turns=30), window="1m")
    assert b.status == "failed"
    [event] = events("batch.failed")
    assert event.data["id"] == str(b.pk) and event.data["errors"]


def test_batch_expired_is_emitted_once(account, receiver, dispatched):
    endpoint_for(account, receiver)
    at = timezone.now()
    b = make(
        account, jsonl(3), window="1h", at=at, start_at=(at + dt.timedelta(hours=1)).isoformat()
    )
    batches_sweep(at=at + dt.timedelta(hours=3))
    batches_sweep(at=at + dt.timedelta(hours=4))
    b.refresh_from_db()
    assert b.status == "expired"
    [event] = events("batch.expired")
    assert event.data["request_counts"]["failed"] == 3


def test_job_failed_is_emitted_when_the_client_leaves(account, receiver, dispatched):
    endpoint_for(account, receiver)
    started = interactive_start(
        account=account,
        model="sol",
        request=RouteRequest(
            input_tokens=100, output_tokens=1000, deadline_seconds=3600.0, tier="standard", turns=1
        ),
        prompt="hi",
    )
    left_at = started.timeline.token_at(400) + dt.timedelta(microseconds=1)
    job = interactive_abandon(started.job.pk, at=left_at)
    assert job.status == "failed"
    [event] = events("job.failed")
    assert event.data["id"] == str(job.pk) and "after 400 of 1000" in event.data["error"]
    assert event.data["cost"] == f"{job.cost:.6f}"


def m(slug):
    return ModelVersion.objects.get(slug=slug)


@pytest.fixture
def luna_user(builtin_catalog, receiver, dispatched):
    """An account that ran a Luna job, with a webhook endpoint."""
    user, key = account_create(name="luna-user")
    job_submit(ApiClient(key), model="gpt-5.6-luna", deadline_seconds=3600)
    endpoint_for(user, receiver)
    return user


def schedule_luna(days: int):
    return lifecycle.model_schedule_retirement(
        model=m("gpt-5.6-luna"),
        retires_on=lifecycle.utc_today() + dt.timedelta(days=days),
        successor=m("gpt-5.6-terra"),
        actor="t",
        notice_override="test",
    )


def test_model_deprecated_is_emitted_with_the_notice(luna_user):
    schedule_luna(200)
    assert notices.notices_announce(model=m("gpt-5.6-luna")) == 1
    notices.notices_announce(model=m("gpt-5.6-luna"))
    [event] = events("model.deprecated")
    assert event.account == luna_user and event.data["model"] == "gpt-5.6-luna"
    assert event.data["successor"] == "gpt-5.6-terra" and event.data["kind"] == "retirement"


def test_model_retiring_is_emitted_a_week_before_and_the_day_before(luna_user):
    schedule_luna(200)
    notices.notices_announce(model=m("gpt-5.6-luna"))
    assert retirement_events_due() == 0  # months away
    now = timezone.now()
    week_before = now + dt.timedelta(days=200 - 6)
    assert retirement_events_due(at=week_before) == 1
    assert retirement_events_due(at=week_before + dt.timedelta(hours=1)) == 0
    [event] = events("model.retiring")
    assert event.data["days_left"] == 6
    day_before = now + dt.timedelta(days=200 - 1)
    assert retirement_events_due(at=day_before) == 1
    assert sorted(e.data["days_left"] for e in events("model.retiring")) == [1, 6]


def test_model_retired_is_emitted_on_the_day_once(luna_user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.model_retire_now(model=m("gpt-5.6-luna"), actor="t", notice_override="incident")
    day.retirements_apply_due()
    day.retirements_apply_due()
    [event] = events("model.retired")
    assert event.account == luna_user and event.data["model"] == "gpt-5.6-luna"

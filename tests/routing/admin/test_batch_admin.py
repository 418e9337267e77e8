"""The batch admin: batches (read-only, cancel and retry actions), schedules (kept in
step with django-celery-beat, then driven through beat's DatabaseScheduler on a fake
clock), files and batch requests."""

import datetime as dt
import io
import json
import re
from decimal import Decimal

import django.utils.timezone
import django_celery_beat.schedulers
import django_celery_beat.tzcrontab
import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

from deploy.celery import app as celery_app
from routing.batches.cancel import batch_cancel
from routing.batches.create import batch_create
from routing.batches.files import file_create
from routing.batches.finish import batch_finalize
from routing.batches.runner import batch_advance
from routing.batches.schedules import SCHEDULE_TASK, batch_from_schedule, schedule_delete
from routing.batches.validation import batch_validate
from routing.models import Account, Batch, BatchSchedule, File
from tests.helpers import batch_make, file_upload, jsonl

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def _upload(account, n: int = 30, *, bad: int = 0, name: str = "in.jsonl") -> File:
    return file_upload(account, jsonl(n, bad=bad), name=name)


def _batch(account, t0, n: int = 30, *, bad: int = 0, window: str = "1h", **kw) -> Batch:
    return batch_make(account, jsonl(n, bad=bad), window=window, at=t0, validate=False, **kw)


def _started(account, t0, n: int = 30, **kw) -> Batch:
    b = batch_validate(_batch(account, t0, n, **kw).pk, at=t0)
    assert b.status == Batch.Status.IN_PROGRESS, b.errors
    return b


def _run_to_end(batch: Batch, t0) -> Batch:
    """Advance a started batch link by link (as its task chain would) and finalize it."""
    at = t0
    for _ in range(200):
        r = batch_advance(batch.pk, at=at)
        if r["status"] == Batch.Status.FINALIZING:
            break
        at += dt.timedelta(seconds=r["next_in"])
    else:
        raise AssertionError("the batch did not finish")
    assert batch_finalize(batch.pk, at=at) is not None
    batch.refresh_from_db()
    return batch


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def _action(client, action: str, batches):
    return client.post(
        "/admin/routing/batch/",
        {"action": action, "_selected_action": [str(b.pk) for b in batches]},
        follow=True,
    )


# --- Batches ------------------------------------------------------------------------------


def test_a_batch_that_ran_shows_in_the_list_and_on_its_page(admin_client, account):
    t0 = timezone.now()
    batch = _run_to_end(_started(account, t0, 30, bad=2, metadata={"team": "evals"}), t0)
    assert (batch.status, batch.completed, batch.failed, batch.total) == ("completed", 30, 2, 32)
    lane = batch.plan["lanes"][0]

    r = admin_client.get("/admin/routing/batch/")
    html = r.content.decode()
    assert r.status_code == 200 and str(batch.pk) in html
    assert re.search(r"30 / 32 done, <span[^>]*>2 failed</span>", html)
    assert f'{lane["key"]} <span class="quiet">({lane["streams"]:,} streams)</span>' in html
    assert "Cancel selected batches" in html and "Retry failed requests" in html
    # search by id (a piece of it) and by metadata; filter by status
    for q in (str(batch.pk)[:8], "evals"):
        assert str(batch.pk) in admin_client.get("/admin/routing/batch/", {"q": q}).content.decode()
    assert str(batch.pk) not in admin_client.get("/admin/routing/batch/?q=zzz").content.decode()
    assert (
        str(batch.pk)
        in admin_client.get("/admin/routing/batch/?status__exact=completed").content.decode()
    )

    r = admin_client.get(f"/admin/routing/batch/{batch.pk}/change/")
    html = r.content.decode()
    assert r.status_code == 200
    assert "<th>model/tier</th>" in html and f"<td>{lane['key']}</td>" in html
    assert "30 / 32 completed, 2 failed, 0 running, 0 queued" in html
    assert 'name="status"' not in html  # read-only: nothing to save
    out, err = batch.output_file, batch.error_file
    assert f"/admin/routing/file/{out.pk}/download/" in html
    assert f"/admin/routing/file/{err.pk}/download/" in html
    assert f"/admin/routing/batchrequest/?batch={batch.pk}" in html

    r = admin_client.get(f"/admin/routing/file/{out.pk}/download/")
    body = b"".join(r.streaming_content)  # the test client closes it when consumed
    assert r.status_code == 200 and r["Content-Type"] == "application/jsonl"
    assert len(body.splitlines()) == 30 and json.loads(body.splitlines()[0])["custom_id"] == "r0"

    r = admin_client.get("/admin/routing/file/")
    assert r.status_code == 200 and out.pk in r.content.decode()
    assert admin_client.get(f"/admin/routing/file/{out.pk}/change/").status_code == 200

    r = admin_client.get(f"/admin/routing/batchrequest/?batch={batch.pk}&status__exact=failed")
    html = r.content.decode()
    assert r.status_code == 200 and "bad0" in html and "bad1" in html and ">r0<" not in html
    req = batch.requests.get(custom_id="r0")
    assert admin_client.get(f"/admin/routing/batchrequest/{req.pk}/change/").status_code == 200
    # a malformed batch id in the URL is a bad filter, not a 500
    r = admin_client.get("/admin/routing/batchrequest/?batch=nope")
    assert r.status_code == 302 and r["Location"].endswith("?e=1")


def _plan_costs(html: str) -> tuple[list[Decimal], Decimal]:
    """The cost column of the batch page's plan table (rows, the rounding row if any)
    and the total under it."""
    table = re.search(r"<th>model/tier</th>.*?</table>", html, re.S).group(0)
    body, foot = table.split("<tfoot>")
    rows = [
        re.findall(r"<td[^>]*>(.*?)</td>", tr)[-2]
        for tr in re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>")[1], re.S)
    ]
    total = re.findall(r"<th>([^<]*)</th>", foot)[0]
    return [Decimal(x.replace(",", "")) for x in rows], Decimal(total.replace(",", ""))


def test_a_batch_pages_plan_rows_add_up_to_its_predicted_cost(admin_client, account):
    t0 = timezone.now()
    batch = _started(account, t0, 6)
    lane = batch.plan["lanes"][0]
    thirds = [
        dict(lane, key=f"m/t{i}", cost=c) for i, c in enumerate(["0.333333"] * 2 + ["0.333334"])
    ]
    Batch.objects.filter(pk=batch.pk).update(
        plan={**batch.plan, "lanes": thirds}, predicted_cost=Decimal("1.000000")
    )
    html = admin_client.get(f"/admin/routing/batch/{batch.pk}/change/").content.decode()
    rows, total = _plan_costs(html)
    assert rows == [Decimal("0.33"), Decimal("0.33"), Decimal("0.34")]  # not 3 x 0.33
    assert total == sum(rows) == Decimal("1.00")
    assert "1.00 credits" in html  # the predicted cost written above the table

    # a predicted cost the lanes miss by per-request rounding: its own row, explained
    Batch.objects.filter(pk=batch.pk).update(predicted_cost=Decimal("1.020000"))
    html = admin_client.get(f"/admin/routing/batch/{batch.pk}/change/").content.decode()
    rows, total = _plan_costs(html)
    assert "rounding of per-request prices" in html
    assert rows[-1] == Decimal("0.02") and total == sum(rows) == Decimal("1.02")


def test_a_refused_batch_page_lists_its_errors_by_line(admin_client, account):
    t0 = timezone.now()
    up = io.BytesIO(jsonl(2) + b"\n{not json}\n" + jsonl(1).replace(b"r0", b"r1"))
    up.name = "broken.jsonl"
    f = file_create(account=account, purpose="batch", upload=up)
    batch = batch_create(account=account, input_file_id=f.id, at=t0)
    batch = batch_validate(batch.pk, at=t0)
    assert batch.status == Batch.Status.FAILED
    html = admin_client.get(f"/admin/routing/batch/{batch.pk}/change/").content.decode()
    assert "<td>3</td><td>invalid_json_line</td>" in html
    assert "<td>4</td><td>duplicate_custom_id</td>" in html
    assert "custom_id &#x27;r1&#x27; is also on line 2." in html  # escaped, not raw HTML


def test_batches_cannot_be_added_edited_or_deleted_in_the_admin(admin_client, account):
    batch = _batch(account, timezone.now())
    assert admin_client.get("/admin/routing/batch/add/").status_code == 403
    assert admin_client.get(f"/admin/routing/batch/{batch.pk}/delete/").status_code == 403
    r = admin_client.post(f"/admin/routing/batch/{batch.pk}/change/", {"status": "completed"})
    assert r.status_code == 403
    batch.refresh_from_db()
    assert batch.status == Batch.Status.VALIDATING


def test_cancel_action_cancels_what_it_can_and_reports_the_rest(admin_client, account):
    t0 = timezone.now()
    validating = _batch(account, t0)
    running = _started(account, t0)
    assert batch_advance(running.pk, at=t0)["started"] == 30  # now in flight
    finished = _run_to_end(_started(account, t0, 5), t0)

    r = _action(admin_client, "cancel_batches", [validating, running, finished])
    assert r.status_code == 200
    for b in (validating, running, finished):
        b.refresh_from_db()
    assert validating.status == Batch.Status.CANCELLED
    assert running.status == Batch.Status.CANCELLING  # its running requests finish first
    assert finished.status == Batch.Status.COMPLETED
    msgs = _messages(r)
    assert any(m.startswith("Cancelled 2 batch(es)") for m in msgs), msgs
    assert f"Batch {finished.pk} has already completed." in msgs

    # again: cancelling a cancelled batch changes nothing and is not an error
    r = _action(admin_client, "cancel_batches", [validating])
    assert any("Cancelled 1 batch(es)" in m for m in _messages(r))


def _bars(html: str) -> list[str]:
    return re.findall(r'<div role="img" aria-label="[^"]*".*?</div></div>', html, re.S)


def _drawn(bar: str) -> dict[str, str]:
    """The parts of a bar drawn wider than nothing: background -> width (%)."""
    return {
        bg: w for w, bg in re.findall(r'width:([\d.]+)%;background:([^"]+)"', bar) if float(w) > 0
    }


def test_a_cancelled_batch_never_shows_a_finished_green_bar(admin_client, account):
    """Cancelled with every request in flight, a batch ends with all of them done: its
    bar is neutral, says 'cancelled', and the hatched share is what was cancelled."""
    t0 = timezone.now()
    all_in_flight = _started(account, t0, 6)
    assert batch_advance(all_in_flight.pk, at=t0)["started"] == 6
    batch_cancel(batch=all_in_flight, at=t0)
    none_started = _started(account, t0, 4)
    batch_cancel(batch=none_started, at=t0)
    r = batch_advance(all_in_flight.pk, at=t0 + dt.timedelta(hours=1))
    assert r["status"] == Batch.Status.CANCELLED
    for b in (all_in_flight, none_started):
        b.refresh_from_db()
        assert b.status == Batch.Status.CANCELLED
    assert (all_in_flight.completed, all_in_flight.failed) == (6, 0)
    assert (none_started.completed, none_started.failed) == (0, 4)
    finished = _run_to_end(_started(account, t0, 3), t0)

    html = admin_client.get("/admin/routing/batch/").content.decode()
    bars = _bars(html)
    assert len(bars) == 3, bars
    by_label = {re.search(r'aria-label="([^"]*)"', b).group(1): b for b in bars}
    assert set(by_label) == {
        "6 of 6 done, 0 cancelled",
        "0 of 4 done, 4 cancelled",
        "3 of 3 done",
    }
    hatched = "repeating-linear-gradient(135deg,#c9c9c9 0 3px,#e4e4e4 3px 6px)"
    assert _drawn(by_label["3 of 3 done"]) == {"#3c8f4f": "100.0"}  # completed: green
    assert _drawn(by_label["6 of 6 done, 0 cancelled"]) == {"#8c9890": "100.0"}
    assert _drawn(by_label["0 of 4 done, 4 cancelled"]) == {hatched: "100.0"}
    for label in ("6 of 6 done, 0 cancelled", "0 of 4 done, 4 cancelled"):
        assert f"cancelled: {label}</span>" in html
    # the 4 cancelled requests are not written as failed
    assert "4 failed" not in html

    page = admin_client.get(f"/admin/routing/batch/{none_started.pk}/change/").content.decode()
    assert "0 / 4 completed, 0 failed, 4 cancelled, 0 running, 0 queued" in page
    assert "cancelled: 0 of 4 done, 4 cancelled" in page
    page = admin_client.get(f"/admin/routing/batch/{finished.pk}/change/").content.decode()
    assert "3 / 3 completed, 0 failed, 0 running, 0 queued" in page and "cancelled:" not in page


def test_actions_never_500(admin_client, account, monkeypatch):
    batch = _batch(account, timezone.now())

    def boom(**kwargs):
        raise RuntimeError("database on fire")

    monkeypatch.setattr("routing.admin.batches.batch_cancel", boom)
    monkeypatch.setattr("routing.admin.batches.batch_retry_failed", boom)
    for action in ("cancel_batches", "retry_failed"):
        r = _action(admin_client, action, [batch])
        assert r.status_code == 200
        assert any("failed unexpectedly" in m for m in _messages(r))
    batch.refresh_from_db()
    assert batch.status == Batch.Status.VALIDATING


def test_retry_action_makes_a_new_batch_of_what_did_not_complete(admin_client, account):
    t0 = timezone.now()
    expired = _started(account, t0, 12)
    assert batch_advance(expired.pk, at=t0 + dt.timedelta(hours=2))["status"] == "expired"
    cancelled = _started(account, t0, 7)
    batch_cancel(batch=cancelled, at=t0)
    running = _started(account, t0, 3)
    complete = _run_to_end(_started(account, t0, 4), t0)
    for b in (expired, cancelled):
        b.refresh_from_db()
    assert (expired.status, cancelled.status) == ("expired", "cancelled")

    r = _action(admin_client, "retry_failed", [expired, cancelled, running, complete])
    assert r.status_code == 200
    retries = {b.retry_of_id: b for b in Batch.objects.filter(retry_of__isnull=False)}
    assert set(retries) == {expired.pk, cancelled.pk}
    assert retries[expired.pk].total == 12 and retries[cancelled.pk].total == 7
    assert retries[expired.pk].status == Batch.Status.VALIDATING
    assert retries[expired.pk].input_file.purpose == File.Purpose.BATCH
    msgs = _messages(r)
    created = next(m for m in msgs if m.startswith("Created 2 retry batch(es)"))
    assert str(retries[expired.pk].pk) in created and str(retries[cancelled.pk].pk) in created
    assert f"Batch {running.pk} is still in_progress; retry when it has ended." in msgs
    assert f"Batch {complete.pk} has no failed requests." in msgs

    html = admin_client.get(f"/admin/routing/batch/{expired.pk}/change/").content.decode()
    assert str(retries[expired.pk].pk) in html  # the retries are listed on the original


def test_non_staff_are_sent_to_login_and_view_only_staff_cannot_act(
    client, account, django_user_model
):
    batch = _batch(account, timezone.now())
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    for url in ("/admin/routing/batch/", f"/admin/routing/batch/{batch.pk}/change/"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/admin/login/")

    user.is_staff = True
    user.save()
    assert client.get("/admin/routing/batch/").status_code == 403  # staff, no permission
    user.user_permissions.add(Permission.objects.get(codename="view_batch"))
    r = client.get("/admin/routing/batch/")
    assert r.status_code == 200 and "Cancel selected batches" not in r.content.decode()
    _action(client, "cancel_batches", [batch])
    batch.refresh_from_db()
    assert batch.status == Batch.Status.VALIDATING


# --- Schedules ------------------------------------------------------------------------------


def _schedule_form(account, f, crontab, **over):
    data = {
        "name": "nightly eval",
        "account": account.pk,
        "input_file": f.pk,
        "completion_window": "8h",
        "crontab": crontab.pk,
        "enabled": "on",
        "metadata": '{"team": "evals"}',
    }
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


@pytest.fixture
def crontab_2am(db):
    return CrontabSchedule.objects.create(
        minute="0", hour="2", day_of_week="*", day_of_month="*", month_of_year="*", timezone="UTC"
    )


def test_schedule_form_refuses_a_bad_window_another_accounts_file_and_bad_metadata(
    admin_client, account, crontab_2am
):
    mine = _upload(account, 3)
    other = Account.objects.create(name="other")
    theirs = _upload(other, 3)
    output = File.objects.create(
        account=account, purpose="batch_output", filename="o.jsonl", bytes=1, sha256="x"
    )
    cases = [
        ({"completion_window": "3 weeks"}, "is not a duration like 30m"),
        ({"completion_window": "30d"}, "must be between 1m and 7d"),
        ({"input_file": theirs.pk}, "belongs to another account"),
        ({"input_file": output.pk}, "Select a valid choice"),
        ({"metadata": '{"n": 1}'}, "metadata is at most 15 string keys"),
    ]
    for over, error in cases:
        r = admin_client.post(
            "/admin/routing/batchschedule/add/", _schedule_form(account, mine, crontab_2am, **over)
        )
        assert r.status_code == 200 and error in r.content.decode(), over
    assert not BatchSchedule.objects.exists() and not PeriodicTask.objects.exists()

    r = admin_client.get("/admin/routing/batchschedule/add/")
    assert r.status_code == 200 and mine.pk in r.content.decode()
    assert output.pk not in r.content.decode()  # only batch inputs are offered


def test_deleting_a_schedule_deletes_its_periodic_task(admin_client, account, crontab_2am):
    f = _upload(account, 3)
    for name in ("a", "b", "c"):
        r = admin_client.post(
            "/admin/routing/batchschedule/add/", _schedule_form(account, f, crontab_2am, name=name)
        )
        assert r.status_code == 302
    a, b, c = BatchSchedule.objects.order_by("name")
    assert PeriodicTask.objects.count() == 3

    r = admin_client.post(f"/admin/routing/batchschedule/{a.pk}/delete/", {"post": "yes"})
    assert r.status_code == 302
    assert not PeriodicTask.objects.filter(pk=a.periodic_task_id).exists()

    r = admin_client.post(
        "/admin/routing/batchschedule/",
        {"action": "delete_selected", "_selected_action": [b.pk, c.pk], "post": "yes"},
    )
    assert r.status_code == 302
    assert not BatchSchedule.objects.exists() and not PeriodicTask.objects.exists()


def test_schedule_delete_deletes_the_schedule_and_its_periodic_task(
    admin_client, account, crontab_2am
):
    f = _upload(account, 3)
    admin_client.post("/admin/routing/batchschedule/add/", _schedule_form(account, f, crontab_2am))
    schedule = BatchSchedule.objects.get()
    batch = batch_from_schedule(schedule.pk)
    schedule_delete(schedule=schedule)
    assert not BatchSchedule.objects.exists() and not PeriodicTask.objects.exists()
    batch.refresh_from_db()
    assert batch.schedule_id is None  # its batches stay


def test_resync_action_restores_a_periodic_task_deleted_by_hand(admin_client, account, crontab_2am):
    f = _upload(account, 3)
    admin_client.post("/admin/routing/batchschedule/add/", _schedule_form(account, f, crontab_2am))
    schedule = BatchSchedule.objects.get()
    schedule.periodic_task.delete()
    html = admin_client.get("/admin/routing/batchschedule/").content.decode()
    assert "missing: use the action" in html
    admin_client.post(
        "/admin/routing/batchschedule/",
        {"action": "sync_periodic_tasks", "_selected_action": [schedule.pk]},
    )
    schedule.refresh_from_db()
    assert schedule.periodic_task.task == SCHEDULE_TASK and schedule.periodic_task.enabled


class _Clock:
    """One fake 'now' for Django, the crontab and beat's entries."""

    def __init__(self, monkeypatch, start: dt.datetime):
        self.now = start
        clock = self

        class FakeDatetime(dt.datetime):
            @classmethod
            def now(cls, tz=None):
                return clock.now.astimezone(tz) if tz else clock.now.replace(tzinfo=None)

        monkeypatch.setattr(django.utils.timezone, "now", lambda: clock.now)
        monkeypatch.setattr(django_celery_beat.tzcrontab, "datetime", FakeDatetime)
        monkeypatch.setattr(ModelEntry, "_default_now", lambda entry: clock.now)
        # Beat closes "old" connections between reads; in a test the connection holds the
        # test's transaction (and Django would drop it as "autocommit changed").
        monkeypatch.setattr(django_celery_beat.schedulers, "close_old_connections", lambda: None)


class _InProcessBeat(DatabaseScheduler):
    """Beat's DatabaseScheduler, with the broker left out: a due entry's task runs here
    (eagerly) with the entry's args and kwargs, as a worker would run the message."""

    producer = None

    def __init__(self, *args, **kwargs):
        self.sent = []
        super().__init__(*args, **kwargs)

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        entry = self.reserve(entry) if advance else entry
        result = self.app.tasks[entry.task].apply(args=entry.args, kwargs=entry.kwargs)
        self.sent.append((entry.name, entry.task, entry.kwargs, result))
        return result


def test_a_schedule_made_in_the_admin_starts_its_batch_on_time_under_beat(
    admin_client, account, monkeypatch
):
    day = (timezone.now() + dt.timedelta(days=1)).date()

    def at(h, m, s, days=0):
        return dt.datetime.combine(day + dt.timedelta(days=days), dt.time(h, m, s), tzinfo=dt.UTC)

    clock = _Clock(monkeypatch, at(1, 0, 0))
    f = _upload(account, 20)

    # Ops make the crontab (02:00 UTC daily) and the schedule in the admin.
    r = admin_client.post(
        "/admin/django_celery_beat/crontabschedule/add/",
        {
            "minute": "0",
            "hour": "2",
            "day_of_month": "*",
            "month_of_year": "*",
            "day_of_week": "*",
            "timezone": "UTC",
            "periodictask_set-TOTAL_FORMS": "0",  # the crontab page's inline
            "periodictask_set-INITIAL_FORMS": "0",
        },
    )
    assert r.status_code == 302, r.content.decode()[:1000]
    crontab = CrontabSchedule.objects.get(minute="0", hour="2")
    r = admin_client.post("/admin/routing/batchschedule/add/", _schedule_form(account, f, crontab))
    assert r.status_code == 302, r.content.decode()[:2000]
    schedule = BatchSchedule.objects.get(name="nightly eval")
    task = schedule.periodic_task
    assert task.task == "routing.start_scheduled_batch" and task.enabled
    assert task.crontab_id == crontab.pk and task.interval_id is None
    assert json.loads(task.kwargs) == {"schedule_id": schedule.pk}
    html = admin_client.get("/admin/routing/batchschedule/").content.decode()
    assert "At 02:00 AM UTC" in html and task.name in html

    from routing.tasks import start_scheduled_batch  # noqa: F401 (registers the task)

    beat = _InProcessBeat(app=celery_app, lazy=True)
    try:
        # 01:59:30: beat has the entry, 30 s before its time; nothing is sent.
        clock.now = at(1, 59, 30)
        assert beat.tick() > 0
        assert beat.sent == []
        entry = beat.schedule[task.name]
        due, next_in = entry.is_due()
        assert not due and next_in == pytest.approx(30, abs=1)
        assert not Batch.objects.exists()

        # 02:00:05: due; beat sends the task, which makes the batch of the 02:00 firing.
        clock.now = at(2, 0, 5)
        assert beat.tick() == 0
        assert [s[:3] for s in beat.sent] == [
            (task.name, "routing.start_scheduled_batch", {"schedule_id": schedule.pk})
        ]
        result = beat.sent[0][3]
        assert result.successful(), result.traceback
        batch = Batch.objects.get(schedule=schedule)
        assert result.result == str(batch.pk)
        assert batch.scheduled_for == at(2, 0, 0) and batch.start_at == at(2, 0, 5)
        assert batch.expires_at == at(10, 0, 5) and batch.completion_window == "8h"
        assert batch.metadata == {"team": "evals", "schedule": "nightly eval"}
        assert batch.status == Batch.Status.VALIDATING and batch.total == 20
        beat.sync()  # beat writes the run back to the periodic task
        task.refresh_from_db()
        assert task.total_run_count == 1 and task.last_run_at == at(2, 0, 5)

        # The validation task (sent on commit) starts it at once: on time.
        started = batch_validate(batch.pk, at=at(2, 0, 5))
        assert started.status == Batch.Status.IN_PROGRESS and started.in_progress_at == at(2, 0, 5)

        # Later in the same minute: beat does not fire again, and a repeated message for
        # this firing finds the batch already made.
        clock.now = at(2, 0, 40)
        assert beat.tick() > 0 and len(beat.sent) == 1
        again = celery_app.tasks[task.task].apply(kwargs=json.loads(task.kwargs))
        assert again.successful() and again.result == str(batch.pk)
        assert batch_from_schedule(schedule.pk, at=at(2, 0, 59)).pk == batch.pk
        assert Batch.objects.filter(schedule=schedule).count() == 1

        html = admin_client.get("/admin/routing/batchschedule/").content.decode()
        assert f"/admin/routing/batch/{batch.pk}/change/" in html  # the last batch

        # Ops disable the schedule in the admin: the periodic task is disabled and the
        # next night beat sends nothing.
        clock.now = at(2, 10, 0)
        r = admin_client.post(
            f"/admin/routing/batchschedule/{schedule.pk}/change/",
            _schedule_form(account, f, crontab, enabled=None),
        )
        assert r.status_code == 302, r.content.decode()[:2000]
        task.refresh_from_db()
        assert not task.enabled
        clock.now = at(2, 0, 5, days=1)
        beat.tick()
        assert task.name not in beat.schedule and len(beat.sent) == 1
        assert Batch.objects.filter(schedule=schedule).count() == 1

        # Enabled again: the night after, it fires again (a new batch for the new firing).
        clock.now = at(2, 30, 0, days=1)
        admin_client.post(
            f"/admin/routing/batchschedule/{schedule.pk}/change/",
            _schedule_form(account, f, crontab),
        )
        clock.now = at(2, 0, 5, days=2)
        beat.tick()
        assert len(beat.sent) == 2 and beat.sent[1][3].successful()
        assert list(
            Batch.objects.filter(schedule=schedule)
            .order_by("scheduled_for")
            .values_list("scheduled_for", flat=True)
        ) == [at(2, 0, 0), at(2, 0, 0, days=2)]
    finally:
        beat._finalize.cancel()  # no sync (and connection closing) when it is collected

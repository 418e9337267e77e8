"""Batches in process: files, validation, the plan, the run (each chain link called with
an explicit time), cancel, expiry, quota, retirement. tests/routing/batches/test_batches_e2e.py
runs a 10,000-line batch through real workers."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from decimal import Decimal

import pytest
from django.utils import timezone

from catalog import lifecycle
from catalog.models import HardwarePool, ModelVersion
from routing import quota
from routing.accounts.accounts import account_create
from routing.batches.cancel import batch_cancel, batch_retry_failed
from routing.batches.create import batch_create
from routing.batches.errors import BatchError
from routing.batches.finish import batch_finalize
from routing.batches.progress import batch_chart
from routing.batches.reroute import batches_reroute
from routing.batches.runner import batch_advance
from routing.batches.schedules import batch_from_schedule
from routing.batches.sweep import batches_sweep
from routing.batches.validation import batch_validate
from routing.models import Batch, BatchRequest, LedgerEntry, PoolLoad, QuotaReservation
from routing.retirement import day as retirement
from tests.helpers import BATCH_BODY, ApiClient, jsonl
from tests.helpers import batch_make as make
from tests.helpers import batch_run as run
from tests.helpers import file_upload as upload

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"
SMALL = BATCH_BODY


def busy(pool_slug: str, share: float) -> None:
    PoolLoad.objects.update_or_create(
        pool=HardwarePool.objects.get(slug=pool_slug), defaults={"background_utilisation": share}
    )


def top_up(account, credits: str) -> None:
    """Raise the account's package limit (a plan that mixes in Ultrafast costs more than
    the fixture's 100 credits)."""
    account.packages.update(limit=Decimal(credits))


def first_wave_seconds(batch) -> float:
    """When the first wave of the batch's first lane ends: its makespan over its waves
    (requests / streams, rounded up), from the stored plan (engine figures, not a guess)."""
    lane = batch.plan["lanes"][0]
    return lane["makespan_seconds"] / math.ceil(lane["requests"] / lane["streams"])


def read(f) -> list[dict]:
    with f.content.open("rb") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def ledger_ok():
    assert quota.ledger_mismatches() == []


# --- Files -------------------------------------------------------------------------------


def test_upload_list_and_download_a_file(api):
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(3))})
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["object"] == "file" and body["lines"] == 3 and body["purpose"] == "batch"
    assert r["Location"].endswith(f"/api/v1/files/{body['id']}")
    listed = api.get("/api/v1/files").json()
    assert [f["id"] for f in listed["data"]] == [body["id"]]
    content = api.get(f"/api/v1/files/{body['id']}/content")
    assert content.status_code == 200 and b"".join(content.streaming_content) == jsonl(3)


@pytest.mark.parametrize(
    "data, purpose, status, slug",
    [
        (b"", "batch", 400, "empty-file"),
        (b"\n  \n", "batch", 400, "empty-file"),
        (b'{"custom_id": "a"}', "fine-tune", 400, "invalid-purpose"),
    ],
)
def test_bad_uploads_are_refused(api, data, purpose, status, slug):
    r = api.post("/api/v1/files", {"purpose": purpose, "file": io.BytesIO(data)})
    assert r.status_code == status and r["Content-Type"] == PROBLEM
    assert r.json()["type"].endswith(slug)


def test_an_upload_without_a_file_is_a_400(api):
    r = api.post("/api/v1/files", {"purpose": "batch"})
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM


def test_more_than_fifty_thousand_requests_is_refused_at_upload(api, monkeypatch):
    from routing.batches import files

    monkeypatch.setattr(files, "MAX_BATCH_REQUESTS", 10)
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(11))})
    assert r.status_code == 413 and r.json()["type"].endswith("too-many-requests")
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(10))})
    assert r.status_code == 201


def test_someone_elses_file_and_batch_are_404(api, account):
    b = make(account, jsonl(2))
    other = ApiClient(account_create(name="other", default_credits=Decimal(1))[1])
    for path in (
        f"/api/v1/files/{b.input_file_id}",
        f"/api/v1/files/{b.input_file_id}/content",
        f"/api/v1/batches/{b.pk}",
    ):
        assert other.get(path).status_code == 404
    assert other.post(f"/api/v1/batches/{b.pk}/cancel").status_code == 404
    r = other.post_json("/api/v1/batches", {"input_file_id": b.input_file_id})
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM
    assert other.get("/api/v1/batches").json()["data"] == []


# --- Create and validate ---------------------------------------------------------------------


def test_a_batch_runs_to_completion_and_is_charged_once(api, account):
    file_id = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(300))})
    r = api.post_json(
        "/api/v1/batches",
        {
            "input_file_id": file_id.json()["id"],
            "completion_window": "1h",
            "metadata": {"job": "nightly"},
        },
    )
    assert r.status_code == 202, r.json()
    created = r.json()
    assert created["status"] == "validating" and created["request_counts"]["total"] == 300
    assert created["metadata"] == {"job": "nightly"}
    at = timezone.now()
    batch_validate(created["id"], at=at)
    body = api.get(f"/api/v1/batches/{created['id']}").json()
    assert body["status"] == "in_progress" and body["in_progress_at"]
    plan = body["plan"]
    assert plan["feasible"] and plan["tiers"] == ["standard"]
    assert plan["makespan_seconds"] <= 3600
    # Batch price: half the Standard price.
    assert Decimal(body["predicted_cost"]) == Decimal("7.5")
    batch = Batch.objects.get(pk=created["id"])
    end = run(batch, at)
    body = api.get(f"/api/v1/batches/{created['id']}").json()
    assert body["status"] == "completed" and body["completed_at"] and body["finalizing_at"]
    assert body["request_counts"] == {"total": 300, "completed": 300, "failed": 0}
    assert Decimal(body["cost"]) == Decimal(body["predicted_cost"])
    assert end <= batch.expires_at
    # The batch's promise is its window: every line in time, the window met.
    assert body["deadline"] == {"lines_in_time": 300, "share_in_time": 1.0, "window_met": True}
    out = api.get(f"/api/v1/files/{body['output_file_id']}/content")
    lines = [json.loads(x) for x in b"".join(out.streaming_content).splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(f"r{i}" for i in range(300))
    assert all(x["response"]["status_code"] == 200 and x["error"] is None for x in lines)
    assert all(x["response"]["body"]["deadline_met"] is True for x in lines)
    assert body["error_file_id"] is None
    # Charged once: the draws sum to the cost, nothing is left held.
    draws = LedgerEntry.objects.filter(kind=LedgerEntry.Kind.DRAW)
    assert sum(e.delta_spent for e in draws) == Decimal(body["cost"])
    pkg = account.packages.get()
    assert pkg.reserved == 0 and pkg.spent == Decimal(body["cost"])
    assert not QuotaReservation.objects.filter(state="held").exists()
    ledger_ok()
    # Advancing or finalizing again changes nothing.
    assert batch_advance(batch.pk, at=end, force=True)["status"] is None
    assert batch_finalize(batch.pk, at=end) is None
    pkg.refresh_from_db()
    assert pkg.spent == Decimal(body["cost"])


def test_validation_runs_once(account):
    at = timezone.now()
    f = upload(account, jsonl(5))
    b = batch_create(account=account, input_file_id=f.id, at=at)
    assert batch_validate(b.pk, at=at) is not None
    assert batch_validate(b.pk, at=at) is None
    assert BatchRequest.objects.filter(batch=b).count() == 5


def test_a_broken_file_refuses_the_batch_with_line_numbers(account):
    data = b"\n".join(
        [
            jsonl(1),
            b"{not json",
            jsonl(1),  # r0 again
            b'["a list"]',
            json.dumps(
                {"custom_id": "x", "method": "GET", "url": "/v1/jobs", "body": SMALL}
            ).encode(),
            json.dumps({"custom_id": "y", "url": "/v1/other", "body": SMALL}).encode(),
            b"\xff\xfe",
        ]
    )
    b = make(account, data)
    assert b.status == "failed" and b.failed_at
    codes = [(e["code"], e["line"]) for e in b.errors]
    assert codes == [
        ("invalid_json_line", 2),
        ("duplicate_custom_id", 3),
        ("invalid_json_line", 4),
        ("invalid_method", 5),
        ("mismatched_url", 6),
        ("invalid_encoding", 7),
    ]
    assert b.errors[1]["custom_id"] == "r0" and "line 1" in b.errors[1]["message"]
    assert not QuotaReservation.objects.exists()


def test_a_line_that_cannot_run_goes_to_the_error_file_and_the_rest_runs(account):
    data = b"\n".join(
        [
            jsonl(2),
            json.dumps({"custom_id": "bad-model", "body": SMALL | {"model": "gpt-9"}}).encode(),
            json.dumps({"custom_id": "bad-tokens", "body": SMALL | {"output_tokens": 0}}).encode(),
            json.dumps(
                {"custom_id": "too-long", "body": SMALL | {"input_tokens": 5_000_000}}
            ).encode(),
            json.dumps({"custom_id": "no-body"}).encode(),
        ]
    )
    at = timezone.now()
    b = make(account, data, at=at)
    assert b.status == "in_progress" and b.total == 6 and b.failed == 4
    run(b, at)
    b.refresh_from_db()
    assert (b.status, b.completed, b.failed) == ("completed", 2, 4)
    errors = {e["custom_id"]: e["error"] for e in read(b.error_file)}
    assert (
        errors["bad-model"]["line"] == 3
        and "Unknown model 'gpt-9'" in errors["bad-model"]["message"]
    )
    assert errors["bad-tokens"]["line"] == 4 and "output_tokens" in errors["bad-tokens"]["message"]
    assert "context window" in errors["too-long"]["message"]
    assert errors["no-body"]["line"] == 6
    assert {x["custom_id"] for x in read(b.output_file)} == {"r0", "r1"}


def test_chat_completion_lines_are_accepted(account):
    line = {
        "custom_id": "chat-1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "sol",
            "messages": [{"role": "user", "content": "x" * 4000}],
            "max_completion_tokens": 500,
        },
    }
    at = timezone.now()
    b = make(account, json.dumps(line).encode(), at=at, endpoint="/v1/chat/completions")
    req = b.requests.get()
    assert (req.input_tokens, req.output_tokens) == (1000, 500)
    run(b, at)
    b.refresh_from_db()
    assert b.status == "completed"


@pytest.mark.parametrize(
    "payload, param",
    [
        ({"completion_window": "forever"}, "completion_window"),
        ({"completion_window": "30s"}, "completion_window"),
        ({"completion_window": "8d"}, "completion_window"),
        ({"endpoint": "/v1/embeddings"}, "endpoint"),
        ({"start_at": "tomorrow"}, "start_at"),
        ({"start_at": "2099-01-01T00:00:00Z"}, "start_at"),
    ],
)
def test_bad_batch_arguments_are_400(api, account, payload, param):
    f = upload(account, jsonl(1))
    r = api.post_json("/api/v1/batches", {"input_file_id": f.id} | payload)
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM, r.json()
    assert r.json().get("parameter") == param or param in json.dumps(r.json())
    assert not Batch.objects.exists()


def test_list_is_paginated_and_filtered_by_status(api, account):
    for _ in range(3):
        make(account, jsonl(1))
    page = api.get("/api/v1/batches?limit=2").json()
    assert len(page["data"]) == 2 and page["has_more"] and page["next"]
    rest = api.get(page["next"]).json()
    assert len(rest["data"]) == 1
    assert api.get("/api/v1/batches?status=completed").json()["data"] == []
    assert api.get("/api/v1/batches?status=nope").status_code == 400


# --- The plan -----------------------------------------------------------------------------


def test_an_impossible_window_is_refused_with_the_fastest_plans_makespan(account):
    # GDP-Val-shaped tasks take minutes even on Ultrafast: a 1-minute window cannot work.
    b = make(
        account,
        jsonl(10, input_tokens=8000, output_tokens=22000, turns=30, tool_seconds=15),
        window="1m",
    )
    assert b.status == "failed"
    (err,) = b.errors
    assert err["code"] == "window_too_short"
    assert err["fastest_makespan_seconds"] > 60
    assert "fastest plan needs" in err["message"]
    assert not QuotaReservation.objects.exists()


def test_a_window_standard_capacity_cannot_meet_mixes_in_a_faster_tier(account):
    # Interactive work holds 99.5 % of the GPU pool: what is left runs ~650 Flex streams
    # (~42 s a request); 2,000 requests need 4 waves (~170 s) there alone.
    top_up(account, "1000")
    busy("h200-main", 0.995)
    at = timezone.now()
    b = make(account, jsonl(2000), window="2m", at=at)
    assert b.status == "in_progress", b.errors
    tiers = {lane["tier"]: lane for lane in b.plan["lanes"]}
    assert "ultrafast" in tiers and len(tiers) >= 2, tiers
    assert b.plan["makespan_seconds"] <= 120
    # Faster tiers only for the part that would otherwise miss the window.
    assert tiers["ultrafast"]["requests"] < 2000
    end = run(b, at)
    b.refresh_from_db()
    assert b.status == "completed" and end <= b.expires_at
    assert b.cost == b.predicted_cost
    ledger_ok()


def test_interactive_work_keeps_priority_on_shared_pools(account):
    busy("h200-main", 0.995)
    at = timezone.now()
    b = make(account, jsonl(1000), window="1h", at=at)
    assert b.status == "in_progress"
    batch_advance(b.pk, at=at)
    running = b.requests.filter(status="running").count()
    assert 0 < running < 1000
    # Interactive load takes the whole pool: nothing new starts while it lasts.
    busy("h200-main", 1.0)
    later = at + dt.timedelta(seconds=60)
    batch_advance(b.pk, at=later, force=True)
    assert b.requests.filter(status="running").count() == 0
    assert b.requests.filter(status="completed").count() == running
    busy("h200-main", 0.995)
    run(b, later + dt.timedelta(seconds=1))
    b.refresh_from_db()
    assert b.status == "completed" and b.completed == 1000


# --- Scheduling ----------------------------------------------------------------------------


def test_a_batch_with_a_later_start_waits_and_beat_starts_it(account):
    at = timezone.now()
    start = at + dt.timedelta(hours=2)
    b = make(account, jsonl(5), window="1h", at=at, start_at=start.isoformat())
    assert b.status == "validating" and b.validated_at and b.plan
    assert b.expires_at == start + dt.timedelta(hours=1)
    assert batches_sweep(at=at + dt.timedelta(hours=1))["started"] == 0
    assert batches_sweep(at=start)["started"] == 1
    b.refresh_from_db()
    assert b.status == "in_progress" and b.in_progress_at == start


def test_a_batch_whose_window_passed_before_it_started_expires(account):
    at = timezone.now()
    b = make(
        account, jsonl(3), window="1h", at=at, start_at=(at + dt.timedelta(hours=1)).isoformat()
    )
    batches_sweep(at=at + dt.timedelta(hours=3))
    b.refresh_from_db()
    assert b.status == "expired" and b.failed == 3 and b.error_file_id
    assert not QuotaReservation.objects.filter(state="held").exists()


# --- Cancel, expiry, quota --------------------------------------------------------------------


def test_cancel_keeps_what_finished_bills_it_and_releases_the_rest(api, account):
    busy("h200-main", 0.995)
    at = timezone.now()
    b = make(account, jsonl(3000), window="1h", at=at)  # ~5 waves of ~42 s
    wave = first_wave_seconds(b)
    first_wave_end = run(b, at, until=at + dt.timedelta(seconds=wave * 1.2))
    b.refresh_from_db()
    assert 0 < b.completed < 3000 and b.requests.filter(status="running").exists()
    r = api.post(f"/api/v1/batches/{b.pk}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelling"
    assert api.post(f"/api/v1/batches/{b.pk}/cancel").json()["status"] == "cancelling"
    run(b, first_wave_end)
    b.refresh_from_db()
    assert b.status == "cancelled" and b.cancelled_at and b.cancelling_at
    assert b.completed + b.failed == 3000
    done = b.requests.filter(status="completed")
    assert done.count() == b.completed and b.completed > 0
    assert b.cost == sum(r.cost for r in done) == b.completed * Decimal("0.025")
    assert {x["custom_id"] for x in read(b.output_file)} == set(
        done.values_list("custom_id", flat=True)
    )
    assert {x["error"]["code"] for x in read(b.error_file)} == {"batch_cancelled"}
    pkg = account.packages.get()
    assert pkg.reserved == 0 and pkg.spent == b.cost
    ledger_ok()
    r = api.post(f"/api/v1/batches/{b.pk}/cancel")
    assert r.json()["status"] == "cancelled"


def test_cancelling_an_ended_batch_is_a_409(api, account):
    at = timezone.now()
    b = make(account, jsonl(2), at=at)
    run(b, at)
    r = api.post(f"/api/v1/batches/{b.pk}/cancel")
    assert r.status_code == 409 and r["Content-Type"] == PROBLEM


def test_expiry_returns_and_bills_what_finished_and_releases_the_rest(account):
    busy("h200-main", 0.995)
    at = timezone.now()
    b = make(account, jsonl(3000), window="1h", at=at)  # ~6 waves of ~35 s
    # The pool is taken by interactive work half-way: the rest cannot finish in time.
    run(b, at, until=at + dt.timedelta(seconds=100))
    busy("h200-main", 1.0)
    # The wave in flight ends; nothing more starts (the chain polls for room meanwhile).
    run(b, at + dt.timedelta(seconds=100), until=at + dt.timedelta(seconds=200))
    b.refresh_from_db()
    assert b.status == "in_progress" and not b.requests.filter(status="running").exists()
    batch_advance(b.pk, at=b.expires_at)  # the link at the end of the window
    b.refresh_from_db()
    assert b.status == "expired" and b.expired_at >= b.expires_at
    assert 0 < b.completed < 3000 and b.completed + b.failed == 3000
    done = b.requests.filter(status="completed")
    assert all(r.finished_at <= b.expires_at for r in done)
    assert b.cost == b.completed * Decimal("0.025")
    assert len(read(b.output_file)) == b.completed
    assert {x["error"]["code"] for x in read(b.error_file)} == {"batch_expired"}
    pkg = account.packages.get()
    assert pkg.reserved == 0 and pkg.spent == b.cost
    ledger_ok()


def test_two_batches_of_one_account_never_overspend(account):
    pkg = account.packages.get()
    quota_limit = Decimal("10")
    type(pkg).objects.filter(pk=pkg.pk).update(limit=quota_limit)
    at = timezone.now()
    first = make(account, jsonl(300), at=at)  # 7.50
    second = make(account, jsonl(200, start=1000), at=at)  # 5.00: over what is left
    assert first.status == "in_progress"
    assert second.status == "failed" and second.errors[0]["code"] == "insufficient_quota"
    pkg.refresh_from_db()
    assert pkg.reserved == Decimal("7.5") and pkg.limit - pkg.spent - pkg.reserved >= 0
    run(first, at)
    third = make(account, jsonl(100, start=2000), at=at)  # 2.50 fits what is left
    assert third.status == "in_progress"
    run(third, at)
    pkg.refresh_from_db()
    assert pkg.spent == Decimal("10") and pkg.reserved == 0
    ledger_ok()


def test_a_repeated_advance_does_nothing_twice(account):
    at = timezone.now()
    b = make(account, jsonl(50), at=at)
    first = batch_advance(b.pk, at=at)
    again = batch_advance(b.pk, at=at)  # a duplicate message: the next link is later
    assert first["started"] == 50 and again["started"] == 0 and again["completed"] == 0
    run(b, at)
    b.refresh_from_db()
    assert b.completed == 50 and b.cost == Decimal("1.25")
    assert LedgerEntry.objects.filter(kind="draw").count() == 1
    ledger_ok()


def test_retry_failed_requests_makes_a_batch_of_them(account):
    busy("h200-main", 0.995)
    at = timezone.now()
    b = make(account, jsonl(1000), window="1h", at=at)
    run(b, at, until=at + dt.timedelta(seconds=30))
    batch_cancel(batch=b, at=at + dt.timedelta(seconds=30))
    run(b, at + dt.timedelta(seconds=30))
    b.refresh_from_db()
    retry = batch_retry_failed(batch=b, at=at + dt.timedelta(minutes=2))
    assert retry.retry_of_id == b.pk and retry.input_file.lines == b.failed
    batch_validate(retry.pk, at=at + dt.timedelta(minutes=2))
    retry.refresh_from_db()
    assert retry.total == b.failed and retry.status == "in_progress"
    with pytest.raises(BatchError):
        batch_retry_failed(batch=retry)  # still running


# --- Retirement day (issue 7) -----------------------------------------------------------------


def test_queued_batch_lines_are_replanned_on_the_successor_when_the_model_retires(account):
    busy("h200-main", 0.999)
    at = timezone.now()
    b = make(account, jsonl(3000, model="gpt-5.6-luna"), window="2h", at=at)
    assert b.status == "in_progress" and b.plan["tiers"]
    batch_advance(b.pk, at=at)
    started = b.requests.filter(status="running").count()
    assert 0 < started < 3000
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    lifecycle.model_update_lifecycle(
        model=luna, actor="t", successor=ModelVersion.objects.get(slug="gpt-5.6-terra")
    )
    luna = lifecycle.model_retire_now(
        model=ModelVersion.objects.get(slug="gpt-5.6-luna"), actor="t", notice_override="test"
    )
    # The day's work (beat's task; retire-now runs it after commit): queued lines move,
    # running ones stay.
    assert retirement.retirements_apply_due()["batch_lines_moved"] == 3000 - started
    moved = b.requests.filter(rerouted_from="gpt-5.6-luna")
    assert moved.count() == 3000 - started
    assert set(moved.values_list("model__slug", flat=True)) == {"gpt-5.6-terra"}
    assert b.requests.filter(status="running", model__slug="gpt-5.6-luna").count() == started
    b.refresh_from_db()
    assert any(lane["model"] == "gpt-5.6-terra" for lane in b.plan["lanes"])
    assert b.plan["replans"][0]["from"] == "gpt-5.6-luna"
    # Once: running it again (beat, a retry) moves nothing more.
    assert batches_reroute(model=luna)["moved"] == 0
    assert retirement.retirements_apply_due()["batch_lines_moved"] == 0
    run(b, at)
    b.refresh_from_db()
    assert b.status == "completed" and b.completed == 3000
    out = {x["custom_id"]: x["response"]["body"] for x in read(b.output_file)}
    assert (
        sum(1 for x in out.values() if x.get("rerouted_from") == "gpt-5.6-luna") == 3000 - started
    )
    pkg = account.packages.get()
    assert pkg.reserved == 0 and pkg.spent == b.cost
    ledger_ok()


def test_a_firing_redelivered_minutes_later_makes_one_batch(account):
    from django_celery_beat.models import CrontabSchedule

    from routing.models import BatchSchedule

    cron = CrontabSchedule.objects.create(minute="0", hour="2", timezone="UTC")
    f = upload(account, jsonl(2))
    s = BatchSchedule.objects.create(name="nightly", account=account, input_file=f, crontab=cron)
    fired = dt.datetime(2026, 12, 3, 2, 0, 5, tzinfo=dt.UTC)
    first = batch_from_schedule(s.pk, at=fired)
    again = batch_from_schedule(s.pk, at=fired + dt.timedelta(minutes=3))  # redelivered
    assert first.pk == again.pk and first.scheduled_for == fired.replace(second=0)
    next_night = batch_from_schedule(s.pk, at=fired + dt.timedelta(days=1))
    assert next_night.pk != first.pk
    assert Batch.objects.filter(schedule=s).count() == 2


def test_a_batch_refused_after_its_lines_were_read_fails_them_too(account):
    b = make(account, jsonl(10, input_tokens=8000, output_tokens=22000, turns=30), window="1m")
    assert b.status == "failed" and b.failed == 10
    assert set(b.requests.values_list("status", flat=True)) == {"failed"}


def test_the_run_chart_shows_each_tier(account):
    import base64

    top_up(account, "1000")
    busy("h200-main", 0.995)
    at = timezone.now()
    b = make(account, jsonl(2000), window="2m", at=at)
    assert batch_chart(b) is None  # nothing completed yet
    run(b, at)
    b.refresh_from_db()
    uri = batch_chart(b)
    assert uri.startswith("data:image/png;base64,")
    assert base64.b64decode(uri.split(",", 1)[1])[:4] == b"\x89PNG"


def test_a_batch_waiting_for_its_start_shows_scheduled_natively_and_validating_on_v1(api, account):
    """Issue 23, finding 7: a batch validated at once and waiting for a start weeks away
    showed `validating` all along. Natively it is `scheduled` with `scheduled_start_at`;
    /v1 keeps OpenAI's `validating` and carries `scheduled_start_at` too."""
    at = timezone.now()
    start = (at + dt.timedelta(days=20)).replace(microsecond=0)
    b = make(account, jsonl(3), window="1h", at=at, start_at=start.isoformat())
    native = api.get(f"/api/v1/batches/{b.pk}").json()
    assert native["status"] == "scheduled" and native["validated_at"]
    assert native["scheduled_start_at"] == start.isoformat().replace("+00:00", "Z")
    v1 = api.get(f"/v1/batches/{b.pk}").json()
    assert v1["status"] == "validating" and v1["scheduled_start_at"] == int(start.timestamp())
    listed = lambda path: [x["id"] for x in api.get(path).json()["data"]]  # noqa: E731
    assert listed("/api/v1/batches?status=scheduled") == [str(b.pk)]
    assert listed("/api/v1/batches?status=validating") == []
    assert listed("/v1/batches?status=validating") == [str(b.pk)]
    unvalidated = make(account, jsonl(1), at=at, validate=False)
    assert api.get(f"/api/v1/batches/{unvalidated.pk}").json()["status"] == "validating"
    assert listed("/api/v1/batches?status=validating") == [str(unvalidated.pk)]
    batches_sweep(at=start)
    native = api.get(f"/api/v1/batches/{b.pk}").json()
    assert native["status"] == "in_progress" and native["scheduled_start_at"] is None
    assert api.get(f"/v1/batches/{b.pk}").json()["scheduled_start_at"] is None

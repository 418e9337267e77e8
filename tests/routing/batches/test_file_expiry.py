"""Batch output expiry (issue 13): a batch's output and error files carry `expires_at`
(BATCH_OUTPUT_EXPIRES_DAYS); the housekeeping task deletes their content once due; GET
of an expired file's content is a 410 problem+json `file-expired`."""

import datetime as dt
import io

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from routing.batches.files import files_bytes, files_expire_due
from routing.models import File
from routing.tasks.housekeeping import expire_files
from tests.helpers import batch_make as make
from tests.helpers import batch_run as run
from tests.helpers import jsonl

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def stored(f: File) -> bool:
    return bool(f.content.name) and f.content.storage.exists(f.content.name)


@pytest.fixture
def ended_batch(account):
    at = timezone.now()
    b = make(account, jsonl(3) + b"\n" + b'{"custom_id": "bad", "body": {}}', at=at)
    run(b, at)
    b.refresh_from_db()
    assert b.output_file_id and b.error_file_id
    return b


def test_output_and_error_files_expire_after_the_setting(api, ended_batch, settings):
    days = django_settings.BATCH_OUTPUT_EXPIRES_DAYS
    assert days == 30
    for f in (ended_batch.output_file, ended_batch.error_file):
        assert f.expires_at is not None
        assert abs(f.expires_at - (f.created_at + dt.timedelta(days=days))) < dt.timedelta(
            minutes=1
        )
        body = api.get(f"/api/v1/files/{f.pk}").json()
        assert body["expires_at"].endswith("Z")
    inp = api.get(f"/api/v1/files/{ended_batch.input_file_id}").json()
    assert inp["expires_at"] is None  # a client's input does not expire


def test_zero_days_keeps_outputs(account, settings):
    settings.BATCH_OUTPUT_EXPIRES_DAYS = 0
    at = timezone.now()
    b = make(account, jsonl(2), at=at)
    run(b, at)
    b.refresh_from_db()
    assert b.output_file.expires_at is None


def test_an_expired_files_content_is_a_410_and_housekeeping_deletes_it(
    api, account, ended_batch, django_capture_on_commit_callbacks
):
    out = ended_batch.output_file
    assert api.get(f"/api/v1/files/{out.pk}/content").status_code == 200
    later = timezone.now()  # the error file is not due then
    File.objects.filter(pk=out.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    # Due but not yet swept: already a 410, with a clear message.
    r = api.get(f"/api/v1/files/{out.pk}/content")
    assert r.status_code == 410 and r["Content-Type"] == PROBLEM
    problem = r.json()
    assert problem["type"].endswith("/file-expired") and "expired" in problem["detail"]
    assert stored(out)
    before = files_bytes(account)

    with django_capture_on_commit_callbacks(execute=True):
        assert files_expire_due(at=later) >= 1
    out.refresh_from_db()
    assert out.content.name == "" and not File.objects.get(pk=out.pk).content
    assert files_bytes(account) == before - out.bytes  # no longer counts toward the cap
    # The file and its batch still show it; its content stays a 410.
    body = api.get(f"/api/v1/files/{out.pk}").json()
    assert body["expires_at"] and body["bytes"] == out.bytes
    assert api.get(f"/api/v1/batches/{ended_batch.pk}").json()["output_file_id"] == out.pk
    r = api.get(f"/api/v1/files/{out.pk}/content")
    assert r.status_code == 410 and r.json()["type"].endswith("/file-expired")
    # Idempotent: a second run finds nothing more (the error file is not due yet).
    with django_capture_on_commit_callbacks(execute=True):
        assert files_expire_due(at=later) == 0
    assert stored(ended_batch.error_file)
    # The owner may still delete the expired file's row.
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/files/{out.pk}").status_code == 204


def test_the_content_stays_when_the_transaction_rolls_back(
    ended_batch, django_capture_on_commit_callbacks, monkeypatch
):
    out = ended_batch.output_file
    at = out.expires_at + dt.timedelta(seconds=1)

    def broken_save(self, *a, **kw):
        raise RuntimeError("database went away")

    monkeypatch.setattr(File, "save", broken_save)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        files_expire_due(at=at)
    monkeypatch.undo()
    out.refresh_from_db()
    assert stored(out) and out.content.name


def test_the_beat_task_expires_due_files(ended_batch, settings):
    assert settings.CELERY_BEAT_SCHEDULE["expire-files"]["task"] == "routing.expire_files"
    File.objects.filter(pk__in=[ended_batch.output_file_id, ended_batch.error_file_id]).update(
        expires_at=timezone.now() - dt.timedelta(minutes=1)
    )
    assert expire_files.apply().get() == 2
    assert expire_files.apply().get() == 0
    assert File.objects.filter(pk=ended_batch.output_file_id, content="").exists()


def test_an_uploaded_input_never_expires(api):
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(2))})
    assert r.status_code == 201 and r.json()["expires_at"] is None
    assert files_expire_due(at=timezone.now() + dt.timedelta(days=3650)) == 0

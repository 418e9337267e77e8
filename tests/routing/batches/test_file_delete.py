"""DELETE /api/v1/files/{id} (issue 13): by its owner, with its stored content; someone
else's or an unknown id is a 404; the input of a batch that has not ended is a 409."""

import io
from decimal import Decimal

import pytest
from django.utils import timezone

from routing.accounts.accounts import account_create
from routing.models import Batch, File
from tests.helpers import ApiClient, jsonl
from tests.helpers import batch_make as make
from tests.helpers import batch_run as run

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def stored(f: File) -> bool:
    return f.content.storage.exists(f.content.name)


def test_the_owner_deletes_a_file_and_its_content(api, django_capture_on_commit_callbacks):
    file_id = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(3))}).json()[
        "id"
    ]
    f = File.objects.get(pk=file_id)
    assert stored(f)
    with django_capture_on_commit_callbacks(execute=True):  # the content goes on commit
        r = api.delete(f"/api/v1/files/{file_id}")
    assert r.status_code == 204 and r.content == b""
    assert not File.objects.filter(pk=file_id).exists()
    assert not stored(f)
    assert api.get(f"/api/v1/files/{file_id}").status_code == 404
    r = api.delete(f"/api/v1/files/{file_id}")  # again: gone
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM


def test_someone_elses_or_an_unknown_file_is_a_404(api, account):
    mine = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(1))}).json()
    other = ApiClient(account_create(name="other", default_credits=Decimal(1))[1])
    for file_id in (mine["id"], "file-doesnotexist", "x" * 300):
        r = other.delete(f"/api/v1/files/{file_id}")
        assert r.status_code == 404 and r["Content-Type"] == PROBLEM
        assert r.json()["type"].endswith("file-not-found")
    assert stored(File.objects.get(pk=mine["id"]))


def test_the_input_of_a_batch_not_ended_is_a_409(api, account):
    b = make(account, jsonl(2))
    assert b.status not in Batch.TERMINAL
    r = api.delete(f"/api/v1/files/{b.input_file_id}")
    assert r.status_code == 409 and r["Content-Type"] == PROBLEM
    assert r.json()["type"].endswith("file-in-use") and str(b.pk) in r.json()["detail"]
    f = File.objects.get(pk=b.input_file_id)
    assert stored(f)


def test_an_ended_batchs_input_and_output_may_go(api, account, django_capture_on_commit_callbacks):
    at = timezone.now()
    b = make(account, jsonl(2), at=at)
    run(b, at)
    b.refresh_from_db()
    assert b.status == "completed" and b.output_file_id
    out, inp = b.output_file, b.input_file
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/files/{out.pk}").status_code == 204
        # The input too, once the batch has ended (OpenAI allows it; issue 26).
        assert api.delete(f"/api/v1/files/{inp.pk}").status_code == 204
    assert not stored(out) and not stored(inp)
    body = api.get(f"/api/v1/batches/{b.pk}").json()
    assert body["status"] == "completed" and body["output_file_id"] is None
    assert body["input_file_id"] is None


def test_an_upload_past_the_accounts_storage_cap_is_a_413(api, account, settings):
    first = jsonl(3)
    settings.FILES_MAX_BYTES_PER_ACCOUNT = len(first) + 10
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(first)})
    assert r.status_code == 201
    before = File.objects.count()
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(3))})
    assert r.status_code == 413 and r["Content-Type"] == PROBLEM
    assert r.json()["type"].endswith("storage-full")
    assert File.objects.count() == before  # no row
    # Another account has its own room; deleting makes room again.
    other = ApiClient(account_create(name="other", default_credits=Decimal(1))[1])
    r2 = other.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(3))})
    assert r2.status_code == 201
    assert (
        api.delete(f"/api/v1/files/{File.objects.filter(account=account).get().pk}").status_code
        == 204
    )
    r = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(3))})
    assert r.status_code == 201


def test_the_cap_is_checked_again_when_the_row_is_written(account, settings, monkeypatch):
    """Two uploads measured together cannot both pass: the second, rechecked under the
    account's lock, is refused and its content removed."""
    from routing.batches import files

    settings.FILES_MAX_BYTES_PER_ACCOUNT = 10_000
    checks = []
    real = files._check_room

    def check(acc, size):
        checks.append(size)
        if len(checks) == 2:  # as if another upload landed between check and write
            settings.FILES_MAX_BYTES_PER_ACCOUNT = 1
        real(acc, size)

    monkeypatch.setattr(files, "_check_room", check)
    stream = io.BytesIO(jsonl(2))
    stream.name = "in.jsonl"
    with pytest.raises(files.FileRejected) as exc:
        files.file_create(account=account, purpose="batch", upload=stream)
    assert exc.value.code == "storage-full" and len(checks) == 2
    assert not File.objects.filter(account=account).exists()

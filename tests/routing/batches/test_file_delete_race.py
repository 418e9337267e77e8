"""A batch created while its input file is deleted (issue 23, finding 4: a foreign-key
violation at commit, a 500 on both surfaces, in 41 of 56 races). Over real, separate
PostgreSQL connections (one per thread): whichever commits first wins, and the other
gets a clean 4xx in its surface's own shape: the create a 404 `file-not-found`, the
delete a 409 `file-in-use`."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections, transaction

from routing.batches.create import batch_create
from routing.batches.files import file_delete
from routing.models import Batch, File
from tests.helpers import ApiClient, file_upload, jsonl

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SURFACES = ["/api/v1", "/v1"]


def create_body(file_id: str) -> dict:
    return {"input_file_id": file_id, "endpoint": "/v1/jobs", "completion_window": "24h"}


def wait_until_blocked(other: threading.Thread) -> None:
    """Until a connection of this database waits on a row lock (the other side of the
    race has reached it), or `other` has ended without waiting (a bounded poll)."""
    for _ in range(2000):
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cur.fetchone()[0] or not other.is_alive():
                return
        time.sleep(0.005)


def in_thread(fn):
    """`fn` run in a thread of its own (its own connection); (thread, result list)."""
    out = []

    def run():
        try:
            out.append(fn())
        finally:
            connections.close_all()

    t = threading.Thread(target=run)
    t.start()
    return t, out


def assert_refused(r, surface: str, status: int, slug: str, code: str):
    assert r.status_code == status, (r.status_code, r.content[:300])
    if surface == "/v1":  # OpenAI's envelope
        assert r["Content-Type"].startswith("application/json")
        assert r.json()["error"]["code"] == code, r.json()
    else:
        assert r["Content-Type"] == "application/problem+json"
        assert r.json()["type"].endswith(f"/{slug}")


@pytest.mark.parametrize("surface", SURFACES)
def test_a_create_that_loses_to_a_delete_is_a_404(
    on_postgres, account_with_key, dispatched, surface
):
    account, key = account_with_key
    f = file_upload(account, jsonl(2))
    deleted, committed = threading.Event(), threading.Event()

    def delete_and_hold():
        with transaction.atomic():  # deleted, not yet committed, while the create runs
            file_delete(f)
            deleted.set()
            committed.wait()

    deleter, _ = in_thread(delete_and_hold)
    deleted.wait()
    # The create sees the committed file (its first check passes) and reaches the row lock.
    creator, out = in_thread(
        lambda: ApiClient(key).post_json(f"{surface}/batches", create_body(f.pk))
    )
    wait_until_blocked(creator)
    committed.set()
    deleter.join()
    creator.join()
    assert_refused(out[0], surface, 404, "file-not-found", "file_not_found")
    assert not File.objects.filter(pk=f.pk).exists() and not Batch.objects.exists()


@pytest.mark.parametrize("surface", SURFACES)
def test_a_delete_that_loses_to_a_create_is_a_409(
    on_postgres, account_with_key, dispatched, surface
):
    account, key = account_with_key
    f = file_upload(account, jsonl(2))
    created, committed = threading.Event(), threading.Event()

    def create_and_hold():
        with transaction.atomic():  # created, not yet committed, while the delete runs
            batch_create(account=account, input_file_id=f.pk)
            created.set()
            committed.wait()

    creator, _ = in_thread(create_and_hold)
    created.wait()
    deleter, out = in_thread(lambda: ApiClient(key).delete(f"{surface}/files/{f.pk}"))
    wait_until_blocked(deleter)
    committed.set()
    creator.join()
    deleter.join()
    assert_refused(out[0], surface, 409, "file-in-use", "file_in_use")
    assert File.objects.filter(pk=f.pk).exists() and Batch.objects.get().input_file_id == f.pk


@pytest.mark.parametrize("surface", SURFACES)
def test_racing_creates_and_deletes_never_500(on_postgres, account_with_key, dispatched, surface):
    account, key = account_with_key
    files = [file_upload(account, jsonl(1)) for _ in range(12)]
    barrier = threading.Barrier(2)

    def create(f):
        barrier.wait()
        try:
            return ApiClient(key).post_json(f"{surface}/batches", create_body(f.pk)).status_code
        finally:
            connections.close_all()

    def delete(f):
        barrier.wait()
        try:
            return ApiClient(key).delete(f"{surface}/files/{f.pk}").status_code
        finally:
            connections.close_all()

    outcomes = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in files:
            c, d = pool.submit(create, f), pool.submit(delete, f)
            outcomes.append((c.result(), d.result()))
    created = 202 if surface == "/api/v1" else 200
    deleted = 204 if surface == "/api/v1" else 200
    for (c, d), f in zip(outcomes, files, strict=True):
        # Exactly one wins: a batch on a kept file, or a deleted file and no batch.
        assert (c, d) in ((created, 409), (404, deleted)), (c, d)
        assert Batch.objects.filter(input_file_id=f.pk).exists() == (c == created)
        assert File.objects.filter(pk=f.pk).exists() == (c == created)

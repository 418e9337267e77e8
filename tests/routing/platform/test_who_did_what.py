"""Issue 27 item 2: every job, batch and file records the key that made it, and a job
the OpenAI `user` and `metadata` (bounded), on both surfaces."""

import io

import pytest

from routing.accounts.keys import api_key_create
from routing.models import Batch, File, Job
from tests.helpers import ApiClient, job_submit, jsonl

pytestmark = pytest.mark.django_db
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


@pytest.fixture
def second(account):
    key, raw = api_key_create(account=account, name="ci")
    return key, ApiClient(raw)


def test_a_native_job_records_its_key_user_and_metadata(api, account, second):
    key, other = second
    r = job_submit(other, user="u-42", metadata={"team": "search"})
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["api_key_id"] == key.pk and body["user"] == "u-42"
    assert body["metadata"] == {"team": "search"}
    job = Job.objects.get(pk=body["id"])
    assert (job.api_key_id, job.user, job.metadata) == (key.pk, "u-42", {"team": "search"})
    first = job_submit(api).json()
    assert first["api_key_id"] == account.api_keys.get(name="default").pk
    assert first["user"] is None and first["metadata"] == {}


@pytest.mark.parametrize(
    "field, value",
    [
        ("metadata", {f"k{i}": "v" for i in range(17)}),
        ("metadata", {"k" * 65: "v"}),
        ("metadata", {"k": "v" * 513}),
        ("metadata", {"k": 1}),
        ("metadata", ["a"]),
        ("user", "u" * 257),
        ("user", 5),
    ],
)
def test_bounds_are_a_400_naming_the_field(api, field, value):
    r = job_submit(api, **{field: value})
    assert r.status_code == 400, r.content
    assert r["Content-Type"] == "application/problem+json"
    assert field in r.content.decode()
    assert Job.objects.count() == 0


def test_a_chat_completion_records_its_key_user_and_metadata(second):
    key, other = second
    r = other.post_json(
        "/v1/chat/completions",
        {
            "model": "sol",
            "messages": MESSAGES,
            "max_tokens": 5,
            "user": "end-user-7",
            "metadata": {"run": "nightly"},
        },
    )
    assert r.status_code == 200, r.content
    job = Job.objects.get(pk=r.json()["job_id"])
    assert (job.api_key_id, job.user, job.metadata) == (key.pk, "end-user-7", {"run": "nightly"})


def test_files_and_batches_record_their_key(second, dispatched):
    key, other = second
    up = io.BytesIO(jsonl(3))
    up.name = "in.jsonl"
    f = other.post("/api/v1/files", {"file": up, "purpose": "batch"})
    assert f.status_code == 201, f.content
    assert File.objects.get(pk=f.json()["id"]).api_key_id == key.pk
    b = other.post_json("/v1/batches", {"input_file_id": f.json()["id"], "endpoint": "/v1/jobs"})
    assert b.status_code == 200, b.content
    assert Batch.objects.get(pk=b.json()["id"]).api_key_id == key.pk

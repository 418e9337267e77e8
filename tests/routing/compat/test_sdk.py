"""The OpenAI-compatible surface driven by the official `openai` SDK against a live
server (pytest-django's live_server: real HTTP, no mock of the SDK or of HTTP). Batches
are run in-process with explicit times (tests.helpers.batch_run), as the workers would;
tests/routing/compat/test_sdk_realparts.py runs one through real workers."""

from __future__ import annotations

import datetime as dt
import itertools
import json

import openai
import pytest
from django.utils import timezone
from openai.types.chat import ChatCompletion

from catalog.models import ModelVersion
from routing.batches.validation import batch_validate
from routing.models import Batch
from tests.helpers import batch_run, jsonl

pytestmark = pytest.mark.django_db(transaction=True)

RETIRED = "gpt-5.3-codex-spark"


@pytest.fixture
def client(sdk, account_with_key) -> openai.OpenAI:
    return sdk(account_with_key[1])


def chat_lines(n: int, *, model: str = "sol", extra: list[dict] = ()) -> bytes:
    rows = [
        {
            "custom_id": f"c{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": model,
                "messages": [{"role": "user", "content": f"Say hello {i} " * 20}],
                "max_completion_tokens": 200,
            },
        }
        for i in range(n)
    ]
    return "\n".join(json.dumps(r) for r in [*rows, *extra]).encode()


def run_to_end(batch_id: str) -> Batch:
    """Validate and run a batch in-process (the workers' steps, at explicit times)."""
    at = timezone.now()
    batch_validate(batch_id, at=at)
    batch = Batch.objects.get(pk=batch_id)
    batch_run(batch, at)
    batch.refresh_from_db()
    return batch


# --- Models ---------------------------------------------------------------------------


def test_models_list_pages_over_every_model(client):
    seen = [m.id for m in client.models.list()]
    assert sorted(seen) == sorted(ModelVersion.objects.values_list("slug", flat=True))
    assert len(seen) == len(set(seen)) > 1
    models = {m.id: m for m in client.models.list()}
    assert models[RETIRED].status == "retired" and models[RETIRED].successor
    model = next(m for m in models.values() if m.status == "active")
    assert model.object == "model" and isinstance(model.created, int) and model.owned_by
    assert dt.datetime.fromtimestamp(model.created, dt.UTC).year >= 2020


def test_retrieving_a_retired_model_shows_its_successor_and_the_headers(client):
    raw = client.models.with_raw_response.retrieve(RETIRED)
    model = raw.parse()
    assert model.id == RETIRED and model.status == "retired"
    assert model.successor and model.retires_on
    assert raw.headers["Deprecation"].startswith("@") and raw.headers["Sunset"]
    assert 'rel="successor-version"' in raw.headers["Link"]
    assert 'rel="deprecation"' in raw.headers["Link"]  # with a key: the account's notices


def test_an_unknown_model_is_the_sdks_not_found_error(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-9")
    assert err.value.code == "model_not_found"
    assert "No model 'gpt-9'" in err.value.message and "sol" in err.value.message
    assert err.value.type == "invalid_request_error"


def test_a_bad_key_is_the_sdks_authentication_error(sdk, builtin_catalog):
    bad = sdk("sk-nope")
    with pytest.raises(openai.AuthenticationError) as err:
        bad.models.list()
    assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.batches.list()


# --- Files ----------------------------------------------------------------------------


def test_files_create_retrieve_list_content_delete(client):
    data = jsonl(3)
    f = client.files.create(file=("in.jsonl", data), purpose="batch")
    assert f.object == "file" and f.purpose == "batch" and f.bytes == len(data)
    assert f.filename == "in.jsonl" and f.status == "processed"
    assert abs(f.created_at - timezone.now().timestamp()) < 3600
    assert client.files.retrieve(f.id).id == f.id
    others = [client.files.create(file=(f"{i}.jsonl", data), purpose="batch") for i in range(2)]
    listed = [x.id for x in client.files.list(limit=2)]  # auto-paging: 2 pages
    assert listed == [others[1].id, others[0].id, f.id]
    assert client.files.content(f.id).content == data  # Accept: application/binary
    deleted = client.files.delete(f.id)
    assert deleted.deleted and deleted.id == f.id
    with pytest.raises(openai.NotFoundError) as err:
        client.files.retrieve(f.id)
    assert err.value.code == "file_not_found"


def test_a_bad_upload_is_a_readable_sdk_error(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.files.create(file=("in.jsonl", b"{}"), purpose="fine-tune")
    assert err.value.code == "invalid_purpose" and "purpose" in err.value.message


# --- Batches --------------------------------------------------------------------------


def test_batches_list_auto_paging_ends(client, dispatched):
    f = client.files.create(file=("in.jsonl", jsonl(2)), purpose="batch")
    made = [
        client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        for _ in range(5)
    ]
    first = client.batches.list(limit=2)
    assert first.has_more and len(first.data) == 2
    pages = list(itertools.islice(first.iter_pages(), 10))  # a list that never ends: 10
    assert [len(p.data) for p in pages] == [2, 2, 1] and pages[-1].has_more is False
    assert [b.id for b in itertools.islice(client.batches.list(limit=2), 20)] == made[::-1]


def test_a_chat_batch_completes_and_every_output_line_is_a_chat_completion(client, dispatched):
    retired_line = {
        "custom_id": "old",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": RETIRED, "messages": [{"role": "user", "content": "hi"}]},
    }
    f = client.files.create(
        file=("chat.jsonl", chat_lines(6, extra=[retired_line])), purpose="batch"
    )
    b = client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"team": "docs"},
    )
    assert b.status == "validating" and b.endpoint == "/v1/chat/completions"
    assert dt.datetime.fromtimestamp(b.created_at, dt.UTC) and b.metadata == {"team": "docs"}
    assert run_to_end(b.id).status == "completed"

    b = client.batches.retrieve(b.id)
    assert b.status == "completed" and b.completed_at >= b.created_at
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (
        7,
        6,
        1,
    )
    assert b.model_extra["plan"] and b.model_extra["cost"]
    out = client.files.content(b.output_file_id).text.splitlines()
    assert len(out) == 6
    for line in out:
        row = json.loads(line)
        completion = ChatCompletion.model_validate(row["response"]["body"])
        assert completion.object == "chat.completion" and completion.usage.completion_tokens == 200
        assert completion.choices[0].message.content and completion.model
        # The line's charge, as a number in usage.cost and as a string in cost.
        assert completion.usage.cost == float(row["response"]["body"]["cost"]) > 0
    (err,) = [json.loads(x) for x in client.files.content(b.error_file_id).text.splitlines()]
    assert err["custom_id"] == "old" and err["error"]["code"] == "model_retired"
    assert err["error"]["successor"] and err["error"]["successor"] in err["error"]["message"]


def test_a_responses_batch_answers_response_objects(client, dispatched):
    line = {
        "custom_id": "r1",
        "method": "POST",
        "url": "/v1/responses",
        "body": {"model": "sol", "input": "Write a haiku. " * 10, "max_output_tokens": 64},
    }
    f = client.files.create(file=("r.jsonl", json.dumps(line).encode()), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/responses", completion_window="24h")
    assert run_to_end(b.id).status == "completed"
    (row,) = [
        json.loads(x)
        for x in client.files.content(
            client.batches.retrieve(b.id).output_file_id
        ).text.splitlines()
    ]
    body = row["response"]["body"]
    assert body["object"] == "response" and body["usage"]["output_tokens"] == 64
    assert body["usage"]["input_tokens"] == 38  # ceil(150 characters / 4)
    assert body["usage"]["cost"] == float(body["cost"]) > 0
    assert body["output"][0]["content"][0]["text"]


def test_cancel_a_batch(client, dispatched):
    f = client.files.create(file=("in.jsonl", jsonl(3)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/jobs", completion_window="24h")
    cancelled = client.batches.cancel(b.id)
    assert cancelled.id == b.id and cancelled.status in ("cancelling", "cancelled")
    assert client.batches.cancel(b.id).status == cancelled.status  # again: no change
    done = client.batches.create(input_file_id=f.id, endpoint="/v1/jobs", completion_window="24h")
    assert run_to_end(done.id).status == "completed"
    with pytest.raises(openai.ConflictError) as err:
        client.batches.cancel(done.id)
    assert err.value.code == "batch_not_cancellable" and "completed" in err.value.message


def test_batch_errors_are_the_sdks_exceptions(client, dispatched):
    with pytest.raises(openai.NotFoundError) as err:
        client.batches.retrieve("00000000-0000-0000-0000-000000000000")
    assert err.value.code == "batch_not_found"
    f = client.files.create(file=("in.jsonl", jsonl(1)), purpose="batch")
    with pytest.raises(openai.BadRequestError) as err:
        client.batches.create(
            input_file_id=f.id, endpoint="/v1/embeddings", completion_window="24h"
        )
    assert err.value.param == "endpoint" and "/v1/responses" in err.value.message

"""A 1,000-line chat batch through the real service (gunicorn, Celery workers and beat
on throwaway PostgreSQL and Redis), driven only by the `openai` SDK: upload, create,
poll, and every output line read by the SDK's own ChatCompletion model."""

from __future__ import annotations

import itertools
import json

import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.sdk import batch_until_ended
from tests.stack import Stack

pytestmark = pytest.mark.realparts


@pytest.fixture
def stack(postgres_server, redis_server):
    s = Stack(postgres_server, redis_server, scale=400.0, credits="1000")
    try:
        yield s
    finally:
        s.close()


def chat_file(n: int) -> bytes:
    return "\n".join(
        json.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "sol",
                    "messages": [{"role": "user", "content": f"Summarise ticket {i:04d}. " * 40}],
                    "max_completion_tokens": 300,
                },
            }
        )
        for i in range(n)
    ).encode()


def test_a_thousand_line_chat_batch_runs_to_completion_through_the_sdk(stack):
    stack.start_worker()
    stack.start_beat()
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{stack.port}/v1", api_key=stack.key, max_retries=0
    )
    try:
        f = client.files.create(file=("chat.jsonl", chat_file(1000)), purpose="batch")
        b = client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        b = batch_until_ended(client, b, 180, stack.logs)
        assert b.status == "completed", b
        assert (b.request_counts.total, b.request_counts.completed) == (1000, 1000)
        assert b.in_progress_at <= b.completed_at <= b.expires_at
        lines = client.files.content(b.output_file_id).text.splitlines()
        ids = set()
        for line in lines:
            row = json.loads(line)
            completion = ChatCompletion.model_validate(row["response"]["body"])
            assert completion.usage.completion_tokens == 300
            assert completion.usage.prompt_tokens == 230  # 920 characters / 4
            ids.add(row["custom_id"])
        assert ids == {f"req-{i}" for i in range(1000)}
        assert b.id in [x.id for x in itertools.islice(client.batches.list(limit=1), 10)]
    finally:
        client.close()
    assert stack.ledger()["ok"]

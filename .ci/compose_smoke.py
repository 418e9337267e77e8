"""The OpenAI SDK against the compose stack (.ci/compose-test.sh): models, a chat
completion, a streamed one, and a batch that the batch worker runs (its file written by
one web replica, read by the worker: the shared media volume). Usage: BASE_URL KEY"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from openai import OpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
from tests.sdk import batch_until_ended  # noqa: E402 (after the path)


def main(base_url: str, key: str) -> None:
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
    models = [m.id for m in client.models.list()]
    assert "gpt-5.6-sol" in models, models
    c = client.chat.completions.create(
        model="sol", messages=[{"role": "user", "content": "Hi"}], max_completion_tokens=50
    )
    assert c.choices[0].message.content and c.usage.completion_tokens > 0, c
    print(f"  chat completion: {c.id} on {c.service_tier}, {c.usage.completion_tokens} tokens")
    chunks = list(
        client.chat.completions.create(
            model="sol",
            messages=[{"role": "user", "content": "Hi"}],
            max_completion_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens > 0, chunks[-1]
    print(f"  streamed: {len(chunks)} chunks")
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "sol", "messages": [{"role": "user", "content": "Hi"}]},
        }
        for i in range(3)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    f = client.files.create(file=("ci.jsonl", io.BytesIO(data)), purpose="batch")
    b = client.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    b = batch_until_ended(client, b, 120)
    assert b.status == "completed" and b.request_counts.completed == 3, b
    out = client.files.content(b.output_file_id).text.splitlines()
    assert len(out) == 3, out
    print(f"  batch {b.id}: {b.status}, {b.request_counts.completed} requests")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

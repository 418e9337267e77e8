"""OpenAI SDK helpers with no Django in them: used by the SDK tests and by
.ci/compose_smoke.py, which drives the compose stack from outside."""

from __future__ import annotations

import time
from collections.abc import Callable

BATCH_ENDED = ("completed", "failed", "expired", "cancelled")


def batch_until_ended(client, batch, seconds: float, context: Callable[[], str] = str):
    """`batch` (an SDK Batch) retrieved every half second until it has ended; fails the
    test after `seconds`, with `context()` (say, the servers' logs) in the message."""
    deadline = time.monotonic() + seconds
    while batch.status not in BATCH_ENDED:
        assert time.monotonic() < deadline, f"{batch}\n{context()}"
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
    return batch

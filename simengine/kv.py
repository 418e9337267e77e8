"""KV cache and batching: how many streams a replica decodes together.

Pure functions of sizes and parameters (no engine state), used by
:mod:`simengine.perf`:

* :func:`batch_at` - the decode batch of a GPU replica: the streams asked for, capped
  by the tier's batch cap and by what the free KV memory holds;
* :func:`chunk_count` - chunked prefill: the decode steps a prompt rides;
* :func:`interference` - the other streams' prefills sharing the decode steps.
"""

from __future__ import annotations

import math

import numpy as np


def kv_streams(kv_tokens_per_replica: float, streams_per_replica: int, context: float) -> float:
    """Streams the free KV memory holds when each holds ``context`` tokens (and at most
    the streams planned at the planning context); fractional, so the fit is smooth."""
    return min(kv_tokens_per_replica / max(context, 1.0), streams_per_replica)


def batch_at(
    kv_tokens_per_replica: float,
    streams_per_replica: int,
    tier_batch: float,
    batch: float | None,
    context: float,
) -> tuple[float, float]:
    """(decode batch, batch cap) of a GPU replica whose streams hold ``context`` tokens.

    The cap is the tier's batch cap, limited by the KV capacity; ``batch`` None means
    the cap (full load), otherwise it is clamped to [1, cap].
    """
    cap = max(1.0, min(tier_batch, kv_streams(kv_tokens_per_replica, streams_per_replica, context)))
    return (cap if batch is None else max(1.0, min(float(batch), cap))), cap


def chunk_count(tokens, chunk_tokens: float | None):
    """Chunked prefill: a prompt rides this many decode steps (GPUs; wafers stream it:
    ``chunk_tokens`` None). ``tokens``: a number or an array."""
    if chunk_tokens is None:
        return 1 if not isinstance(tokens, np.ndarray) else np.ones_like(tokens)
    if isinstance(tokens, np.ndarray):
        return np.maximum(1.0, np.ceil(tokens / chunk_tokens))
    return max(1, math.ceil(tokens / chunk_tokens))


def interference(batch: float | None, mean_prefill: float, mean_output: float) -> float:
    """Chunked-prefill interference per generated token (GPUs): the other (B - 1)
    streams' prefills share the decode steps, each taking its prefill time once per
    request of ``mean_output`` tokens."""
    if batch is None or mean_output <= 0:
        return 0.0
    return (batch - 1.0) * mean_prefill / mean_output

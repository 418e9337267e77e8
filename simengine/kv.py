"""KV cache and batching: how many streams a replica decodes together.

Pure functions of sizes and parameters (no engine state), used by
:mod:`simengine.perf`:

* :func:`tp_kv_replication` - KV stored more than once over a tensor-parallel group
  (fewer KV heads than GPUs, or a latent cache shared by all heads);
* :func:`default_max_batch_size` - the server's default cap on sequences per step;
* :func:`kv_admission` - when a server admits a request into the batch: while the
  tokens held fit (paged) or only when its whole input + output fits (reserved,
  TensorRT-LLM's default), and :func:`admission_context` - the tokens a stream is
  counted at for that;
* :func:`batch_at` - the decode batch of a GPU replica: the streams asked for, capped
  by the server's batch cap and by what the free KV memory holds, each stream holding
  only the tokens it has so far (paged KV, :data:`KV_PAGE_TOKENS` pages);
* :func:`server_kv_value_bytes` - the cache's bytes per value when a spec does not state its
  dtype: the server's "auto" (16-bit under vLLM and SGLang, the checkpoint's under
  TensorRT-LLM);
* :func:`window_pool` and :func:`capacity_tokens` - how much of the cache a stream of a
  sliding-window model takes up under the server's pool layout (the window layers'
  pool sized like the full layers' under TensorRT-LLM, at 0.8 of it under SGLang);
* :func:`chunk_count` - chunked prefill: the decode steps a prompt rides;
* :func:`prompt_chunk` - the other streams' prompt tokens a decode step carries
  (what they cost it: :func:`simengine.prefill.carried`).
"""

from __future__ import annotations

import math

import numpy as np

from .errors import SimEngineError

# Paged KV (Kwon et al., "Efficient Memory Management for Large Language Model Serving
# with PagedAttention", SOSP 2023; vLLM, TensorRT-LLM and SGLang all page the cache): a
# request holds KV only for the tokens it has so far, in fixed-size pages, so the waste
# is the unfilled part of its last page. vLLM's default block size is 16 tokens.
KV_PAGE_TOKENS = 16
# Production cap on sequences in one scheduler step on a GPU server (a spec's
# ``max_batch_size`` overrides it): vLLM V1's ``max_num_seqs`` default, which depends on
# the GPU's memory (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: 1024 on
# GPUs with >= 70 GiB other than A100, "for GPUs like H100 and MI300x", else 256). The
# TensorRT-LLM defaults are no lower: the LLM API's ``max_batch_size`` is 2048
# (llmapi/llm_args.py) and ``trtllm-bench`` sizes it from the KV cache, up to 4096
# (bench/build/tuning.py, finetune_setting), so on large GPUs what the paged KV cache
# holds is the cap that usually binds. Every GPU profiled here has >= 80 GB.
LARGE_GPU_MEMORY_BYTES = 70 * 2**30
DEFAULT_MAX_BATCH_SIZE_LARGE_GPU = 1024
DEFAULT_MAX_BATCH_SIZE = 256  # GPUs below 70 GiB


# The inference servers a spec can name (``server``; None: not stated, the generic
# defaults above). Each sets the defaults a deployment gets when the spec does not
# state them: the batch cap and the KV admission rule.
SERVERS = ("vllm", "sglang", "tensorrt-llm")
# TensorRT-LLM's LLM API (trtllm-serve, trtllm-bench's PyTorch flow) defaults
# ``max_batch_size`` to 2048 (tensorrt_llm/llmapi/llm_args.py, BaseLlmArgs); per
# attention-DP rank like the others (parallel.attention_dp_batch_cap). Not modelled:
# ``trtllm-bench throughput`` left to its own sizing sets it from the KV cache at input +
# output, up to 4096 (bench/build/tuning.py), which a spec states as max_batch_size
# (looked at in issue 28's twenty-seventh round: two hold-out rows bind on 2048).
SERVER_MAX_BATCH_SIZE = {"tensorrt-llm": 2048}

# KV admission: when a request may join the batch.
# - "paged": while the tokens the streams hold fit the cache; a stream that outgrows it
#   is preempted (vLLM, SGLang; TensorRT-LLM's MAX_UTILIZATION policy, which MLPerf
#   configs set as 'batch_scheduler_policy': 'max_util').
# - "reserved": only when its whole input + output fits next to the other streams'
#   reservations, so no request is ever paused: TensorRT-LLM's GUARANTEED_NO_EVICT, the
#   default of its LLM API (tensorrt_llm/llmapi/llm_args.py, SchedulerConfig
#   ``capacity_scheduler_policy``) and of ``trtllm-bench throughput``
#   (``--scheduler_policy``, default guaranteed_no_evict,
#   tensorrt_llm/bench/benchmark/throughput.py). trtllm-bench's default
#   ``max_batch_size`` is sized the same way, from the KV cache at input + output
#   (bench/build/tuning.py, calc_engine_setting), rounded up, so the reservation binds.
KV_ADMISSIONS = ("paged", "reserved")
SERVER_KV_ADMISSION = {"tensorrt-llm": "reserved"}

# Sliding-window layers' share of the cache (ModelSpec.kv_tokens: a window layer holds
# only its last W tokens). Where that memory goes depends on how the server lays out its
# pools, as a ratio r of the window layers' pool to the full layers' pool, in tokens:
# - vLLM (the default, None): one pool of pages for every layer group, the window groups
#   freeing the pages that fall out of their window (hybrid KV cache manager): a stream
#   takes up only what it holds, ModelSpec.kv_tokens.
# - SGLang: a separate pool for the window layers of ``swa_full_tokens_ratio`` = 0.8 times
#   the full layers' tokens (server_args.py default; hybrid SWA memory), so the memory
#   holds T full-layer tokens per (1 - f + 0.8 f) whole-cache tokens of memory.
# - TensorRT-LLM: r = 1. Its KV cache manager sizes every window's pool as if the layer
#   were full attention (cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:
#   calculateWindowSizeToShare "is not used for BaseKVCacheManager::calculateMaxNumBlocks
#   because we want to first achieve identical performance as assuming all layers as
#   full attention"; BlockManager: "SWA allocates blocks linearly, and we need as many
#   blocks as full attention"), so a window saves reads, not capacity.
SERVER_WINDOW_POOL = {"tensorrt-llm": 1.0, "sglang": 0.8}

# The KV cache's dtype when a spec does not state one (every server's "auto"):
# - vLLM and SGLang store it in the model's data type, 16-bit whatever the weights'
#   quantization (vLLM's CacheConfig.cache_dtype: 'If "auto", will use model data type';
#   SGLang's --kv-cache-dtype: '"auto" will use model data type'): an FP8 or FP4
#   checkpoint still keeps a BF16 cache unless the server is told fp8. (vLLM makes an
#   exception for a few models, DeepSeek-V3.2 among them, whose cache defaults to fp8: a
#   spec for those states kv_dtype.)
# - TensorRT-LLM reads the checkpoint's quantization config (``kv_cache_quant_algo``, FP8
#   in NVIDIA's FP8 and FP4 checkpoints), and an unnamed server is taken the same way:
#   the weights' dtype, never below 8 bits (simengine.model.default_kv_value_bytes).
# A spec that states kv_bytes_per_token states its cache, and is read as before.
SERVER_KV_VALUE_BYTES = {"vllm": 2.0, "sglang": 2.0}


def default_max_batch_size(memory_bytes: float, server: str | None = None) -> int:
    """The production batch cap of a GPU with ``memory_bytes`` of memory under
    ``server`` (None: not stated): TensorRT-LLM's 2048, else vLLM V1's ``max_num_seqs``
    default (1024 from 70 GiB, 256 below)."""
    if server in SERVER_MAX_BATCH_SIZE:
        return SERVER_MAX_BATCH_SIZE[server]
    if memory_bytes >= LARGE_GPU_MEMORY_BYTES:
        return DEFAULT_MAX_BATCH_SIZE_LARGE_GPU
    return DEFAULT_MAX_BATCH_SIZE


def kv_admission(server: str | None, admission: str | None = None) -> str:
    """The KV admission rule (:data:`KV_ADMISSIONS`): ``admission`` if stated, else the
    ``server``'s default (paged unless the server reserves)."""
    if server is not None and server not in SERVERS:
        raise SimEngineError(f"server must be one of {list(SERVERS)}, got {server!r}")
    if admission is None:
        return SERVER_KV_ADMISSION.get(server or "", "paged")
    if admission not in KV_ADMISSIONS:
        raise SimEngineError(
            f"kv_admission must be one of {list(KV_ADMISSIONS)}, got {admission!r}"
        )
    return admission


def server_kv_value_bytes(server: str | None) -> float | None:
    """Bytes per cached K/V value under the ``server``'s "auto" when a spec states
    neither ``kv_dtype`` nor the cache's size (:data:`SERVER_KV_VALUE_BYTES`: 16-bit
    under vLLM and SGLang); None: the checkpoint's, i.e. the weights' dtype never below 8
    bits (:func:`simengine.model.default_kv_value_bytes`)."""
    return SERVER_KV_VALUE_BYTES.get(server) if isinstance(server, str) else None


def window_pool(server: str | None) -> float | None:
    """The ratio of a server's window-layer pool to its full-layer pool, in tokens
    (:data:`SERVER_WINDOW_POOL`); None: one shared pool, out-of-window pages freed."""
    return SERVER_WINDOW_POOL.get(server or "")


def capacity_tokens(model, context: float, pool: float | None = None) -> float:
    """Whole-cache tokens of memory a stream at ``context`` tokens takes up.

    ``pool`` None (:func:`window_pool`): what it holds, ``model.kv_tokens(context)``.
    Otherwise the window layers (a share f of the layers, window W > 0) have a pool of
    ``pool`` times the full layers' tokens, so memory of K whole-cache tokens holds
    K / (1 - f + pool f) tokens in each full layer; a stream needs c of them and
    min(c, W) of the window pool's, so it takes up (1 - f + pool f) max(c, min(c, W) /
    pool). Layers without attention (a 0-token window) hold nothing in any server.
    """
    f = model.window_fraction
    if pool is None or not f or not model.window_tokens:
        return model.kv_tokens(context)
    return (1.0 - f + pool * f) * max(context, min(context, model.window_tokens) / pool)


def admission_context(
    admission: str, input_tokens: float, output_tokens: float, output_cv: float = 0.0
) -> float:
    """The tokens each stream in flight counts for when the server decides whether the
    cache has room for one more.

    Paged: the tokens it holds (:func:`mean_context`). Reserved: its prompt plus its
    whole output, held or not. The streams in flight are a length-biased sample of the
    requests (a slot holds a request for a time proportional to its output), so their
    outputs average E[o^2] / E[o] = m (1 + cv^2): a reservation is twice what a paged
    stream holds of its output, on average (fixed lengths: input + output against
    input + output / 2).
    """
    if admission == "reserved":
        return input_tokens + output_tokens * (1.0 + output_cv * output_cv)
    return mean_context(input_tokens, output_tokens, output_cv)


def tp_kv_replication(kv_shards: int, tensor_parallel: int) -> float:
    """How many times a token's KV is stored over a tensor-parallel group of
    ``tensor_parallel`` GPUs, relative to one copy, when the cache splits ``kv_shards``
    ways (0: not stated, an even split).

    Tensor parallelism splits attention by KV head, and every GPU needs at least one:
    with fewer KV heads than GPUs the heads are replicated (TensorRT-LLM: "each GPU in
    TP group has at least 1 kv head", bench/build/tuning.py; vLLM's
    ``get_num_kv_heads``: max(1, kv_heads // tp)). A latent cache shared by all heads
    (DeepSeek's multi-head latent attention) has one "head": every GPU of the group holds
    the whole cache (the duplication SGLang's DP attention removes, SGLang v0.4 blog,
    2024-12). Each GPU holds ceil(shards / TP) of the ``shards`` parts, so the group
    stores TP x ceil(shards / TP) / shards copies, and each GPU reads its copy every
    step (capacity and KV traffic both scale by this factor).
    """
    if kv_shards <= 0 or tensor_parallel <= 1:
        return 1.0
    return tensor_parallel * math.ceil(kv_shards / tensor_parallel) / kv_shards


def held_tokens(context: float) -> float:
    """KV tokens a stream holds on average when its context is ``context`` tokens:
    the tokens themselves plus, on average, half a page of rounding (paged KV)."""
    return context + KV_PAGE_TOKENS / 2.0


MAX_OUTPUT_CV = 10.0  # a spread beyond this is a typo, not a dataset


def output_cv(value: object) -> float:
    """A validated output-length coefficient of variation (std / mean) in [0, 10]."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= MAX_OUTPUT_CV
    ):
        raise SimEngineError(
            f"output_tokens_cv must be a number in [0, {MAX_OUTPUT_CV:g}] (std / mean), "
            f"got {value!r}"
        )
    return float(value)


def mean_context(input_tokens: float, output_tokens: float, output_cv: float = 0.0) -> float:
    """Mean context of an in-flight stream under continuous batching: the prompt plus,
    for outputs of mean m and coefficient of variation ``output_cv`` (std / mean),
    E[o^2] / (2 E[o]) = m (1 + cv^2) / 2.

    A stream is at a uniform point of its decode, and a slot holds a request for a
    time proportional to its output, so the streams in a batch are a length-biased
    sample of the requests (the inspection paradox; renewal-reward: the time-average
    of a quantity over renewal cycles is E[integral over a cycle] / E[cycle]). Fixed
    lengths (cv 0, what synthetic benchmarks send) give the prompt plus half the output;
    a dataset with a long tail of outputs holds more KV per stream and attends over
    more context per step than its mean output says.
    """
    return input_tokens + output_tokens * (1.0 + output_cv * output_cv) / 2.0


def kv_streams(kv_tokens_per_replica: float, context: float) -> float:
    """Streams the free KV memory holds when each holds ``context`` tokens (paged:
    the tokens held, not a planning window); fractional, so the fit is smooth."""
    return kv_tokens_per_replica / held_tokens(max(context, 1.0))


def batch_at(
    kv_tokens_per_replica: float,
    tier_batch: float,
    batch: float | None,
    context: float,
) -> tuple[float, float]:
    """(decode batch, batch cap) of a GPU replica whose streams hold ``context`` tokens.

    The cap is the server's batch cap (a tier's cap, or a benchmark's concurrency /
    ``max_batch_size``), limited by what the paged KV cache holds; ``batch`` None means
    the cap (full load), otherwise it is clamped to [1, cap].
    """
    cap = max(1.0, min(tier_batch, kv_streams(kv_tokens_per_replica, context)))
    return (cap if batch is None else max(1.0, min(float(batch), cap))), cap


def chunk_count(tokens, chunk_tokens: float | None):
    """Chunked prefill: a prompt rides this many decode steps (GPUs; wafers stream it:
    ``chunk_tokens`` None). ``tokens``: a number or an array."""
    if chunk_tokens is None:
        return 1 if not isinstance(tokens, np.ndarray) else np.ones_like(tokens)
    if isinstance(tokens, np.ndarray):
        return np.maximum(1.0, np.ceil(tokens / chunk_tokens))
    return max(1, math.ceil(tokens / chunk_tokens))


def prompt_piece(prompt_tokens: float, chunk_tokens: float | None) -> float:
    """The most of one prompt a scheduler takes into one step: its chunk budget
    (``chunk_tokens``; None: no chunking) or the whole prompt when that is shorter, at
    least one token. Under attention data parallelism every rank schedules its own
    steps within its own budget, so this is also the most of a prompt one rank works on
    in a step (:func:`simengine.prefill.carried`)."""
    return max(1.0, min(chunk_tokens or prompt_tokens, prompt_tokens))


def prompt_chunk(prompt_per_step, prompt_tokens: float, chunk_tokens: float | None):
    """Chunked prefill's chunk: the prompt tokens a decode step that carries prompts takes
    beside its decode tokens, when ``prompt_per_step`` prompt tokens per step (a number
    or an array) ride the steps on average. A prompt fills the step's chunk budget
    (``chunk_tokens``; None: none) or is taken whole (:func:`prompt_piece`), so
    C = max(P, min(budget, prompt)), and P / C of the steps carry a chunk."""
    floor = prompt_piece(prompt_tokens, chunk_tokens)
    if isinstance(prompt_per_step, np.ndarray):
        return np.maximum(prompt_per_step, floor)
    return max(prompt_per_step, floor)

"""Host work of a GPU decode step: the server's per-request CPU time.

Every decode step of a GPU server also runs on its host CPU: the scheduler walks the
requests in flight, prepares the step's inputs, and after the step checks each
request's stop criteria, updates its state and hands its token to the response path
(TensorRT-LLM's PyTorch executor: ``_schedule``, ``_prepare_inputs``,
``_update_requests``, ``_handle_responses``; vLLM V1's scheduler and output processor;
SGLang's scheduler). Most of it is a loop over the requests, so it grows with the
batch, and it runs on one CPU thread per scheduler: one per replica, or one per
attention rank under attention data parallelism (TensorRT-LLM's ADP and SGLang's DP
attention run a scheduler per rank over that rank's requests).

The servers overlap it with the GPU (TensorRT-LLM's overlap scheduler, on by default
since May 2025, NVIDIA/TensorRT-LLM PR #4174; SGLang's overlap scheduler, on by default
since November 2024, sgl-project/sglang PR #2067; vLLM's async scheduling, on by
default from 0.14.0, January 2026, vllm-project/vllm PR #27614): the host prepares
step n + 1 while the GPU runs step n. So a step takes the longer of the two,
max(GPU step, host work) (``simengine.perf``'s step line, ``simengine.offline``'s
finite run), and the prefills riding in a host-bound step cost nothing more; the part
of the host work that stays exposed at any batch (kernel launches, the
launch-to-finish sync) is in the GPU step's fixed overhead (params
``gpu:kernel_overhead`` per kernel the step launches, ``simengine.step.decode_kernels``).
The host binds when the GPU step is short against the batch: a small-active model (a
few billion active parameters) at hundreds to thousands of streams, above all on a
slower host CPU.

Sizes (params ``host:<host>:per_request``, fixed, not fitted: no calibration point
separates them from the GPU step):

* Grace (GB200 NVL72, Arm Neoverse V2): TensorRT-LLM measured an average host step of
  45.11 ms per iteration serving gpt-oss-120b at maximum throughput on GB200 with two
  attention-DP ranks of ``max_batch_size`` 1,536 and 3,072 clients (NVIDIA/TensorRT-LLM
  PR #10273, 2025-12-24), i.e. 45.11 ms / 1,536 = 29.4 us per request per step (an
  upper bound: the iteration's fixed host work is in it).
* x86 (DGX/HGX H100, H200, B200: Intel Xeon): the same work at the ratio of the two
  hosts' CPU time for the same PyTorch module call, 37.08 us on GB200 against 13.48 us
  on a DGX H100's Xeon Platinum 8480C (NVIDIA/TransformerEngine issue #2053,
  2025-08-11): 29.4 / 2.75 = 10.7 us. (A third-party profile of vLLM's scheduler alone
  found 12.7 us per request at its cap, the same order.)

The same order elsewhere (not used for the values): TensorRT-LLM's sampler tail alone,
~8.8 ms per iteration over 256 requests on GB200 (PR #16564, 2026-07: ~34 us per
request), and ~580 us per iteration of host time left exposed at 64 requests of
Llama-3.1-8B on B200 (issue #13957, 2026-05: ~9 us per request).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from .eras import era_key
from .errors import SimEngineError

# --------------------------------------------------------------- servers' defaults by date
#
# Two things a server may run a decode step with (``cuda_graphs``, ``overlap_scheduler``;
# a spec states either, else :func:`server_default` gives the server's default at the
# figure's software date):
#
# * CUDA graphs. With them a decode step's kernels are replayed from one captured graph
#   and each costs only its launch-to-finish latency (``gpu:kernel_overhead``). Without
#   them ("eager" PyTorch) the host launches every kernel from Python, one after another,
#   and the step also waits for that: :func:`eager_launch_param`. vLLM captured graphs by
#   default from its first CUDA-graph release (vllm-project/vllm PR #1926, December 2023:
#   ``enforce_eager`` False); SGLang from sgl-project/sglang PR #612 ("Enable cuda graph
#   by default", 2024; no dated figure here predates it, so its month is taken as July).
# * The overlapped host loop (the module docstring): SGLang's overlap schedule (PR #2067,
#   November 2024), vLLM's async scheduling (PR #27614, 0.14.0, January 2026). Without it
#   the host's work for a step runs between GPU steps: the step takes both, not the
#   longer.
#
# TensorRT-LLM has no one date: before 1.0 its default flow built TensorRT engines run by
# a C++ executor (no Python between kernels; the PyTorch flow was the "experimental"
# ``tensorrt_llm._torch`` of the 0.17-0.19 docs, and ``tensorrt_llm.LLM`` became it in
# 1.0), while that PyTorch flow, the one DeepSeek-R1 needed, ran eager and without the
# overlap scheduler unless told (0.18.2's example: ``--enable_overlap_scheduler``
# default False); NVIDIA's DeepSeek-R1 guide of the time: "there
# are some features that need to be enabled through a user-defined file
# extra-llm-api-config.yml, such as CUDA graph, overlap scheduler and attention dp"
# (TensorRT-LLM docs, Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md), until PR
# #4174 (overlap scheduler on by default, May 2025) and PR #5480 ("Breaking change: ...
# Enable cuda graph by default", PyTorchConfig ``use_cuda_graph`` False -> True,
# approved 2025-07-14). So ``tensorrt-llm`` runs both by default at every date, and a
# spec for an early PyTorch-flow run with the defaults of its day states them false.
#
# Both as measured: TensorRT-LLM tech blog 3 ("Optimizing DeepSeek R1 Throughput on
# NVIDIA Blackwell GPUs", 8x B200, attention DP, 1K/2K at maximum throughput) gives the
# ablations: "CUDA Graph ... a significant 22% E2E performance impact ... particularly
# on the PyTorch flow, because the python host code normally executes slower than C++";
# "Overlap Scheduler: Showed a 4% E2E performance impact". ``calibrate`` prints the
# engine's two ratios for that run beside them (simengine.calibration.ablation_checks);
# since issue 28's twenty-seventh round the first is a calibration target fitting the
# PyTorch calls an eager step makes per counted kernel (params gpu:eager_ops_per_kernel),
# the second stays a check.
SERVER_DEFAULT_FROM: dict[tuple[str, str], tuple[int, int]] = {
    ("vllm", "cuda_graphs"): (2023, 12),
    ("sglang", "cuda_graphs"): (2024, 7),
    ("vllm", "overlap_scheduler"): (2026, 1),
    ("sglang", "overlap_scheduler"): (2024, 11),
}
SERVER_FEATURES = ("cuda_graphs", "overlap_scheduler")


def server_default(feature: str, server: str | None, software: str | None) -> bool:
    """Whether ``server`` ran ``feature`` (:data:`SERVER_FEATURES`) by default at the
    ``software`` date ("YYYY-MM[-DD]" or a version "YYYY.MM"): True from the date in
    :data:`SERVER_DEFAULT_FROM` on, and whenever the server or the date is not stated
    (today's servers all run both)."""
    if feature not in SERVER_FEATURES:
        raise SimEngineError(f"unknown server feature {feature!r}; known: {SERVER_FEATURES}")
    since = SERVER_DEFAULT_FROM.get((server or "", feature))
    when = era_key(software or "")
    return since is None or when is None or when >= since


def host_param(host: str) -> str:
    """The parameter naming a host CPU family's seconds per request per decode step."""
    return f"host:{host}:per_request"


def eager_launch_param(host: str) -> str:
    """The parameter naming a host CPU family's seconds per kernel launched eagerly.

    Without CUDA graphs a decode step's kernels are launched one by one from the
    server's Python code, each a PyTorch module call on the host CPU before the GPU can
    run it. Sizes (params ``host:<host>:eager_launch``, fixed, not fitted; times
    ``gpu:eager_ops_per_kernel`` calls a counted kernel, fitted): the CPU time
    of one ``torch.nn.Linear`` forward, the same measurement the per-request figures
    above take their ratio from (NVIDIA/TransformerEngine issue #2053: 13.48 us on a DGX
    H100's Xeon Platinum 8480C, 37.08 us on GB200's Grace). TensorRT-LLM's own PyTorch
    flow shows the same order: a "CPU dispatch interval (~35us)" per kernel on 8 GPUs
    (NVIDIA/TensorRT-LLM PR #12653, 2026-04). The engine adds the launches to the GPU
    step (the host issuing a kernel, then the GPU running it): at tech blog 3's maximum
    throughput the longer of the two would leave CUDA graphs no gain at all, where the
    blog measured 22 %.
    """
    return f"host:{host}:eager_launch"


def eager_launch_seconds(per_kernel: float, kernels: int, cuda_graphs: bool) -> float:
    """The host's launch time a decode step waits for: ``kernels`` launched eagerly at
    ``per_kernel`` seconds each, or nothing when CUDA graphs replay them."""
    return 0.0 if cuda_graphs else per_kernel * kernels


def host_step_seconds(per_request: float, batch: float, schedulers: int = 1) -> float:
    """Host time of one decode step: ``batch`` requests in flight over ``schedulers``
    scheduler threads running side by side (attention-DP ranks; 1 otherwise), each
    ``per_request`` seconds per request."""
    return per_request * batch / max(1, schedulers)


# ------------------------------------------------------------ CUDA graphs' batch sizes
#
# A server captures its decode CUDA graphs at a list of batch sizes, not at every batch
# (``cuda_graph_batch_sizes``; a spec states the list, or its largest size with
# ``cuda_graph_max_batch`` and the server's rule fills in the rest). A decode step runs
# the smallest captured graph that holds its batch: the batch is padded with dummy rows
# up to that size, and the step's weight GEMMs and collectives compute the padded rows
# (the dummies' attention reads no cache, so it is not counted). A batch above the
# largest size has no graph and runs eager: the host launches every kernel
# (:func:`eager_launch_param`), as with ``cuda_graphs`` false. Under attention data
# parallelism each rank captures and pads its own batch. Sources:
#
# * SGLang: captures [1, 2, 4, 8, 12], every 8 to 256, every 16 to 512, every 32 beyond,
#   up to ``--cuda-graph-max-bs`` (python/sglang/srt/server_args.py,
#   ``_generate_cuda_graph_batch_sizes``; padding on unless
#   ``--disable-cuda-graph-padding``). Its default largest size was 160 on GPUs above
#   25 GB ("the default value 160", sgl-project/sglang PR #2360, December 2024) until PR
#   #10372 (September 2025: "relax max_cuda_graph_bs") set it by the GPU's memory: 256
#   below 160 GiB with TP < 4 (H100, H200), 512 with TP >= 4 and at 160 GiB and above
#   (B200, GB200). Above it SGLang decodes eager: PR #37898 (2026-09) on a 32 GB GPU, "the
#   previous decode cuda-graph cap of max_bs=24 forced eager decode at bs>=32, collapsing
#   high-concurrency throughput" (-71 % against vLLM at 32 streams).
# * vLLM (V1): captures [1, 2, 4], every 8 below 256, every 16 from 256, up to
#   ``max_cudagraph_capture_size``, min(2 x max_num_seqs, 512) by default
#   (vllm-project/vllm PR #20628, July 2025; 512 since V1's first release), padding a
#   batch to the next size; larger batches run without the full graph. No dated vLLM
#   figure here predates V1, so V0's sizes are not distinguished.
# * TensorRT-LLM: ``cuda_graph_config`` with ``enable_padding: true`` captures [1, 2, 4],
#   every 8 to 128, then powers of two below ``max_batch_size`` and that size itself
#   (tensorrt_llm/llmapi/llm_args.py, ``CudaGraphConfig._generate_cuda_graph_batch_sizes``,
#   the 1.x form with ``math.ceil``; later releases add every 64 above 128);
#   its performance overview states its own list ([1, 2, 4, ..., 512, 1024, 2048, 4096,
#   8192] with padding). The bare LLM API's default (``max_batch_size`` 128, padding off:
#   a batch missing from the list runs eager) is not what its published deployments run
#   (every configuration in its deployment guides and performance pages sets padding and
#   a size covering the server's batch), so a TensorRT-LLM spec that states no list gets
#   the padded rule up to the server's batch cap; a bare server is stated with the list.
# * No server stated (the catalog's pools): every batch has its own graph (no padding,
#   never eager), the engine's behaviour before the sizes were modelled.
SGLANG_GRAPH_MAX_BS_LEGACY = 160
SGLANG_GRAPH_BY_MEMORY_FROM = (2025, 9)  # sgl-project/sglang PR #10372
SGLANG_LARGE_GPU_BYTES = 160 * 2**30
VLLM_GRAPH_MAX_BS = 512


def graph_sizes_up_to(server: str | None, largest: int) -> tuple[int, ...]:
    """The batch sizes ``server`` captures up to ``largest`` (its own rule; see above)."""
    if largest < 1:
        raise SimEngineError(f"cuda_graph_max_batch must be >= 1, got {largest}")
    if server == "sglang":
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
                 *range(512, largest + 1, 32)]  # fmt: skip
    elif server == "vllm":
        sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    else:  # tensorrt-llm's padded rule (and a spec naming no server)
        sizes = [1, 2, 4, *range(8, 129, 8)]
        sizes += [2**i for i in range(8, max(8, math.ceil(math.log2(largest))))]
    kept = sorted({n for n in sizes if n <= largest} | {largest})
    return tuple(kept)


def server_graph_sizes(
    server: str | None,
    software: str | None,
    memory_bytes: float,
    tensor_parallel: int,
    max_batch: int,
) -> tuple[int, ...] | None:
    """The decode graph sizes ``server`` captures by default at the ``software`` date on
    a GPU of ``memory_bytes`` in a TP group of ``tensor_parallel``, whose scheduler takes
    at most ``max_batch`` sequences; None: every batch its own graph (no server
    stated)."""
    if server == "sglang":
        when = era_key(software or "")
        if when is not None and when < SGLANG_GRAPH_BY_MEMORY_FROM:
            largest = SGLANG_GRAPH_MAX_BS_LEGACY
        elif memory_bytes < SGLANG_LARGE_GPU_BYTES and tensor_parallel < 4:
            largest = 256
        else:
            largest = 512
        return graph_sizes_up_to(server, largest)
    if server == "vllm":
        return graph_sizes_up_to(server, VLLM_GRAPH_MAX_BS)
    if server == "tensorrt-llm":
        return graph_sizes_up_to(server, max(1, int(max_batch)))
    return None


def graph_batch(sizes: tuple[int, ...] | None, batch):
    """(the batch a decode step computes, whether it runs eager) for a scheduler's
    ``batch`` (a number or an array) under the captured ``sizes``: the smallest size
    holding it, or the batch itself above the largest (eager). ``sizes`` None: the batch
    itself, never eager."""
    if sizes is None:
        return batch, False
    table = np.asarray(sizes, dtype=np.float64)
    if isinstance(batch, np.ndarray):
        i = np.searchsorted(table, batch - 1e-9)
        eager = i >= len(table)
        return np.where(eager, batch, table[np.minimum(i, len(table) - 1)]), eager
    i = bisect.bisect_left(sizes, batch - 1e-9)
    if i >= len(sizes):
        return batch, True
    return float(sizes[i]), False


# ---------------------------------------------------------- the prompt tokens of a step
#
# A server schedules at most a budget of tokens in one step; a prompt longer than the
# budget is prefilled in budget-sized pieces over several steps (chunked prefill), and
# a step's riding prompts fill at most one budget on each scheduler
# (:func:`simengine.kv.prompt_piece`, :func:`simengine.prefill.prefill_parts`). A spec
# states it (``prefill_chunk_tokens``: vLLM's ``--max-num-batched-tokens``, SGLang's
# ``--chunked-prefill-size``, TensorRT-LLM's ``max_num_tokens``), else
# :func:`server_prefill_budget` gives the server's default at the software date on the
# GPU; a spec naming no server (and the catalog's pools) keeps the engine's generic
# budget, param ``gpu:prefill_chunk_tokens`` (2,048). Sources:
#
# * vLLM (``max_num_batched_tokens``, the API server's default): 2,048 from PR #10544
#   (2024-11-21, "Update default max_num_batch_tokens for chunked prefill to 2048");
#   8,192 on H100 and H200 from PR #12369 (2025-01-23, "[V1] Increase default batch size
#   for H100/H200": "the 2K token budget for API server is too small for H100 and
#   H200"), and on every GPU of 70 GiB or more from PR #17073 (2025-04-23, "Use larger
#   batch sizes for A100/B100/B200/MI300x", by memory; A100 excluded again by PR #17885);
#   16,384 on those GPUs from PR #51726 (2026-08-10, "Update default
#   `_max_num_batched_tokens` from 8192 to 16384" when the GPU's memory allows; ROCm/MAD
#   PR #235, 2026-08-26: "VLLM now defaults to 16384"). Earlier dates: not modelled (V0
#   chunked only long prompts), the generic budget.
# * SGLang (``chunked_prefill_size``): 8,192 from PR #1022 (2024-08); by the GPU's memory
#   from PR #2044 (2024-11): 8,192 on H100 and H200, and 16,384 at 160 GiB and above
#   (B200, GB200) from PR #6718 (2025-05-28, "Tune memory arguments on B200":
#   "chunked_prefill_size: set to 16384"). With DP attention each rank schedules
#   ``chunked_prefill_size // dp_size`` (sgl-project/sglang PR #35414, 2026-08, which
#   documents it; the division is taken at every date). Earlier dates: the generic
#   budget.
# * TensorRT-LLM: ``max_num_tokens`` 8,192 (the LLM API's and trtllm-serve's default),
#   per attention-DP rank (each rank runs its own executor). Chunked prefill is off by
#   default (``enable_chunked_prefill`` False), so a prompt within the budget is
#   prefilled whole, which a budget of 8,192 gives; a longer prompt needs chunking on
#   (the engine then splits it at the budget).
VLLM_BUDGET_FROM = (2024, 11)  # PR #10544
VLLM_LARGE_BUDGET_FROM = {"h100": (2025, 1), "h200": (2025, 1)}  # PR #12369
VLLM_LARGE_BUDGET_BY_MEMORY_FROM = (2025, 4)  # PR #17073
VLLM_LARGER_BUDGET_FROM = (2026, 8)  # PR #51726
VLLM_LARGE_GPU_BYTES = 70 * 2**30
SGLANG_BUDGET_FROM = (2024, 8)  # PR #1022
SGLANG_LARGE_BUDGET_FROM = (2025, 5)  # PR #6718
TENSORRT_LLM_MAX_NUM_TOKENS = 8192


def server_prefill_budget(
    server: str | None,
    software: str | None,
    device: str,
    memory_bytes: float,
    dp_ranks: int = 1,
) -> int | None:
    """The prompt tokens ``server`` schedules in one step on one scheduler by default at
    the ``software`` date on ``device`` (a GPU of ``memory_bytes``), its replica's
    attention split over ``dp_ranks`` data-parallel ranks (1: none). None: not known
    (no server stated, or a date before the rules above), the engine's generic budget."""
    when = era_key(software or "")
    if server == "vllm":
        if when is not None and when < VLLM_BUDGET_FROM:
            return None
        if memory_bytes < VLLM_LARGE_GPU_BYTES:
            return 2048
        if when is None or when >= VLLM_LARGER_BUDGET_FROM:
            return 16384
        since = VLLM_LARGE_BUDGET_FROM.get(device, VLLM_LARGE_BUDGET_BY_MEMORY_FROM)
        return 8192 if when >= since else 2048
    if server == "sglang":
        if when is not None and when < SGLANG_BUDGET_FROM:
            return None
        large = memory_bytes >= SGLANG_LARGE_GPU_BYTES and (
            when is None or when >= SGLANG_LARGE_BUDGET_FROM
        )
        return max(1, (16384 if large else 8192) // max(1, dp_ranks))
    if server == "tensorrt-llm":
        return TENSORRT_LLM_MAX_NUM_TOKENS
    return None

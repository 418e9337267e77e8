"""Parallelism: tensor-parallel all-reduces, pipeline hops between stages, wafer hops.

Pure functions of the hardware and sizes (no engine state), used by the per-token and
prefill formulas in :mod:`simengine.perf`.

* Tensor parallel (GPUs): every layer does two all-reduces of the batch's activations
  over the TP group (Megatron-LM's column/row split: one after attention, one after
  the MLP). Each is the ring cost of GenZ (Bambhaniya et al., 2024):
  ``base + 2 (N - 1) t_link + 2 (N - 1) (D / N) / BW_link``.
* Pipeline stages: a token's activations cross ``stages - 1`` stage boundaries over the
  scale-out fabric (latency + activations / bandwidth) on GPUs, and ``stages - 1``
  wafer-to-wafer links on wafers (link latency + one token's activations over the I/O).
* Pipeline micro-batches and the bubble (:func:`pipeline_microbatch`): GPU stages over
  layers decode up to ``stages`` micro-batches at once.
* Attention data parallelism (GPUs, MoE): the group's GPUs each run attention for their
  own streams instead of splitting every head over the group
  (:func:`attention_dp_weight_bytes`, :func:`attention_dp_batch_cap`); the ranks meet
  at every all-to-all, so a step waits for the rank prefilling a prompt
  (:func:`attention_dp_idle`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .errors import SimEngineError
from .hardware import HardwareProfile
from .kv import tp_kv_replication


def allreduce_seconds(hw: HardwareProfile, size_bytes: float, group: int, base: float) -> float:
    """One ring all-reduce of ``size_bytes`` over ``group`` GPUs (GenZ: 5 us +
    2(N-1) t_link + 2(N-1)(D/N)/BW_link); 0 for a group of one."""
    if group <= 1:
        return 0.0
    return (
        base
        + 2 * (group - 1) * hw.link_latency
        + 2 * (group - 1) * (size_bytes / group) / hw.link_bandwidth
    )


def pipeline_hops_seconds(hw: HardwareProfile, activation_bytes: float, stages: int) -> float:
    """GPU pipeline: ``stages - 1`` scale-out hops of ``activation_bytes`` each."""
    return (stages - 1) * (hw.scaleout_latency + activation_bytes / hw.scaleout_bandwidth)


def wafer_hop_seconds(
    t_link: float, hidden_size: int, activation_bytes: float, link_bandwidth: float
) -> float:
    """Physical wafer-to-wafer hop: link latency + one token's activations over the I/O."""
    return t_link + hidden_size * activation_bytes / link_bandwidth


def pipeline_microbatch(batch, stages: int):
    """Streams per micro-batch of a GPU pipeline decoding ``batch`` streams (a number or
    an array).

    Pipeline-parallel serving (vLLM's pipeline_parallel_size: one virtual engine per
    stage; TensorRT-LLM's pp_size) keeps up to ``stages`` micro-batches in flight, so
    the batch splits into m = min(batch, stages) micro-batches. A stream's token still
    crosses every stage in turn: per token, each stage reads its weights and the KV of
    one micro-batch, i.e. (weights + KV(batch / m)) / (TP x bandwidth) summed over the
    stages, plus the hops. With fewer streams than stages (m = batch < stages) the other
    stages idle: the pipeline bubble, 1 - m / stages of the GPUs' time.
    """
    if stages <= 1:
        return batch
    if isinstance(batch, np.ndarray):
        return batch / np.minimum(batch, float(stages))
    return batch / min(batch, float(stages))


def pipeline_bubble(batch: float, stages: int) -> float:
    """Share of a pipeline's GPU time idle at ``batch`` streams (0 when
    ``batch >= stages``): the bubble of :func:`pipeline_microbatch`."""
    return max(0.0, 1.0 - min(batch, float(stages)) / stages)


def split_pipeline(
    nodes_per_replica: int, pipeline_parallel: int, max_tensor_parallel: int
) -> tuple[int, int]:
    """(tensor_parallel, pipeline stages) of ``nodes_per_replica`` GPUs split into
    ``pipeline_parallel`` stages (devices = TP x PP); SimEngineError when it does not
    divide or the TP group exceeds the NVLink domain."""
    if pipeline_parallel < 1 or nodes_per_replica % pipeline_parallel:
        raise SimEngineError(
            f"devices ({nodes_per_replica}) must be a multiple of pipeline_parallel "
            f"({pipeline_parallel})"
        )
    tp = nodes_per_replica // pipeline_parallel
    if tp > max_tensor_parallel:
        raise SimEngineError(
            f"tensor_parallel {tp} (= devices / pipeline_parallel) exceeds the NVLink domain "
            f"({max_tensor_parallel})"
        )
    return tp, pipeline_parallel


def attention_dp_weight_bytes(model, group: int) -> float:
    """Extra weight bytes a decode step reads under attention data parallelism, over
    what tensor parallelism reads, at the group's rate.

    With attention DP + expert parallelism ("DEP" in TensorRT-LLM's performance
    tables, ``enable_attention_dp``; SGLang ``--enable-dp-attention``, SGLang v0.4 blog,
    2024-12; DeepSeek-V3 report, 2024-12, section 3.4) each of the ``group`` GPUs holds
    the whole attention (and the dense and shared-expert layers) and runs it for its own
    streams, while the routed experts are split over the group and reached by the
    all-to-all. Every GPU therefore stores and streams those always-read weights once
    per step: ``group - 1`` more copies than a tensor-parallel split. In exchange a
    stream's KV lives on one GPU only (no copies, :func:`simengine.kv.tp_kv_replication`
    does not apply) and attention needs no all-reduce.
    """
    return (group - 1) * model.always_read_bytes if group > 1 else 0.0


class AttentionSplit(NamedTuple):
    """How a replica's attention sits on its tensor-parallel group of GPUs."""

    extra_weight_bytes: float  # weight bytes read per step beyond the TP split's
    kv_copies: float  # times a token's KV is stored and read (simengine.kv)
    allreduce_group: int  # GPUs attention all-reduces over (1: none)


def attention_split(model, tensor_parallel: int, data_parallel: bool) -> AttentionSplit:
    """Attention split by head over the group (tensor parallel: KV copied when heads run
    short, an all-reduce per layer), or data parallel (:func:`attention_dp_weight_bytes`:
    every GPU reads the always-read weights, one KV copy, no all-reduce)."""
    if data_parallel:
        return AttentionSplit(attention_dp_weight_bytes(model, tensor_parallel), 1.0, 1)
    return AttentionSplit(0.0, tp_kv_replication(model.kv_shards, tensor_parallel), tensor_parallel)


def latent_decode_padding(model, hw, split: AttentionSplit, query_tokens: int = 1) -> float:
    """Factor on a latent-attention (MLA) decode step's attention FLOPs for the query
    rows its kernel computes and throws away: 1 when the rows fill whole tiles.

    Decoded with the up-projections absorbed, every query head of a stream attends over
    the same latent, so the decode kernels stack the stream's query heads (times its
    query tokens in a speculative verify step) into the M dimension of one tensor-core
    tile and stream the latent once through it: ``hw.latent_decode_rows`` rows, 64 on
    Hopper (FlashMLA: ``Flash_fwd_kernel_traits_mla<576, 64, ...>``, kBlockM 64, one
    warpgroup's wgmma), 128 on Blackwell (the CUTLASS and TensorRT-LLM MLA decode
    kernels, one SM's 128-row tcgen05 MMA). A tensor-parallel head split leaves each GPU
    heads / TP of them, 16 of DeepSeek's 128 at TP8, and the kernels pad the tile to its
    supported height and slice the output back (SGLang PR #22372, 2026-04: "FlashMLA
    requires q heads to be 64 or 128 ... DeepSeek V3.2's 128 heads / TP8 = 16 heads ...
    When using TP+DP attention ... no padding is needed. We pad to the next supported
    variant (64/128) for pure-TP cases"; the same for CUTLASS MLA on Blackwell,
    sgl-project/sglang PR #6929 and vllm-project/vllm PR #20769, "unrestricted num_heads
    (< 128) for DeepSeek TP"). A padded row costs the FLOPs of a real one, so the kernel
    does ceil(rows / tile) tiles of work: at TP8, 8x the FLOPs on Blackwell and 4x on
    Hopper; the KV it reads does not change. Whether that binds is the step's roofline
    (ModelSpec.decode_attention_flops): a full tile's FLOPs per byte of latent make MLA
    decode compute-bound on Blackwell, while on Hopper at TP8 the padded 64-row tile
    stays under the memory roof at the fitted efficiencies. Attention data parallelism
    keeps all the heads on every GPU (128 rows: whole tiles), which is one reason
    TensorRT-LLM's throughput recipe for DeepSeek-R1 attends data-parallel (tech blog
    3). Only a latent cache: a grouped-query kernel stacks one KV head's few query heads
    the same way, but reads a KV head per few rows and stays bound by memory.
    """
    tile = hw.latent_decode_rows
    if not (tile and model.latent_cache and model.heads):
        return 1.0
    # The heads one GPU attends for: all of them under data parallelism (no all-reduce
    # group), heads / TP under the head split.
    heads_per_rank = max(model.heads / split.allreduce_group, 1.0)
    rows = heads_per_rank * max(query_tokens, 1)
    return math.ceil(rows / tile - 1e-9) * tile / rows


def attention_dp_batch_cap(max_batch_size: float, group: int) -> float:
    """The sequences one replica decodes at once under attention data parallelism: the
    server's ``max_batch_size`` holds per attention rank (TensorRT-LLM's scheduler runs
    one batch per DP rank; SGLang's DP attention runs one scheduler per rank), so the
    replica's cap is ``group`` times it."""
    return max_batch_size * max(1, group)


def attention_dp_idle(units, ranks: int, balanced: bool = False):
    """Prompts' worth of rank-local work a step waits for beyond an even share, under
    attention data parallelism (``units``: prompts per step over the replica, or their
    pieces where chunking splits a prompt; a number or an array; ``ranks``: the
    attention-DP ranks).

    The ranks meet at every MoE layer's all-to-all, so a step lasts as long as its
    busiest rank (TensorRT-LLM, "ADP Balance Strategy", tech blog 10, 2025: iteration
    time = max over ranks; with round-robin placement, ranks prefilling while others
    decode held DeepSeek-V3 on 8 GB200 to a 54 % balance ratio, 65 % of the blog's own
    perfect-balance estimate and 75 % of its balanced run). A prompt's attention and
    non-expert GEMMs run on the one rank that holds it (its routed experts still spread
    over the group). With ``n`` units per step placed as they come, the busiest rank
    carries max(min(n, 1), n / ranks) of them: one in a fraction n of the steps while
    they are rarer than steps, then one per step, then an even share once every rank
    has one. ``balanced`` (TensorRT-LLM's ``attention_dp_config.enable_balance``: ranks
    wait to prefill together) leaves the even share n / ranks. Returned: ranks x the
    busiest rank's units - n, the units of work (at the group's rate) the step adds to
    an even spread; 0 for one rank or a balanced server.
    """
    if ranks <= 1 or balanced:
        return 0.0 * units
    if isinstance(units, float | int):
        busiest = max(min(units, 1.0), units / ranks)
    else:
        busiest = np.maximum(np.minimum(units, 1.0), units / ranks)
    return ranks * busiest - units


def attention_dp_in_phase(offline_requests: int | None, output_tokens_cv: float) -> bool:
    """Whether a run keeps its attention-DP ranks in phase without the server's help: a
    finite run of identical requests all queued at once (trtllm-bench's synthetic
    datasets, stdev 0). The server deals them out evenly, every rank starts its share
    together and, the lengths being equal, finishes it together, so the ranks prefill
    their next prompts in the same steps (the imbalance the ADP balance blog measures
    comes from ranks prefilling while others decode, which spread lengths or arrivals
    bring about). A steady-state closed loop or open loop staggers its requests over
    the steps (the engine's chunked-prefill rule, simengine.prefill.carried), and so do
    spread lengths: out of phase."""
    return offline_requests is not None and not output_tokens_cv

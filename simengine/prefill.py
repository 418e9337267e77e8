"""Prefill on a served deployment, and chunked prefill riding the decode steps.

A prompt's prefill is compute-bound: its weight GEMMs at the weights' tensor-core rate
and its causal attention at the 16-bit rate, over the tensor-parallel group, plus its
collectives (:func:`prefill_parts`). On GPUs the other streams' prompts ride the decode
steps in chunks (Sarathi-Serve's decode-maximal batching, as vLLM, TensorRT-LLM and
SGLang schedule them): a chunk's GEMMs share the step's weight read, so a memory-bound
step hides them and only the rest lengthens it (:func:`carried`, :func:`interference`);
under attention data parallelism a prompt's rank-local work can hold the other ranks
(:func:`rank_local_seconds`, :func:`simengine.parallel.attention_dp_idle`). On wafers
chunks stream through the pipeline.

``s``: a served deployment (:mod:`simengine.perf`, ``_serve``).
"""

from __future__ import annotations

import numpy as np

from . import kv
from .moe import (
    attention_peak,
    compute_peak,
    expert_peak,
    imbalance_flops,
    moe_collectives_seconds,
    step_weight_bytes,
)
from .parallel import attention_dp_idle, pipeline_hops_seconds, pipeline_microbatch
from .served import Served
from .step import ATTENTION_MATH_BYTES, StepLine


def prefill_seconds(s: Served, new, cached):
    """Compute-bound prefill of ``new`` tokens after ``cached`` cached ones (numbers, or
    arrays of them: one prefill per element)."""
    return prefill_parts(s, new, cached)[0]


def _attention_at_peak(s: Served, new, cached):
    # A causal prefill's attention of ``new`` tokens after ``cached``, as seconds at the
    # 16-bit peak (ATTENTION_MATH_BYTES): 4 L w FLOPs per attended (query, key) pair over
    # the attention width w, 2 L w (n^2 + 2 n c) without sliding windows
    # (ModelSpec.attended_pairs). Numbers or arrays.
    m = s.model
    flops = 4 * m.layers * m.attention_width * m.attended_pairs(new, cached)
    return flops / s.hw.peak_flops(ATTENTION_MATH_BYTES)


def prefill_parts(s: Served, new, cached):
    """(the prefill of ``new`` tokens after ``cached`` on its own, the part of it a decode
    step cannot absorb when the prompt rides one: its attention and collectives; GPUs)
    - numbers, or arrays of them. The rest of a prompt's time is its weight GEMMs, which
    chunked prefill runs inside the decode steps' (:func:`carried`)."""
    m, k = s.model, s.knobs
    # Causal attention over the cached prefix and the new tokens themselves.
    # The weight GEMMs at the weights' tensor-core rate, attention at the 16-bit rate
    # (_attention_at_peak); as time.
    peak = compute_peak(m, s.hw, k.expert_efficiency, k.widened_efficiency)
    gemm = 2 * m.active_params_prefill * new / peak
    attention = _attention_at_peak(s, new, cached)
    if s.hw.kind == "wafer":
        # Chunks stream through the pipeline: the busiest wafer sets the pace, then
        # the last chunk crosses the pipeline once.
        share = max(s.place.layers_per_stage) / m.layers
        alone = (gemm + attention) * share / k.eta_flop + k.wafer_pass
        return alone, alone
    tp, ep = s.place.tensor_parallel or 1, s.deployment.expert_parallel
    # Expert parallelism: the busiest rank's excess routed tokens (simengine.moe).
    balanced = False
    if ep > 1:
        balanced = s.deployment.experts_balanced
        gemm = gemm + (imbalance_flops(m, new, tp, ep, balanced)
                       / expert_peak(m, s.hw, k.expert_efficiency, k.widened_efficiency))  # fmt: skip
    t_flop = (gemm + attention) / (tp * k.eta_flop)
    if s.deployment.attention_data_parallel and tp > 1:
        # Under attention data parallelism the prompt's attention and non-expert GEMMs
        # run on the one GPU that holds it (its routed experts still spread over the
        # group): the prompt itself waits for them at one GPU's rate, where the line
        # above spreads them over the group (rank_local_seconds is that work at the
        # group's rate). What a decode step cannot absorb of it (``side``) stays at the
        # group's rate: the other ranks' wait is carried's (parallel.attention_dp_idle).
        t_flop = t_flop + (tp - 1) * rank_local_seconds(s, new, cached)
    # A chunked-prefill server runs even a lone prompt in budget-sized pieces, one a
    # step (kv.chunk_count): each piece pads its own experts' tiles and reads the
    # weights it touches. (A prompt within one budget, most of them, is one piece.)
    split = s.attention
    longest = new.max() if isinstance(new, np.ndarray) else new
    chunked = k.chunk_tokens is not None and longest > k.chunk_tokens
    pieces, piece = 1, new
    if chunked:
        pieces = kv.chunk_count(new, k.chunk_tokens)
        piece = new / pieces
    if k.gemm.pad_row:
        # The rows the experts' GEMM tiles pad, at the decode step's GEMM line's cost a
        # row (simengine.moe, "Tile padding").
        pad = k.gemm.padding(piece)
        t_flop = t_flop + (pieces * pad if chunked else pad)
    # Under attention data parallelism one GPU prefills a prompt with its own copy of the
    # attention weights (the split's extra bytes) and no all-reduce.
    kv_read = split.kv_copies * m.kv_bytes(m.kv_tokens(cached + new))
    weights = step_weight_bytes(m, piece, tp, ep) + split.extra_weight_bytes
    if chunked:
        weights = pieces * weights
    t_mem = (weights + kv_read) / (tp * s.hw.memory_bandwidth * k.eta_mem)
    act = new * m.hidden_size * k.activation_bytes
    t_comm = moe_collectives_seconds(
        m, s.hw, new, split.allreduce_group, ep, k.allreduce_base, k.activation_bytes, balanced
    )
    t_comm += pipeline_hops_seconds(s.hw, act, s.place.pipeline_stages)
    side = attention / (tp * k.eta_flop) + t_comm
    if isinstance(new, np.ndarray):
        return np.maximum(t_flop, t_mem) + t_comm, side
    return max(t_flop, t_mem) + t_comm, side


def carried(s: Served, batch, rate, tokens, side):
    """Seconds the other streams' prompts add to a stream's step (GPUs): ``rate``
    prompts of ``tokens`` tokens start per step of a stream's cycle (a generated token,
    or a step carrying a chunk of its own prompt: :func:`interference`), each costing
    ``side`` beyond its weight GEMMs (:func:`prefill_parts`). Numbers or arrays.

    Chunked prefill piggybacks the prompts on the decode steps (Sarathi-Serve, Agrawal
    et al., OSDI 2024: "decode-maximal batching"; vLLM, TensorRT-LLM and SGLang schedule
    a step's prompt chunk with its decode tokens): the step's weight GEMMs take the
    chunk's tokens with the batch's, reading the weights once, so a memory-bound decode
    step (weights streamed while the tensor cores wait) does a chunk's GEMM FLOPs in the
    time it spends reading anyway; only what exceeds that, and the chunk's attention and
    collectives, lengthen it. A step carrying C prompt tokens beside b decode tokens
    costs gemm(b + C) - gemm(b) more (the deployment's :class:`simengine.moe.GemmLine`,
    the decode step's: an MoE's chunk also reads the experts the batch had not
    touched). The P prompt tokens per step ride in chunks of C tokens on P / C of the
    steps (:func:`simengine.kv.prompt_chunk`). When the decode step is compute-bound
    this is the prompts' whole prefill, as before. A pipeline's stages each carry their
    share (prompt tokens and attention / stages, on a micro-batch's step); a speculative
    step yields E tokens per stream, so it carries E times the prompts per token. Under
    attention data parallelism without the server's balancing, the other ranks also wait
    for the rank holding a prompt (its attention and non-expert GEMMs on one GPU:
    :func:`rank_local_seconds`, :func:`simengine.parallel.attention_dp_idle`).
    """
    k = s.knobs
    spec = k.speculation
    per_step = spec.tokens_per_step if spec is not None else 1.0
    per_stream = spec.draft_tokens + 1 if spec is not None else 1
    stages = s.place.pipeline_stages
    batch = pipeline_microbatch(batch, stages)  # a micro-batch's step
    prompt = rate * tokens * per_step / stages  # prompt tokens per step
    chunk = kv.prompt_chunk(prompt, tokens, k.chunk_tokens)
    base = batch * per_stream
    grow = k.gemm.at(base + chunk) - k.gemm.at(base)
    carried = (prompt / chunk) * grow / per_step + rate * side / stages
    d = s.deployment
    if d.attention_data_parallel:
        # Attention DP: a prompt's rank-local work holds the other ranks at the next
        # all-to-all unless the server balances (parallel.attention_dp_idle). The unit a
        # rank takes is one prompt, or its piece when chunking splits it: each rank
        # schedules its own steps within its own token budget (TensorRT-LLM's
        # max_num_tokens, vLLM's max_num_batched_tokens, SGLang's chunked-prefill size
        # are per DP rank; TensorRT-LLM tech blog 10: a context on its rank while the
        # others decode), so a step's prompt tokens beyond one budget are several pieces
        # on several ranks, not one rank's longer piece.
        unit = kv.prompt_piece(tokens, k.chunk_tokens)
        idle = attention_dp_idle(
            prompt / unit, s.place.tensor_parallel or 1, d.attention_dp_balance
        )
        carried = carried + idle * rank_local_seconds(s, unit) / per_step
    return carried


def rank_local_seconds(s: Served, tokens, cached=0.0):
    """Seconds, at the replica's rate, of the work a prompt chunk of ``tokens`` tokens
    does on its own attention-DP rank: its non-expert GEMMs (attention projections,
    dense and shared-expert layers, at their tensor-core rate, moe.attention_peak) and
    its causal attention over itself and ``cached`` tokens before it (the 16-bit rate);
    compute-bound, as a prompt's GEMMs are. Numbers or arrays."""
    m, k = s.model, s.knobs
    non_expert = m.active_split[0] / m.active_params_decode * m.active_params_prefill
    gemm = 2 * non_expert * tokens / attention_peak(m, s.hw, k.widened_efficiency)
    return (gemm + _attention_at_peak(s, tokens, cached)) / (
        (s.place.tensor_parallel or 1) * k.eta_flop
    )


def with_prefills(line: StepLine, extra: float) -> StepLine:
    # The other streams' prefills (``extra`` per generated token, interference) run in
    # the same steps as the decode, so they share a step with the host's work for it: a
    # token takes max(GPU step + extra, host) = max(GPU step, host - extra) + extra.
    if line.floor <= 0.0 or extra <= 0.0:
        return line
    return line._replace(floor=max(0.0, line.floor - extra))


def request_steps(chunks, output_tokens):
    """The steps a request spans on a GPU: the ``chunks`` steps carrying its own prompt
    (the last of which yields its first token) and one for each other output token - the
    cycle the other streams' riding prompts spread over (:func:`interference`). Numbers
    or arrays (one per turn)."""
    return chunks + output_tokens - 1


def interference(
    s: Served, batch: float | None, side: float, prompt_tokens: float, cycle_steps: float
) -> float:
    # Chunked-prefill interference per step (none on wafers, or without a batch): each of
    # the other B - 1 streams starts a prompt of ``prompt_tokens`` tokens (``side``: its
    # attention and collectives, prefill_parts) once per cycle of ``cycle_steps`` steps
    # (cycle_steps: the steps a stream's request spans, its own prompt's chunk steps and
    # its decode steps: request_steps), and their chunks ride those steps (carried):
    # every step of the cycle, the ones carrying the stream's own chunks as much as its
    # decode steps, so each prompt is counted once a cycle (a request of one output token
    # still waits for the B - 1 prompts the cycle carries). A pipeline's stages prefill
    # their own layers while the others work on other chunks or micro-batches, so a
    # prompt holds each stage for its share (its TTFT still crosses every stage:
    # prefill_seconds is the whole chain).
    if s.hw.kind != "gpu" or batch is None or cycle_steps <= 0:
        return 0.0
    return carried(s, batch, (batch - 1.0) / cycle_steps, prompt_tokens, side)

"""The GPU decode step: an operator-level roofline, as a line in the context length.

A decode step runs its kernels one after another (GenZ, Bambhaniya et al. 2024;
LLM-Viewer, Yuan et al. 2024), so each kernel family is bound by its own resource and
the step is their sum: attention = max(every stream's KV read, its FLOPs over the
context) + weight GEMMs = max(the weights the batch touches, read once, their FLOPs)
(:class:`simengine.moe.GemmLine`) + collectives (tensor-parallel all-reduces, the
experts' all-to-all, pipeline hops: :mod:`simengine.parallel`, :mod:`simengine.moe`).
The attention terms are affine in the context c and the rest is constant, so a step is
``StepLine``: max(mem0 + mem1 c, flop0 + flop1 c) + fixed, never under the host's work
for it (:mod:`simengine.host`). ``Points`` sums such a line over sorted weighted
contexts in O(log n) (the finite runs of :mod:`simengine.offline`).

:mod:`simengine.perf` builds a served deployment's line (its ``_token_line``) from
:func:`decode_step_line`; :func:`decode_step_seconds` is the same step for explicit
arguments. The step's fixed time outside the roofline is its kernels' own latency:
:func:`decode_kernels` of them, ``gpu:kernel_overhead`` each (``perf._knobs``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .hardware import HardwareProfile
from .model import ModelSpec
from .moe import (
    GemmLine,
    compute_peak,
    expert_peak,
    gemm_line,
    moe_collectives_seconds,
)
from .moe import experts_balanced as balanced_by_default  # the parameter's name is taken
from .parallel import (
    AttentionSplit,
    attention_split,
    latent_decode_padding,
    pipeline_hops_seconds,
)

# Attention (decode and prefill) multiplies at the 16-bit tensor-core rate whatever the
# weights' or the cache's dtype: servers store an FP8 cache and dequantize it "to BF16/
# FP16 at the reading time for attention calculation" (SGLang, sgl-project/sglang#10083);
# FlashInfer's FP8-cache decode casts it on load; FlashMLA ships BF16/FP16 kernels; FP8
# attention (FlashAttention-3) is opt-in, and no production server runs attention on the
# 4-bit tensor cores. Bytes per value of that math, for HardwareProfile.peak_flops.
ATTENTION_MATH_BYTES = 2.0


# Kernels a decode step launches, one after another (CUDA graphs replay them; each still
# costs its launch-to-finish latency, params ``gpu:kernel_overhead``, however little it
# does). Per layer, as TensorRT-LLM's DeepSeek-R1 min-latency decode lays a layer out
# (tech blog 1, "Pushing Latency Boundaries", 2025: "Everything in One Diagram", modules
# 1-13; weights are concatenated there "to reduce kernel launch overhead"):
# - attention, multi-head latent (MLA): the fused down-projection GEMM, the grouped Q/KV
#   RMSNorm, the Q up-projection GEMM, the K up-projection batched GEMM, KV-cache append
#   with RoPE, attention, the V up-projection batched GEMM, the output GEMM: 8;
# - attention, grouped-query or multi-head: QKV GEMM, KV-cache append with RoPE,
#   attention, output GEMM: 4;
# - mixture of experts: router GEMM, top-k, the experts' two grouped GEMMs with the
#   activation between them, the final reduction: 6 (shared experts run on a second
#   stream, overlapped with the routed ones: none added);
# - dense feed-forward: gate/up GEMM, activation (with the next GEMM's quantization),
#   down GEMM: 3;
# - the layer's two residual-add RMSNorms (fused with the tensor-parallel all-reduce
#   when there is one; the all-reduces' own time is simengine.parallel's): 2.
# Per step: embedding, final norm, LM head, sampling: 4.
KERNELS_ATTENTION_LATENT = 8
KERNELS_ATTENTION = 4
KERNELS_MOE = 6
KERNELS_DENSE_FFN = 3
KERNELS_NORMS = 2
KERNELS_PER_STEP = 4


def decode_kernels(model: ModelSpec) -> int:
    """Kernels one decode step of ``model`` launches (a drafter pass: its depth share)."""
    attention = KERNELS_ATTENTION_LATENT if model.latent_cache else KERNELS_ATTENTION
    ffn = KERNELS_MOE if model.experts else KERNELS_DENSE_FFN
    return model.layers * (attention + ffn + KERNELS_NORMS) + KERNELS_PER_STEP


def decode_step_seconds(
    model: ModelSpec,
    hw: HardwareProfile,
    *,
    batch: float = 1.0,
    context_tokens: float = 0.0,
    other_context_tokens: float = 0.0,
    tensor_parallel: int = 1,
    pipeline_stages: int = 1,
    eta_mem: float = 1.0,
    eta_flop: float = 1.0,
    allreduce_base: float = 0.0,
    activation_bytes: float = 2.0,
    tokens_per_stream: int = 1,
    expert_parallel: int = 1,
    eta_attention: float | None = None,
    expert_efficiency: float = 1.0,
    widened_efficiency: float = 1.0,
) -> float:
    """GPU roofline time of one decode step for a batch (seconds per generated token).

    Per operator (:func:`decode_step_line`): attention = max(KV of every stream,
    4 L w sum(contexts) FLOPs at the 16-bit rate; w the attention width,
    ``ModelSpec.decode_attention_flops``) + weight GEMMs = max(weights touched by the
    batch, 2 N_active B FLOPs), each over TP GPUs, + per-layer all-reduces (or the
    experts' all-to-all) + pipeline hops. With eta = 1
    and TP = 1 this is the bandwidth ceiling. ``tokens_per_stream`` > 1 is a
    speculative verify step (each stream's KV read once, its tokens' weights and FLOPs
    k + 1 times). ``eta_attention``: decode attention's share of the 16-bit peak (default
    ``eta_flop``); ``expert_efficiency``: the routed experts' GEMMs' share of their rate
    relative to a dense GEMM's (params ``gpu:eta_expert``; default 1);
    ``widened_efficiency``: the share of their rate GEMMs of widened 4-bit weights keep
    (params ``gpu:eta_widened``; default 1; HardwareProfile.mma_peak).
    """
    line = decode_step_line(
        model,
        hw,
        batch=batch,
        other_context_tokens=other_context_tokens,
        tensor_parallel=tensor_parallel,
        pipeline_stages=pipeline_stages,
        eta_mem=eta_mem,
        eta_flop=eta_flop,
        allreduce_base=allreduce_base,
        activation_bytes=activation_bytes,
        tokens_per_stream=tokens_per_stream,
        expert_parallel=expert_parallel,
        eta_attention=eta_attention,
        expert_efficiency=expert_efficiency,
        widened_efficiency=widened_efficiency,
    )
    return line.at(context_tokens)


class StepLine(NamedTuple):
    # A decode step as a function of the stream's context c: the attention kernels'
    # two roofline terms are affine in c, everything else is constant, so step(c) =
    # max(mem0 + mem1 c, flop0 + flop1 c) + fixed, and a step never takes less than the
    # host's work for it, ``floor`` (an overlapped host loop: simengine.host). A
    # NamedTuple: built per decode batch on the router's cold path, where a frozen
    # dataclass's __init__ costs twice as much.
    mem0: float
    mem1: float
    flop0: float
    flop1: float
    fixed: float
    collectives: float = 0.0  # the part of ``fixed`` spent in collectives (GPU drafting)
    floor: float = 0.0  # the host's work per step (0: none)

    def at(self, context):
        # ``context``: a number or an array of them (one formula for both).
        mem, flop = self.mem0 + self.mem1 * context, self.flop0 + self.flop1 * context
        if isinstance(context, np.ndarray):
            step = np.maximum(mem, flop) + self.fixed
            return np.maximum(step, self.floor) if self.floor else step
        step = max(mem, flop) + self.fixed
        return step if step >= self.floor else self.floor

    def _below_floor(self, x: list[float]) -> int:
        # How many of the sorted points ``x`` have a GPU step under the floor: the GPU
        # step never falls as the context grows (both lines' slopes are >= 0), so they
        # are a prefix, ending where the first line reaches the floor.
        if self.floor <= 0.0:
            return 0
        reach = math.inf
        for c0, c1 in ((self.mem0, self.mem1), (self.flop0, self.flop1)):
            need = self.floor - self.fixed - c0
            if need <= 0.0:
                return 0
            if c1 > 0.0:
                reach = min(reach, need / c1)
        return bisect.bisect_left(x, reach)

    def weighted_sum(self, points: Points) -> float:
        """sum_i w_i at(x_i) over sorted weighted points, in O(log n).

        at() is the larger of two lines plus a constant (or the host's floor, on a
        prefix of the points: :meth:`_below_floor`), and the points where the second
        line wins are one side of where the lines cross: split the sorted points there
        and each side is (intercept x sum w + slope x sum w x) from the prefix sums.
        The same value as summing at() point by point (to rounding).
        """
        w, wx, n = points.w, points.wx, len(points.x)
        s = self._below_floor(points.x)  # [0, s): the floor
        d0, d1 = self.flop0 - self.mem0, self.flop1 - self.mem1  # flop wins where d0 + d1 x > 0
        if d1 > 0:
            k = bisect.bisect_right(points.x, -d0 / d1)  # [0, k): memory, [k, n): compute
            lo = (self.mem0, self.mem1)
            hi = (self.flop0, self.flop1)
        elif d1 < 0:
            k = bisect.bisect_left(points.x, -d0 / d1)  # [0, k): compute, [k, n): memory
            lo = (self.flop0, self.flop1)
            hi = (self.mem0, self.mem1)
        else:
            k, lo = n, ((self.flop0, self.flop1) if d0 > 0 else (self.mem0, self.mem1))
            hi = lo
        k = max(k, s)
        return (
            lo[0] * (w[k] - w[s])
            + lo[1] * (wx[k] - wx[s])
            + hi[0] * points.sw[k]
            + hi[1] * points.swx[k]
            + self.fixed * points.sw[s]
            + self.floor * w[s]
        )


@dataclass(frozen=True, slots=True)
class Points:
    # Weighted evaluation points, sorted by x, with prefix sums of w and w x and suffix
    # sums of both (n + 1 each: w[k] = sum of w[:k], sw[k] = sum of w[k:]).
    x: list[float]
    w: list[float]
    wx: list[float]
    sw: list[float]
    swx: list[float]

    @classmethod
    def of(cls, x: np.ndarray, w: np.ndarray) -> Points:
        x, w = x.ravel(), w.ravel()
        order = np.argsort(x, kind="stable")
        x, w = x[order], w[order]
        ws, wxs = w.tolist(), (w * x).tolist()
        return cls(
            x.tolist(),
            [0.0, *itertools.accumulate(ws)],
            [0.0, *itertools.accumulate(wxs)],
            [*itertools.accumulate(reversed(ws))][::-1] + [0.0],
            [*itertools.accumulate(reversed(wxs))][::-1] + [0.0],
        )


def decode_step_line(
    model: ModelSpec,
    hw: HardwareProfile,
    *,
    batch: float,
    other_context_tokens: float,
    tensor_parallel: int,
    pipeline_stages: int,
    eta_mem: float,
    eta_flop: float,
    allreduce_base: float,
    activation_bytes: float,
    tokens_per_stream: int = 1,
    expert_parallel: int = 1,
    experts_balanced: bool | None = None,
    split: AttentionSplit | None = None,
    eta_attention: float | None = None,
    gemm: GemmLine | None = None,
    expert_efficiency: float = 1.0,
    gemm_batch: float | None = None,
    widened_efficiency: float = 1.0,
) -> StepLine:
    # Operator-level roofline (GenZ, Bambhaniya et al. 2024; LLM-Viewer, Yuan et al.
    # 2024): a decode step runs its kernels one after another, so each kernel is bound
    # by its own resource and the step is their sum, not one roofline over the whole
    # step. Two kernel families: the attention kernels (read every stream's KV, attend
    # over its context: affine in the context c) and the weight GEMMs (read the weights
    # the batch touches, multiply them by its tokens: constant in c). step(c) =
    # max(KV read, attention FLOPs) + max(weight read, GEMM FLOPs) + collectives.
    # Rates are the whole group's (TP GPUs; under attention data parallelism the same
    # GPUs each attend for their own streams, simengine.parallel.attention_dp_*).
    # ``split``: how attention sits on the group (a served deployment's, resolved once
    # by _serve); None: split by head over the TP group. ``gemm``: the weight GEMMs' line
    # at these rates (a served deployment's, built once by _knobs); None: built here.
    # The other streams' KV (whole-cache tokens: sliding-window layers keep only their
    # window, ModelSpec.kv_tokens) and this stream's, a line in its context c.
    own0, own1 = model.kv_line(other_context_tokens)
    others_in_kv = (batch - 1) * model.kv_tokens(other_context_tokens) + own0
    # ``gemm_batch``: the batch the GEMMs and collectives compute, when a captured CUDA
    # graph pads the step (simengine.host.graph_batch); default: the batch.
    tokens = (batch if gemm_batch is None else gemm_batch) * tokens_per_stream
    tp, ep = tensor_parallel, expert_parallel
    experts_balanced = balanced_by_default(ep, experts_balanced)
    mem_rate = tp * hw.memory_bandwidth * eta_mem
    flop_rate = tp * compute_peak(model, hw, expert_efficiency, widened_efficiency) * eta_flop
    if split is None:
        split = attention_split(model, tp, False)
    # A latent cache's decode kernels compute whole tiles of query rows; a head split
    # leaves them part-empty (simengine.parallel.latent_decode_padding).
    attn = (model.decode_attention_flops * tokens_per_stream
            * latent_decode_padding(model, hw, split, tokens_per_stream))  # fmt: skip
    # Decode attention at its own efficiency (params: eta_decode_attention; the GEMMs'
    # where none is calibrated).
    attn_rate = tp * hw.peak_flops(ATTENTION_MATH_BYTES) * (eta_attention or eta_flop)
    act = tokens * model.hidden_size * activation_bytes
    t_comm = moe_collectives_seconds(
        model,
        hw,
        tokens,
        split.allreduce_group,
        ep,
        allreduce_base,
        activation_bytes,
        experts_balanced,
    )
    t_comm += pipeline_hops_seconds(hw, act, pipeline_stages)
    if gemm is None:
        routed_rate = (tp * expert_peak(model, hw, expert_efficiency, widened_efficiency)
                       * eta_flop)  # fmt: skip
        gemm = gemm_line(
            model,
            tp,
            ep,
            split.extra_weight_bytes,
            mem_rate,
            flop_rate,
            routed_rate,
            experts_balanced,
        )
    t_gemm = gemm.at(tokens)
    return StepLine(
        mem0=split.kv_copies * model.kv_bytes(others_in_kv) / mem_rate,
        mem1=split.kv_copies * model.kv_bytes(own1) / mem_rate,
        flop0=attn * others_in_kv / attn_rate,
        flop1=attn * own1 / attn_rate,
        fixed=t_comm + t_gemm,
        collectives=t_comm,
    )

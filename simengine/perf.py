"""Performance model: per-token decode, prefill, TTFT, transport, and agent tasks.

By concern: :mod:`simengine.kv` (KV capacity, batch caps, chunked prefill and its
interference), :mod:`simengine.parallel` (tensor-parallel all-reduces, pipeline and
wafer hops); this module serves a deployment and predicts (``predict``,
``serving_point``, the memoised service profiles the router reads).

GPUs follow the roofline (bytes / (BW eta_mem) vs FLOPs / (F eta_flop), whichever
binds) plus all-reduce collectives and a fixed per-step overhead. Serving is continuous
batching: the decode batch is the number of streams in flight on the replica (the
load times the tier's batch cap; the cap alone when no load is given; the cap limited
by what the paged KV cache holds), co-batched streams hold the workload's own context
(pipeline stages decode micro-batches of it), and every other stream's prompt rides the
decode steps in chunks (chunked-prefill interference: a chunk's GEMMs share the step's
weight read, so a memory-bound step hides them and only the rest lengthens it,
``_carried``), so per-stream speed falls and replica throughput rises as concurrency
grows. MoE: distinct experts touched by the batch (:mod:`simengine.moe`; expert
parallelism adds its all-to-all). Wafers are
latency-bound, not bandwidth-bound: per-token time is sum over layers (t_layer + active
bytes on the wafer / (SRAM BW eta_sram)) + (P - 1) t_hop (+ two expert hops per MoE
layer when an MoE spans wafers) + t_fixed; t_layer is calibrated per software version,
t_hop is physical (link latency + activation transfer, about a microsecond).
Speculative decoding (:mod:`simengine.speculative`): a verify step of k + 1 tokens per
stream plus the drafter's passes, over the expected tokens per step.

An agent task is a sequence of turns; per turn: wait + transport round trip + TTFT
(server overhead + prefill of the uncached tokens + first step) + decode + the agent's
per-turn term (``agent:turn_overhead``: server-side work of an agent turn beyond TTFT
and decode - re-prefill of context evicted during the tool call, harness
orchestration); plus the tool time. Context grows turn by turn; with prompt caching
only new tokens prefill.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import kv, offline
from .errors import SimEngineError
from .hardware import HardwareProfile
from .host import host_param, host_step_seconds
from .kv import batch_at, chunk_count
from .model import HashOnce, ModelSpec, hash_once
from .moe import (
    GemmLine,
    attention_peak,
    compute_peak,
    gemm_line,
    moe_collectives_seconds,
    step_weight_bytes,
    wafer_expert_hops,
)
from .parallel import (
    AttentionSplit,
    attention_dp_batch_cap,
    attention_dp_idle,
    attention_dp_in_phase,
    attention_split,
    pipeline_hops_seconds,
    pipeline_microbatch,
    split_pipeline,
    wafer_hop_seconds,
)
from .params import DEFAULT_PARAMS, EngineParams
from .placement import Placement, _split_layers, placement, resolve_device
from .queueing import TIER_PRIORITY, erlang_c, total_wait_quantile, wait_estimate
from .speculative import (
    PRODUCTION_METHOD,
    Speculation,
    drafter_shape,
    gpu_drafter_seconds,
    method_default,
    wafer_drafter_seconds,
)

TIERS: tuple[str, ...] = ("flex", "standard", "priority", "ultrafast")
TRANSPORTS: tuple[str, ...] = ("reworked", "legacy")
# Anything above this is a typo or an attack, not a task (larger than any context window).
MAX_TOKENS = 50_000_000
# Attention (decode and prefill) multiplies at the 16-bit tensor-core rate whatever the
# weights' or the cache's dtype: servers store an FP8 cache and dequantize it "to BF16/
# FP16 at the reading time for attention calculation" (SGLang, sgl-project/sglang#10083);
# FlashInfer's FP8-cache decode casts it on load; FlashMLA ships BF16/FP16 kernels; FP8
# attention (FlashAttention-3) is opt-in, and no production server runs attention on the
# 4-bit tensor cores. Bytes per value of that math, for HardwareProfile.peak_flops.
ATTENTION_MATH_BYTES = 2.0


def _positive_int(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimEngineError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise SimEngineError(f"{name} must be >= {minimum}, got {value}")
    return value


@hash_once
@dataclass(frozen=True)
class Deployment(HashOnce):
    """Where and how a model is served.

    ``device`` is a key of HARDWARE, ``nodes`` the wafers or GPUs in the pool.
    ``software`` picks the calibrated parameter version (default: the device's current
    one); ``nodes_per_replica`` forces a deeper pipeline / wider group than needed;
    ``speculative``: False, True (the hardware's production method) or a
    :class:`~simengine.speculative.Speculation`. ``expert_parallel``: GPUs over which an
    MoE's experts are split (all-to-all per MoE layer; 1 = tensor-split experts).
    ``pipeline_parallel`` (GPUs) splits ``nodes_per_replica`` into that many stages over
    layers, tensor parallel within each (devices = TP x PP); None: placement's layout
    (pipeline stages only beyond one NVLink domain). ``attention_data_parallel``: the
    replica's GPUs each run attention for their own streams, experts split over them
    (:func:`simengine.parallel.attention_dp_weight_bytes`); ``attention_dp_balance``:
    the server makes its attention-DP ranks prefill together (TensorRT-LLM's
    ``attention_dp_config.enable_balance``) instead of placing prompts as they come
    (:func:`simengine.parallel.attention_dp_idle`).
    """

    device: str
    nodes: int
    tier: str = "standard"
    transport: str = "reworked"
    software: str | None = None
    nodes_per_replica: int | None = None
    speculative: bool | Speculation = False
    expert_parallel: int = 1
    pipeline_parallel: int | None = None
    attention_data_parallel: bool = False
    attention_dp_balance: bool = False

    def __post_init__(self) -> None:
        hw = resolve_device(self.device)
        for name in ("attention_data_parallel", "attention_dp_balance"):
            if not isinstance(getattr(self, name), bool):
                raise SimEngineError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.attention_dp_balance and not self.attention_data_parallel:
            raise SimEngineError("attention_dp_balance needs attention_data_parallel")
        if self.attention_data_parallel and hw.kind != "gpu":
            raise SimEngineError(f"attention_data_parallel applies to GPUs only, not {hw.key}")
        if self.pipeline_parallel is not None:
            _positive_int(self.pipeline_parallel, "pipeline_parallel", 1)
        _positive_int(self.nodes, "nodes", 1)
        _positive_int(self.expert_parallel, "expert_parallel", 1)
        if self.tier not in TIERS:
            raise SimEngineError(f"unknown tier {self.tier!r}; known: {list(TIERS)}")
        if self.transport not in TRANSPORTS:
            raise SimEngineError(f"unknown transport {self.transport!r}; known: {list(TRANSPORTS)}")
        if self.nodes_per_replica is not None:
            _positive_int(self.nodes_per_replica, "nodes_per_replica", 1)


@hash_once
@dataclass(frozen=True)
class TaskProfile(HashOnce):
    """An agent task: ``turns`` model calls with tool calls in between.

    ``input_tokens`` is the first prompt; ``output_tokens`` the output over all turns
    (split evenly); ``tool_result_tokens`` the tool output fed back over turns 2..n
    (split evenly); ``tool_seconds`` the total tool time. With ``prompt_caching``
    earlier turns stay cached, so each turn prefills only its new tokens; without it
    every turn re-prefills its whole context.
    """

    input_tokens: int
    output_tokens: int
    turns: int = 1
    tool_seconds: float = 0.0
    tool_result_tokens: int = 0
    prompt_caching: bool = True

    def __post_init__(self) -> None:
        i, o, n, r = self.input_tokens, self.output_tokens, self.turns, self.tool_result_tokens
        # Plain ints at their minimums pass as they are (one task per routed request);
        # anything else is checked one by one, for the first error's message.
        if not (
            type(i) is int and type(o) is int and type(n) is int and type(r) is int
            and i >= 1 and o >= 1 and n >= 1 and r >= 0
        ):  # fmt: skip
            _positive_int(self.input_tokens, "input_tokens", 1)
            _positive_int(self.output_tokens, "output_tokens", 1)
            _positive_int(self.turns, "turns", 1)
            _positive_int(self.tool_result_tokens, "tool_result_tokens", 0)
        if self.output_tokens < self.turns:
            raise SimEngineError(
                f"output_tokens ({self.output_tokens}) must be >= turns ({self.turns})"
            )
        total = self.input_tokens + self.output_tokens + self.tool_result_tokens
        if total > MAX_TOKENS:
            raise SimEngineError(f"task holds {total} tokens, above the {MAX_TOKENS} sanity limit")
        if not (
            isinstance(self.tool_seconds, (int, float))
            and math.isfinite(self.tool_seconds)
            and self.tool_seconds >= 0
        ):
            raise SimEngineError(f"tool_seconds must be finite and >= 0, got {self.tool_seconds!r}")

    @property
    def final_context_tokens(self) -> int:
        """Context length at the end of the last turn."""
        return self.input_tokens + self.output_tokens + self.tool_result_tokens


@dataclass(frozen=True)
class TurnBreakdown:
    """Timing of one turn (seconds); ``agent`` is the per-turn agent term."""

    turn: int
    new_tokens: int
    cached_tokens: int
    output_tokens: int
    wait: float
    transport: float
    ttft: float
    decode: float
    agent: float = 0.0


# Not frozen: a frozen dataclass sets each of its ~20 fields through
# object.__setattr__, which dominated the router's hot path.
@dataclass(slots=True)
class Prediction:
    """Predicted timing of a task on a deployment (seconds, tokens/s).

    ``tokens_per_second`` is the client-observed decode speed over the task (output
    tokens / time spent producing them); ``ttft_seconds`` the first turn's time to
    first token as a client sees it without queueing (round trip + server TTFT: API
    overhead, prefill, first step - nothing of the agent's per-turn term).
    ``generation_seconds`` = sum of server TTFT + decode + ``agent_seconds`` (the
    per-turn agent term) over turns, ``transport_seconds`` the round trips,
    ``queue_seconds`` the P90 of the task's total wait over its turns (per-replica
    queues, 0 without a load); total = queue + transport + generation + tool.
    ``batch`` is the decode batch the load gives (GPUs).
    """

    model: str
    device: str
    tier: str
    transport: str
    software: str
    tokens_per_second: float
    ttft_seconds: float
    generation_seconds: float
    tool_seconds: float
    transport_seconds: float
    queue_seconds: float
    total_seconds: float
    agent_seconds: float
    wafers: int | None
    gpus_per_replica: int | None
    replicas: int
    stream_capacity: int
    batch: int | None
    load: float | None
    queue_saturated: bool
    turns: tuple[TurnBreakdown, ...] = field(default=())
    # The wait's distribution behind ``queue_seconds`` (its P90): each queue visit waits
    # with probability ``wait_probability``, then an exponential time of mean
    # ``wait_mean`` (simengine.spread draws from it and combines it with the run).
    wait_probability: float = 0.0
    wait_mean: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (turn breakdown as a list of dicts)."""
        data = asdict(self)
        data["turns"] = [asdict(t) for t in self.turns]
        return data

    def summary(self) -> dict[str, Any]:
        """The timings a client is shown for a prediction (no breakdown, no hardware
        detail beyond wafers and stream capacity)."""
        return {
            "queue_seconds": self.queue_seconds,
            "ttft_seconds": self.ttft_seconds,
            "generation_seconds": self.generation_seconds,
            "transport_seconds": self.transport_seconds,
            "tool_seconds": self.tool_seconds,
            "total_seconds": self.total_seconds,
            "tokens_per_second": self.tokens_per_second,
            "wafers": self.wafers,
            "stream_capacity": self.stream_capacity,
            "saturated": self.queue_saturated,
        }


@dataclass(frozen=True)
class _Served:
    # A deployment resolved against a model and parameters: everything the per-token
    # and prefill formulas need.
    model: ModelSpec
    hw: HardwareProfile
    place: Placement
    deployment: Deployment
    software: str
    params: EngineParams
    other_context: float  # context held by each co-batched stream (from the workload)
    batch: float | None  # GPU decode batch (co-scheduled streams per replica)
    batch_cap: float | None = None  # the tier's batch cap (GPU streams per replica)
    token_line: _StepLine | None = None  # set by _serve
    transport_costs: tuple[float, float, float] = (0.0, 0.0, 0.0)  # set by _serve
    knobs: _Knobs | None = None  # set by _serve
    attention: AttentionSplit | None = None  # set by _serve (GPUs: how attention is split)

    def p(self, name: str) -> float:
        return self.params.hardware(
            self.hw.key, self.hw.kind, self.software, name, self.hw.generation
        )

    def transport(self, name: str) -> float:
        return self.transport_costs[_TRANSPORT_NAMES.index(name)]

    def _transport_from_params(self, name: str) -> float:
        t = self.deployment.transport
        return self.params.get(f"transport:legacy:{name}") * self.params.get(
            f"transport:{t}:{name}_factor"
        )


_TRANSPORT_NAMES = ("round_trip", "ttft_overhead", "per_token")


@dataclass(frozen=True, slots=True)
class _Knobs:
    # The parameters a served deployment's per-token and prefill formulas read, looked
    # up once per deployment (EngineParams lookups are dict work the hot path repeats).
    eta_mem: float  # GPUs
    eta_flop: float  # GPUs: eta_flop; wafers: wafer:eta_flop (prefill)
    eta_attention: float  # GPUs: decode attention's share of the 16-bit peak
    allreduce_base: float
    activation_bytes: float
    step_overhead: float
    speculation: Speculation | None  # speculative decoding (None: off)
    tier_batch: float | None  # GPUs: the tier's batch cap
    chunk_tokens: float | None  # GPUs: chunked-prefill chunk
    wafer_pass: float  # wafers: one token through the pipeline
    wafer_fixed: float
    wafer_verify_extra: float = 0.0  # wafers: the k draft tokens' compute in a verify pass
    wafer_draft: float = 0.0  # wafers: one drafter pass
    host_per_stream: float = 0.0  # GPUs: the host's seconds per stream in the batch, per step
    gemm: GemmLine | None = None  # GPUs: the replica's weight GEMMs by tokens in a step


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
) -> float:
    """GPU roofline time of one decode step for a batch (seconds per generated token).

    Per operator (:func:`_decode_step_line`): attention = max(KV of every stream,
    4 L w sum(contexts) FLOPs at the 16-bit rate; w the attention width,
    ``ModelSpec.decode_attention_flops``) + weight GEMMs = max(weights touched by the
    batch, 2 N_active B FLOPs), each over TP GPUs, + per-layer all-reduces (or the
    experts' all-to-all) + pipeline hops. With eta = 1
    and TP = 1 this is the bandwidth ceiling. ``tokens_per_stream`` > 1 is a
    speculative verify step (each stream's KV read once, its tokens' weights and FLOPs
    k + 1 times). ``eta_attention``: decode attention's share of the 16-bit peak (default
    ``eta_flop``).
    """
    line = _decode_step_line(
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
    )
    return line.at(context_tokens)


class _StepLine(NamedTuple):
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

    def weighted_sum(self, points: _Points) -> float:
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
class _Points:
    # Weighted evaluation points, sorted by x, with prefix sums of w and w x and suffix
    # sums of both (n + 1 each: w[k] = sum of w[:k], sw[k] = sum of w[k:]).
    x: list[float]
    w: list[float]
    wx: list[float]
    sw: list[float]
    swx: list[float]

    @classmethod
    def of(cls, x: np.ndarray, w: np.ndarray) -> _Points:
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


def _decode_step_line(
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
    split: AttentionSplit | None = None,
    eta_attention: float | None = None,
    gemm: GemmLine | None = None,
) -> _StepLine:
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
    others_in_kv = (batch - 1) * other_context_tokens
    tokens = batch * tokens_per_stream
    tp, ep = tensor_parallel, expert_parallel
    mem_rate = tp * hw.memory_bandwidth * eta_mem
    flop_rate = tp * compute_peak(model, hw) * eta_flop
    attn = model.decode_attention_flops * tokens_per_stream
    # Decode attention at its own efficiency (params: eta_decode_attention; the GEMMs'
    # where none is calibrated).
    attn_rate = tp * hw.peak_flops(ATTENTION_MATH_BYTES) * (eta_attention or eta_flop)
    act = tokens * model.hidden_size * activation_bytes
    if split is None:
        split = attention_split(model, tp, False)
    t_comm = moe_collectives_seconds(
        model, hw, tokens, split.allreduce_group, ep, allreduce_base, activation_bytes
    )
    t_comm += pipeline_hops_seconds(hw, act, pipeline_stages)
    if gemm is None:
        gemm = gemm_line(model, tp, ep, split.extra_weight_bytes, mem_rate, flop_rate)
    t_gemm = gemm.at(tokens)
    return _StepLine(
        mem0=split.kv_copies * model.kv_bytes(others_in_kv) / mem_rate,
        mem1=split.kv_copies * model.kv_bytes_per_token / mem_rate,
        flop0=attn * others_in_kv / attn_rate,
        flop1=attn / attn_rate,
        fixed=t_comm + t_gemm,
        collectives=t_comm,
    )


def _wafer_hop(s: _Served) -> float:
    return wafer_hop_seconds(
        s.params.get("wafer:t_link"),
        s.model.hidden_size,
        s.params.get("activation_bytes"),
        s.hw.link_bandwidth,
    )


def _wafer_pass(s: _Served) -> float:
    # One token through the pipeline: per layer a fixed latency plus the time the cores
    # holding the layer take to stream its active weights (a layer's cores are its
    # share of the wafer, so this is the wafer's active bytes / the effective SRAM
    # bandwidth), plus (P-1) wafer-to-wafer hops.
    # The cores a layer gets are set when the model is packed onto the fewest wafers
    # that hold it; a deeper pipeline than that only adds hops (never faster).
    m, place = s.model, s.place
    active_fraction = m.active_params_decode / m.total_params
    layer_bytes = m.weight_bytes / m.layers
    eff_bw = s.hw.memory_bandwidth * s.p("eta_sram")
    packed = max(placement(m, s.hw.key, context_tokens=place.context_tokens).layers_per_stage)
    per_layer = s.p("t_layer") + active_fraction * packed * layer_bytes / eff_bw
    return m.layers * per_layer + (place.pipeline_stages - 1) * _wafer_hop(s) + _wafer_moe(s)


def _wafer_moe(s: _Served) -> float:
    # An MoE spanning several wafers has each layer's experts on other wafers than the
    # token: two hops per MoE layer with k x hidden activations (simengine.moe).
    m = s.model
    if not m.is_moe or s.place.pipeline_stages <= 1:
        return 0.0
    return wafer_expert_hops(
        m.layers,
        m.expert_layout[1],
        m.hidden_size,
        s.params.get("activation_bytes"),
        hop_latency=s.params.get("wafer:t_link"),
        link_bandwidth=s.hw.link_bandwidth,
    )


def _speculation(s: _Served) -> Speculation | None:
    spec = s.deployment.speculative
    if spec is True:
        return method_default(PRODUCTION_METHOD[s.hw.kind])
    return spec or None


def _wafer_speculative(s: _Served, spec: Speculation | None) -> tuple[float, float]:
    # (extra time of a verify pass: the k draft tokens' FLOPs on the busiest wafer at
    # the wafer's prefill rate; one drafter pass).
    if spec is None:
        return 0.0, 0.0
    m = s.model
    share = max(s.place.layers_per_stage) / m.layers
    extra = (spec.draft_tokens * 2 * m.active_params_decode * share
             / (compute_peak(m, s.hw) * s.params.get("wafer:eta_flop")))  # fmt: skip
    draft = wafer_drafter_seconds(
        drafter_shape(spec, m.layers),
        layers=m.layers,
        t_layer=s.p("t_layer"),
        active_bytes=m.decode_weight_bytes(1),
        sram_rate=s.hw.memory_bandwidth * s.p("eta_sram"),
    )
    return extra, draft


def _knobs(s: _Served) -> _Knobs:
    # Looked up in the order the formulas first need them (the first missing one is
    # the error).
    get, gpu = s.params.get, s.hw.kind == "gpu"
    spec = _speculation(s)
    if gpu:
        eta_flop = s.p("eta_flop")
        eta_mem = s.p("eta_mem")
        tp = s.place.tensor_parallel or 1
        gemm = gemm_line(
            s.model,
            tp,
            s.deployment.expert_parallel,
            s.attention.extra_weight_bytes,
            tp * s.hw.memory_bandwidth * eta_mem,
            tp * compute_peak(s.model, s.hw) * eta_flop,
        )
        return _Knobs(
            eta_mem=eta_mem,
            eta_flop=eta_flop,
            eta_attention=_decode_attention_efficiency(s, eta_flop),
            allreduce_base=get("gpu:allreduce_base"),
            activation_bytes=get("activation_bytes"),
            step_overhead=get("gpu:step_overhead"),
            speculation=spec,
            tier_batch=get(f"tier:{s.deployment.tier}:batch"),
            chunk_tokens=get("gpu:prefill_chunk_tokens"),
            wafer_pass=0.0,
            wafer_fixed=0.0,
            host_per_stream=_host_per_stream(s),
            gemm=gemm,
        )
    verify_extra, draft = _wafer_speculative(s, spec)
    return _Knobs(
        eta_mem=0.0,
        eta_flop=get("wafer:eta_flop"),
        eta_attention=0.0,
        allreduce_base=0.0,
        activation_bytes=get("activation_bytes"),
        step_overhead=0.0,
        speculation=spec,
        tier_batch=None,
        chunk_tokens=None,
        wafer_pass=_wafer_pass(s),
        wafer_fixed=get("wafer:t_fixed"),
        wafer_verify_extra=verify_extra,
        wafer_draft=draft,
    )


def _host_per_stream(s: _Served) -> float:
    # The host's work per step for each stream of a replica's batch (simengine.host): one
    # scheduler per attention rank under attention data parallelism, each over its own
    # streams; else one over the replica's whole batch.
    if not s.hw.host:
        return 0.0
    ranks = (s.place.tensor_parallel or 1) if s.deployment.attention_data_parallel else 1
    return host_step_seconds(s.params.get(host_param(s.hw.host)), 1.0, ranks)


def _decode_attention_efficiency(s: _Served, eta_flop: float) -> float:
    # Decode attention's efficiency where one is calibrated for the device's generation
    # and software era (params: eta_decode_attention), else the GEMMs' eta_flop.
    found = s.params.find_hardware(
        s.hw.key, s.hw.kind, s.software, "eta_decode_attention", s.hw.generation
    )
    return eta_flop if found is None else found


def _server_token_seconds(s: _Served, context):
    """Server-side time per generated token for a stream at ``context`` tokens (a number
    or an array)."""
    return s.token_line.at(context)


def _token_line(s: _Served, batch: float | None, other_context: float) -> _StepLine:
    # The per-token time of a served deployment as a line in the context length, at a
    # decode batch of ``batch`` streams each holding ``other_context`` (GPUs; a wafer's
    # line depends on neither).
    k = s.knobs
    spec = k.speculation
    per_step = spec.tokens_per_step if spec is not None else 1.0
    if s.hw.kind == "wafer":
        # SRAM streaming floor: tiny (us) but it keeps longer contexts never faster.
        # Speculative: a verify pass (the pass + the draft tokens' compute) and the
        # drafter's passes yield E[tokens] tokens.
        bw = s.hw.memory_bandwidth * per_step
        step = k.wafer_pass + k.wafer_fixed
        if spec is not None:
            passes = drafter_shape(spec, s.model.layers).passes
            step += k.wafer_verify_extra + passes * k.wafer_draft
        mem0 = s.model.decode_weight_bytes(1) / bw
        return _StepLine(mem0, s.model.kv_bytes_per_token / bw, mem0, 0.0, step / per_step)
    b = float(batch or 1)
    stages = s.place.pipeline_stages
    line = _decode_step_line(
        s.model,
        s.hw,
        # Pipeline stages decode micro-batches (simengine.parallel.pipeline_microbatch).
        batch=pipeline_microbatch(b, stages),
        other_context_tokens=other_context,
        tensor_parallel=s.place.tensor_parallel or 1,
        pipeline_stages=stages,
        eta_mem=k.eta_mem,
        eta_flop=k.eta_flop,
        allreduce_base=k.allreduce_base,
        activation_bytes=k.activation_bytes,
        tokens_per_stream=1 if spec is None else spec.draft_tokens + 1,
        expert_parallel=s.deployment.expert_parallel,
        split=s.attention,
        eta_attention=k.eta_attention,
        gemm=k.gemm,
    )
    fixed = line.fixed + k.step_overhead
    host = k.host_per_stream * b  # the host's work for the step (simengine.host)
    if spec is None:
        return _StepLine(line.mem0, line.mem1, line.flop0, line.flop1, fixed, 0.0, host)
    fixed += _gpu_drafting(s, line, b, other_context, spec)
    return _StepLine(line.mem0 / per_step, line.mem1 / per_step, line.flop0 / per_step,
                     line.flop1 / per_step, fixed / per_step,
                     floor=host / per_step)  # fmt: skip


def _gpu_drafting(
    s: _Served, line: _StepLine, batch: float, context: float, spec: Speculation
) -> float:
    # The drafter's passes per verify step for ``batch`` streams at ``context`` tokens.
    m, k = s.model, s.knobs
    shape = drafter_shape(spec, m.layers)
    tp = s.place.tensor_parallel or 1
    one = gpu_drafter_seconds(
        shape,
        active_params=m.active_params_decode,
        bytes_per_param=m.attention_bytes_per_param,
        batch=batch,
        kv_bytes=s.attention.kv_copies * m.kv_bytes(batch * context),
        attention_flops=m.decode_attention_flops * batch * context,
        mem_rate=tp * s.hw.memory_bandwidth * k.eta_mem,
        flop_rate=tp * compute_peak(m, s.hw) * k.eta_flop,
        attention_rate=tp * s.hw.peak_flops(ATTENTION_MATH_BYTES) * k.eta_attention,
        fixed=line.collectives + k.step_overhead,
    )
    return shape.passes * one


def _batch_at(s: _Served, batch: float | None, context: float) -> tuple[float | None, float | None]:
    # (decode batch, the tier's batch cap) of a GPU deployment whose streams hold
    # ``context`` tokens; ``batch`` None: the cap. (None, None) on wafers.
    if s.hw.kind != "gpu":
        return None, None
    # The paged cache holds fewer tokens when the TP group stores each more than once,
    # and, under attention data parallelism, loses the memory of the replicated weights.
    split = s.attention
    kv_tokens = (
        s.place.kv_tokens_per_replica - split.extra_weight_bytes / s.model.kv_bytes_per_token
    )
    return batch_at(kv_tokens / split.kv_copies, s.knobs.tier_batch, batch, context)


def _token_seconds(s: _Served, context):
    # What the client sees per token: server step + per-token transport overhead.
    return _server_token_seconds(s, context) + s.transport_costs[2]


def _prefill_seconds(s: _Served, new, cached):
    """Compute-bound prefill of ``new`` tokens after ``cached`` cached ones (numbers, or
    arrays of them: one prefill per element)."""
    return _prefill_parts(s, new, cached)[0]


def _prefill_parts(s: _Served, new, cached):
    """(the prefill of ``new`` tokens after ``cached`` on its own, the part of it a decode
    step cannot absorb when the prompt rides one: its attention and collectives; GPUs)
    - numbers, or arrays of them. The rest of a prompt's time is its weight GEMMs, which
    chunked prefill runs inside the decode steps' (:func:`_carried`)."""
    m, k = s.model, s.knobs
    # Causal attention over the cached prefix and the new tokens themselves.
    # The weight GEMMs at the weights' tensor-core rate, attention (2 L w (n^2 + 2 n c)
    # over the attention width w) at the 16-bit rate (ATTENTION_MATH_BYTES); as time.
    gemm = 2 * m.active_params_prefill * new / compute_peak(m, s.hw)
    width = 2 * m.layers * m.attention_width
    attention = width * (new * new + 2 * new * cached) / s.hw.peak_flops(ATTENTION_MATH_BYTES)
    if s.hw.kind == "wafer":
        # Chunks stream through the pipeline: the busiest wafer sets the pace, then
        # the last chunk crosses the pipeline once.
        share = max(s.place.layers_per_stage) / m.layers
        alone = (gemm + attention) * share / k.eta_flop + k.wafer_pass
        return alone, alone
    tp, ep = s.place.tensor_parallel or 1, s.deployment.expert_parallel
    t_flop = (gemm + attention) / (tp * k.eta_flop)
    # Under attention data parallelism one GPU prefills a prompt with its own copy of the
    # attention weights (the split's extra bytes) and no all-reduce.
    split = s.attention
    kv_read = split.kv_copies * m.kv_bytes(cached + new)
    weights = step_weight_bytes(m, new, tp, ep) + split.extra_weight_bytes
    t_mem = (weights + kv_read) / (tp * s.hw.memory_bandwidth * k.eta_mem)
    act = new * m.hidden_size * k.activation_bytes
    t_comm = moe_collectives_seconds(
        m, s.hw, new, split.allreduce_group, ep, k.allreduce_base, k.activation_bytes
    )
    t_comm += pipeline_hops_seconds(s.hw, act, s.place.pipeline_stages)
    side = attention / (tp * k.eta_flop) + t_comm
    if isinstance(new, np.ndarray):
        return np.maximum(t_flop, t_mem) + t_comm, side
    return max(t_flop, t_mem) + t_comm, side


def _carried(s: _Served, batch, rate, tokens, side):
    """Seconds the other streams' prompts add to a stream's token (GPUs): ``rate``
    prompts of ``tokens`` tokens start per generated token of a stream, each costing
    ``side`` beyond its weight GEMMs (:func:`_prefill_parts`). Numbers or arrays.

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
    :func:`_rank_local_seconds`, :func:`simengine.parallel.attention_dp_idle`).
    """
    k = s.knobs
    spec = k.speculation
    per_step = spec.tokens_per_step if spec is not None else 1.0
    per_stream = spec.draft_tokens + 1 if spec is not None else 1
    stages = s.place.pipeline_stages
    if stages > 1:  # a micro-batch's step (parallel.pipeline_microbatch, for arrays too)
        if isinstance(batch, np.ndarray):
            batch = batch / np.minimum(batch, float(stages))
        else:
            batch = pipeline_microbatch(batch, stages)
    prompt = rate * tokens * per_step / stages  # prompt tokens per step
    chunk = kv.prompt_chunk(prompt, tokens, k.chunk_tokens)
    base = batch * per_stream
    grow = k.gemm.at(base + chunk) - k.gemm.at(base)
    carried = (prompt / chunk) * grow / per_step + rate * side / stages
    d = s.deployment
    if d.attention_data_parallel:
        # Attention DP: a prompt's rank-local work holds the other ranks at the next
        # all-to-all unless the server balances (parallel.attention_dp_idle). The unit a
        # rank takes is one prompt, or its piece when chunking splits it; a step's chunk
        # can hold several prompts.
        unit = np.minimum(chunk, tokens) if isinstance(chunk, np.ndarray) else min(chunk, tokens)
        idle = attention_dp_idle(
            prompt / unit, s.place.tensor_parallel or 1, d.attention_dp_balance
        )
        carried = carried + idle * _rank_local_seconds(s, unit) / per_step
    return carried


def _rank_local_seconds(s: _Served, tokens):
    """Seconds, at the replica's rate, of the work a prompt chunk of ``tokens`` tokens
    does on its own attention-DP rank: its non-expert GEMMs (attention projections,
    dense and shared-expert layers, at their tensor-core rate, moe.attention_peak) and
    its causal attention over itself (the 16-bit rate); compute-bound, as a prompt's
    GEMMs are."""
    m, k = s.model, s.knobs
    non_expert = m.active_split[0] / m.active_params_decode * m.active_params_prefill
    gemm = 2 * non_expert * tokens / attention_peak(m, s.hw)
    width = 2 * m.layers * m.attention_width
    attention = width * tokens * tokens / s.hw.peak_flops(ATTENTION_MATH_BYTES)
    return (gemm + attention) / ((s.place.tensor_parallel or 1) * k.eta_flop)


def _serve(
    model: ModelSpec,
    deployment: Deployment,
    params: EngineParams,
    *,
    batch: float | None = None,
    context: float = 1024.0,
    admit_context: float | None = None,
) -> _Served:
    # ``batch``: streams in flight per GPU replica (default: the tier's cap, i.e. full
    # load); ``context``: the context each co-batched stream holds (the workload's);
    # ``admit_context``: what each counts for when the KV cache admits streams (default:
    # ``context``, the paged rule; kv.admission_context).
    hw = resolve_device(deployment.device)
    software = deployment.software or params.software_for(hw.key)
    # Concurrency is planned for the typical co-scheduled context, not the worst case.
    ctx_ref = int(min(params.get("batch_context_tokens"), model.context_window))
    place = placement(
        model,
        hw.key,
        deployment.nodes,
        context_tokens=ctx_ref,
        nodes_per_replica=deployment.nodes_per_replica,
        streams_per_stage=params.get("wafer:streams_per_stage"),
    )
    if deployment.pipeline_parallel is not None:
        if hw.kind != "gpu":
            raise SimEngineError(
                f"pipeline_parallel applies to GPUs only; {hw.key} pipelines over its wafers"
            )
        tp, pp = split_pipeline(
            place.nodes_per_replica, deployment.pipeline_parallel, hw.max_tensor_parallel
        )
        place = dataclasses.replace(
            place,
            tensor_parallel=tp,
            pipeline_stages=pp,
            layers_per_stage=_split_layers(model.layers, pp),
        )
    served = _Served(model, hw, place, deployment, software, params, float(context), None)
    # Validate the software version now, with a clear message.
    served.p("t_layer" if hw.kind == "wafer" else "eta_mem")
    served = dataclasses.replace(
        served,
        transport_costs=tuple(served._transport_from_params(n) for n in _TRANSPORT_NAMES),
        attention=attention_split(
            model, place.tensor_parallel or 1, deployment.attention_data_parallel
        ),
    )
    served = dataclasses.replace(served, knobs=_knobs(served))
    b, cap = _batch_at(served, batch, context if admit_context is None else admit_context)
    return dataclasses.replace(
        served, batch=b, batch_cap=cap, token_line=_token_line(served, b, context)
    )


def token_speed(
    model: ModelSpec,
    deployment: Deployment,
    context_tokens: int = 1024,
    params: EngineParams = DEFAULT_PARAMS,
) -> float:
    """Client-observed decode tokens/s of one stream at ``context_tokens`` of context,
    on a replica at its full batch (the tier's cap)."""
    _positive_int(context_tokens, "context_tokens", 0)
    if context_tokens > model.context_window:
        raise SimEngineError(
            f"context_tokens {context_tokens} exceeds {model.name}'s window {model.context_window}"
        )
    # One stream at ``context_tokens`` among co-batched streams at the planning context
    # (predict() takes the co-batched context from the task instead).
    s = _serve(model, deployment, params, context=params.get("batch_context_tokens"))
    return 1.0 / _token_seconds(s, context_tokens)


def _span_nodes(start, tokens):
    # Simpson's rule over a decode span of ``tokens`` tokens from context ``start``: the
    # per-token time is affine in context (piecewise, through the roofline max), so it
    # is exact or very close. (nodes, weights); numbers or arrays.
    a, b = start, start + tokens - 1
    return (a, 0.5 * (a + b), b), (tokens / 6, 4 * tokens / 6, tokens / 6)


def _decode_span_seconds(s: _Served, start_context: int, tokens: int) -> float:
    if tokens <= 0:
        return 0.0
    nodes, weights = _span_nodes(start_context, tokens)
    return sum(w * _token_seconds(s, x) for x, w in zip(nodes, weights, strict=True))


def _split(total: int, parts: int) -> np.ndarray:
    # ``total`` split into ``parts`` whole shares, the larger ones first.
    base, extra = divmod(total, parts)
    shares = np.full(parts, float(base))
    shares[:extra] += 1.0
    return shares


def _chunks(s: _Served, tokens: int) -> int:
    return chunk_count(tokens, s.knobs.chunk_tokens)


def _with_prefills(line: _StepLine, extra: float) -> _StepLine:
    # The other streams' prefills (``extra`` per generated token, _interference) run in
    # the same steps as the decode, so they share a step with the host's work for it: a
    # token takes max(GPU step + extra, host) = max(GPU step, host - extra) + extra.
    if line.floor <= 0.0 or extra <= 0.0:
        return line
    return line._replace(floor=max(0.0, line.floor - extra))


def _interference(
    s: _Served, batch: float | None, side: float, prompt_tokens: float, mean_output: float
) -> float:
    # Chunked-prefill interference per generated token (none on wafers, or without a
    # batch): the other B - 1 streams each start a prompt of ``prompt_tokens`` tokens
    # (``side``: its attention and collectives, _prefill_parts) every ``mean_output``
    # tokens, and their chunks ride the decode steps (_carried). A pipeline's stages
    # prefill their own layers while the others work on other chunks or micro-batches,
    # so a prompt holds each stage for its share (its TTFT still crosses every stage:
    # _prefill_seconds is the whole chain).
    if s.hw.kind != "gpu" or batch is None or mean_output <= 0:
        return 0.0
    return _carried(s, batch, (batch - 1.0) / mean_output, prompt_tokens, side)


@dataclass(frozen=True, slots=True)
class _Turns:
    # A task's turns, whatever serves it (GPU chunk size ``chunk_tokens``; None: wafer).
    # Per turn k: ``new`` tokens prefilled after ``cached`` ones, ``ctx`` the context at
    # its first token, ``out`` its output tokens, ``chunks`` the decode steps its prefill
    # rides. The client per-token time is evaluated at ``token_x`` (first token, then
    # the decode span's Simpson nodes) with weights ``token_w``; ``tokens`` is the same
    # flattened and sorted (the producing time is its weighted sum), ``chunk_steps``
    # the contexts with weight chunks - 1 (server per-token time).
    new: np.ndarray
    cached: np.ndarray
    ctx: np.ndarray
    out: np.ndarray
    chunks: np.ndarray
    token_x: np.ndarray  # (turns, 4)
    token_w: np.ndarray  # (turns, 4)
    tokens: _Points
    chunk_steps: _Points
    first_ctx: float  # ctx[0] and chunks[0] as Python floats (the hot path reads them)
    first_chunks: float
    mean_new: float  # mean prompt tokens a turn prefills (chunked-prefill interference)


def _turn_table(task: TaskProfile, chunk_tokens: float | None) -> _Turns:
    # Context grows turn by turn: the first prompt, then each turn's tool output; each
    # turn adds its output. With prompt caching only the new input prefills.
    out = _split(task.output_tokens, task.turns)
    new_input = np.zeros(task.turns)
    new_input[0] = task.input_tokens
    if task.turns > 1:
        new_input[1:] = _split(task.tool_result_tokens, task.turns - 1)
    ctx = np.cumsum(new_input)
    ctx[1:] += np.cumsum(out[:-1])
    if task.prompt_caching:
        new, cached = new_input, ctx - new_input
    else:
        new, cached = ctx, np.zeros(task.turns)
    chunks = chunk_count(new, chunk_tokens)
    nodes, weights = _span_nodes(ctx + 1, out - 1)
    token_x = np.column_stack((ctx, *nodes))
    token_w = np.column_stack((np.ones(task.turns), *weights))
    return _Turns(
        new,
        cached,
        ctx,
        out,
        chunks,
        token_x,
        token_w,
        _Points.of(token_x, token_w),
        _Points.of(ctx, chunks - 1.0),
        float(ctx[0]),
        float(chunks[0]),
        float(new.sum()) / task.turns,
    )


@dataclass(frozen=True, slots=True)
class _ServiceProfile:
    # The load-free part of a prediction at one decode batch: what the hardware does.
    served: _Served  # the deployment (batch and line: see ``batch`` and ``line``)
    batch: float | None
    line: _StepLine  # server per-token time at this batch
    turns: _Turns
    extra: float  # chunked-prefill interference per generated token
    agent_term: float  # the agent's per-turn term
    producing: float  # time spent emitting tokens (first token + the rest)
    round_trip: float
    first_ttft: float  # the first turn's server TTFT
    generation: float  # sum of TTFT + decode + agent term over turns
    agent: float  # the agent's per-turn term, summed over turns
    mean_service: float  # mean turn time, the queue's service time
    replicas: int
    servers_per_replica: int  # streams one replica serves at once


# Caches (default parameters only), sized so that a catalog of 500 models x 4 tiers on
# 2 pools each x K task shapes never evicts at K up to ~250, whatever the loads:
# - the deployment resolved (placement, parameters) per (model, deployment): <= 8,192
#   entries (~2 kB each);
# - a task's turn table per (task, GPU chunk size or none): <= 4,096 entries (~3 kB for
#   8 turns, ~50 kB for 200);
# - a task's prefill totals per (model, pool, task): 3 floats, <= 262,144 entries
#   (~0.3 kB each with the key: <= ~80 MB at the bound).
# The decode batch (from the load) is no part of any key: the per-token line at a batch
# is a handful of operations and its sum over a task's turns is O(log turns)
# (_StepLine.weighted_sum), so an unseen load costs no cold profile.
@functools.lru_cache(maxsize=8192)
def _default_serve(model: ModelSpec, deployment: Deployment) -> _Served:
    return _serve(model, deployment, DEFAULT_PARAMS)


@functools.lru_cache(maxsize=4096)
def _default_turns(task: TaskProfile, chunk_tokens: float | None) -> _Turns:
    return _turn_table(task, chunk_tokens)


def _prefill_totals(s: _Served, turns: _Turns) -> tuple[float, float, float]:
    # (sum over turns, first turn) of the prefill time, and the sum of the part a decode
    # step cannot absorb when the prompt rides one (_prefill_parts).
    prefill, side = _prefill_parts(s, turns.new, turns.cached)
    return float(prefill.sum()), float(prefill[0]), float(side.sum())


@functools.lru_cache(maxsize=262_144)
def _default_prefill(
    model: ModelSpec,
    device: str,
    nodes: int,
    nodes_per_replica: int | None,
    software: str | None,
    task: TaskProfile,
    pipeline_parallel: int | None = None,
) -> tuple[float, float, float]:
    # Prefill does not depend on the tier, transport or speculative decoding: the
    # tiers of a pool share these.
    pool = Deployment(
        device,
        nodes,
        nodes_per_replica=nodes_per_replica,
        software=software,
        pipeline_parallel=pipeline_parallel,
    )
    s = _default_serve(model, pool)
    return _prefill_totals(s, _default_turns(task, s.knobs.chunk_tokens))


# What predict() reads of a service profile when it needs no per-turn breakdown: small
# floats and ints, no arrays (the turn table and the per-token line stay out of it).
_Totals = tuple  # (batch, producing, round_trip, first_ttft, generation, agent,
#                  mean_service, replicas, servers_per_replica)


def _totals(prof: _ServiceProfile) -> _Totals:
    return (
        prof.batch,
        prof.producing,
        prof.round_trip,
        prof.first_ttft,
        prof.generation,
        prof.agent,
        prof.mean_service,
        prof.replicas,
        prof.servers_per_replica,
    )


# The per-batch memo of the warm path (default parameters only): the totals of a
# (model, deployment, task, decode batch), so a warm predict is one lookup plus the
# queue formula. The batch is a whole number of streams up to the tier's cap, so the
# keys are finite; an entry is a 9-tuple of floats/ints plus the key (4 references to
# objects the other caches hold anyway) and the LRU link: 0.43 kB measured (tracemalloc,
# 60k entries), ~110 MB at the bound. 262,144 entries: 50 models x 4 tiers x 200 task shapes x 6 batches, or
# 500 models x 4 tiers x 130 (task, batch) pairs, before anything is evicted. A miss is
# the cold path above (per-token line at the batch, O(log turns) sums).
@functools.lru_cache(maxsize=262_144)
def _default_totals(
    model: ModelSpec, deployment: Deployment, task: TaskProfile, batch: float | None
) -> _Totals:
    return _totals(_service_profile(_default_serve(model, deployment), task, batch, True))


# What a prediction reports of a (model, deployment) served with the default parameters,
# read once (the router's warm path builds its result from this and the per-batch memo):
# (batch cap, model name, device key, tier, transport, software, wafers per replica,
# GPUs per replica or None, replicas or 0). Same bound as _default_serve.
@functools.lru_cache(maxsize=8192)
def _default_head(model: ModelSpec, deployment: Deployment) -> tuple:
    s = _default_serve(model, deployment)
    return (
        s.batch_cap,
        model.name,
        s.hw.key,
        deployment.tier,
        deployment.transport,
        s.software,
        s.place.wafers_per_replica,
        s.place.nodes_per_replica if s.hw.kind == "gpu" else None,
        s.place.replicas or 0,
    )


def _service_profile(
    s: _Served, task: TaskProfile, batch: float | None, default: bool
) -> _ServiceProfile:
    # ``s``: the deployment served without a load (_serve's defaults); ``batch``: the
    # decode batch asked for (None: the tier's cap). ``default``: the parameters are
    # DEFAULT_PARAMS (use the caches).
    # Co-batched streams are turns of the same kind of task: they hold its mean context.
    context_mean = task.input_tokens + (task.output_tokens + task.tool_result_tokens) / 2.0
    b, cap = _batch_at(s, batch, context_mean)
    line = _token_line(s, b, context_mean) if s.hw.kind == "gpu" else s.token_line
    if default:
        d = s.deployment
        turns = _default_turns(task, s.knobs.chunk_tokens)
        pre_sum, pre_first, side_sum = _default_prefill(
            s.model, d.device, d.nodes, d.nodes_per_replica, d.software, task, d.pipeline_parallel
        )
    else:
        turns = _turn_table(task, s.knobs.chunk_tokens)
        pre_sum, pre_first, side_sum = _prefill_totals(s, turns)
    round_trip, overhead, per_token = s.transport_costs
    n = task.turns
    agent_term = s.params.get("agent:turn_overhead") if n > 1 else 0.0
    extra = _interference(s, b, side_sum / n, turns.mean_new, task.output_tokens / n)
    line = _with_prefills(line, extra)
    producing = (
        line.weighted_sum(turns.tokens)
        + per_token * turns.tokens.w[-1]
        + extra * task.output_tokens
    )
    chunked = line.weighted_sum(turns.chunk_steps) if turns.chunk_steps.w[-1] else 0.0
    generation = n * overhead + pre_sum + producing + chunked + agent_term * n
    # TTFT: API overhead + prefill of the uncached tokens (its chunks ride decode steps
    # on a GPU) + the first token. Nothing of the agent's per-turn term.
    step0 = line.at(turns.first_ctx)
    first_ttft = overhead + pre_first + step0 + per_token + extra + (turns.first_chunks - 1) * step0
    if s.hw.kind == "gpu":
        per_replica = max(1, int(cap or 1))
    else:
        per_replica = s.place.streams_per_replica
    return _ServiceProfile(
        s,
        b,
        line,
        turns,
        extra,
        agent_term,
        producing,
        round_trip,
        first_ttft,
        generation,
        agent_term * n,
        generation / n,
        s.place.replicas or 1,
        per_replica,
    )


def _turn_rows(prof: _ServiceProfile) -> list[tuple[int, int, int, float, float, float]]:
    # Per turn (new, cached, output, ttft, decode, agent term), as array operations
    # over the turns (only a prediction's breakdown needs them).
    s = dataclasses.replace(prof.served, batch=prof.batch, token_line=prof.line)
    t, extra = prof.turns, prof.extra
    timed = t.token_w * _token_seconds(s, t.token_x)
    first = timed[:, 0] + extra
    decode = timed[:, 1:].sum(axis=1) + (t.out - 1) * extra
    ttft = (
        s.transport_costs[1]
        + _prefill_seconds(s, t.new, t.cached)
        + first
        + (t.chunks - 1) * _server_token_seconds(s, t.ctx)
    )
    return [
        (int(new), int(cached), int(out), tt, dd, prof.agent_term)
        for new, cached, out, tt, dd in zip(
            t.new.tolist(),
            t.cached.tolist(),
            t.out.tolist(),
            ttft.tolist(),
            decode.tolist(),
            strict=True,
        )
    ]


def predict(
    model: ModelSpec,
    deployment: Deployment,
    task: TaskProfile,
    load: float | None = None,
    params: EngineParams = DEFAULT_PARAMS,
    *,
    tier_mix: Mapping[str, float] | None = None,
    breakdown: bool = True,
) -> Prediction:
    """Predict time and speed of ``task`` for ``model`` served by ``deployment``.

    ``breakdown=False`` leaves ``turns`` empty: the router's hot path needs only totals.

    ``load`` is the utilisation rho in [0, 1) of the tier's share of the pool. On GPUs
    it sets the decode batch (continuous batching: rho x the tier's batch cap streams
    in flight per replica; without a load, the cap: the full-load speed the published
    tier figures describe). Requests are routed to replicas at random, so each replica
    is its own M/M/c queue (c = the streams it serves at once, arrivals = 1/replicas of
    the pool's); ``queue_seconds`` is the P90 of the task's total wait over its turns.
    ``tier_mix`` (load shares of tiers sharing the pool) switches to non-preemptive
    priority classes (TIER_PRIORITY order).

    Raises SimEngineError for load >= 1, a task that outgrows the context window,
    unknown device/tier/transport/software, or a model that does not fit the pool.
    """
    # A float in [0, 1) is valid as it is (the router's case); anything else is checked.
    if load is not None and not (type(load) is float and 0.0 <= load < 1.0):
        if isinstance(load, bool) or not isinstance(load, (int, float)) or not math.isfinite(load):
            raise SimEngineError(f"load must be a number in [0, 1), got {load!r}")
        if load < 0 or load >= 1:
            raise SimEngineError(
                f"load {load} is outside [0, 1): at or above capacity waits are unbounded"
            )
    # input_tokens <= the final context (TaskProfile checks its counts): one comparison
    # when the task fits, the two messages in their order when it does not.
    if task.input_tokens + task.output_tokens + task.tool_result_tokens > model.context_window:
        if task.input_tokens > model.context_window:
            raise SimEngineError(
                f"input_tokens {task.input_tokens} exceed {model.name}'s context window "
                f"{model.context_window}"
            )
        raise SimEngineError(
            f"the task's context grows to {task.final_context_tokens} tokens, above "
            f"{model.name}'s context window {model.context_window}"
        )
    default = params is DEFAULT_PARAMS
    if default and not breakdown:
        return _predict_totals(model, deployment, task, load, tier_mix)
    served = _default_serve(model, deployment) if default else _serve(model, deployment, params)
    batch = None
    if load is not None and served.batch_cap is not None:
        # Streams in flight per replica at this load (whole streams: cache-friendly).
        batch = float(max(1, round(load * served.batch_cap)))
    if breakdown or not default:
        prof = _service_profile(served, task, batch, default)
        totals = _totals(prof)
    else:
        prof = None
        totals = _default_totals(model, deployment, task, batch)
    (
        prof_batch,
        producing,
        round_trip,
        first_ttft,
        generation,
        agent,
        mean_service,
        replicas,
        servers,
    ) = totals
    s = served

    queue, saturated, wait_p, wait_mean = _queue_wait(
        load, servers, mean_service, task.turns, deployment.tier, tier_mix
    )
    capacity = servers * replicas

    turns: tuple[TurnBreakdown, ...] = ()
    if breakdown:
        per_turn = queue / task.turns
        turns = tuple(
            TurnBreakdown(k + 1, new, cached, out, per_turn, round_trip, ttft, decode, term)
            for k, (new, cached, out, ttft, decode, term) in enumerate(_turn_rows(prof))
        )
    transport = round_trip * task.turns
    return Prediction(
        model=model.name,
        device=s.hw.key,
        tier=deployment.tier,
        transport=deployment.transport,
        software=s.software,
        tokens_per_second=task.output_tokens / producing,
        ttft_seconds=round_trip + first_ttft,
        generation_seconds=generation,
        tool_seconds=float(task.tool_seconds),
        transport_seconds=transport,
        queue_seconds=queue,
        total_seconds=queue + transport + generation + task.tool_seconds,
        agent_seconds=agent,
        wafers=s.place.wafers_per_replica,
        gpus_per_replica=s.place.nodes_per_replica if s.hw.kind == "gpu" else None,
        replicas=s.place.replicas or 0,
        stream_capacity=capacity,
        batch=None if prof_batch is None else int(round(prof_batch)),
        load=load,
        queue_saturated=saturated,
        turns=turns,
        wait_probability=wait_p,
        wait_mean=wait_mean,
    )


def _predict_totals(
    model: ModelSpec,
    deployment: Deployment,
    task: TaskProfile,
    load: float | None,
    tier_mix: Mapping[str, float] | None,
) -> Prediction:
    # predict(breakdown=False) with the default parameters, its arguments checked: the
    # router's warm path, two lookups (the deployment's head, the per-batch memo) and
    # the queue terms; the same Prediction as the general path, field by field.
    cap, name, device, tier, transport, software, wafers, gpus, replicas = _default_head(
        model, deployment
    )
    batch = None
    if load is not None and cap is not None:
        # Streams in flight per replica at this load (whole streams: cache-friendly).
        batch = float(max(1, round(load * cap)))
    (
        prof_batch,
        producing,
        round_trip,
        first_ttft,
        generation,
        agent,
        mean_service,
        pool_replicas,
        servers,
    ) = _default_totals(model, deployment, task, batch)
    turns = task.turns
    queue, saturated, wait_p, wait_mean = _queue_wait(
        load, servers, mean_service, turns, tier, tier_mix
    )
    transport_seconds = round_trip * turns
    return Prediction(
        name,
        device,
        tier,
        transport,
        software,
        task.output_tokens / producing,
        round_trip + first_ttft,
        generation,
        float(task.tool_seconds),
        transport_seconds,
        queue,
        queue + transport_seconds + generation + task.tool_seconds,
        agent,
        wafers,
        gpus,
        replicas,
        servers * pool_replicas,
        None if prof_batch is None else int(round(prof_batch)),
        load,
        saturated,
        (),
        wait_p,
        wait_mean,
    )


def _queue_wait(
    load: float | None,
    servers: int,
    mean_service: float,
    turns: int,
    tier: str,
    tier_mix: Mapping[str, float] | None,
) -> tuple[float, bool, float, float]:
    # (P90 of the task's total wait over its turns, saturated, P(a visit waits), mean
    # wait of a visit that waits). One M/M/c per replica (random routing splits the
    # Poisson arrivals); the queue terms are memoised.
    if load is None or load <= 0:
        return 0.0, False, 0.0, 0.0
    mu = 1.0 / mean_service
    rate = load * servers * mu  # per replica
    if tier_mix:
        prob, cond_mean, saturated = _priority_wait(tier, tier_mix, servers, rate, mu)
        if saturated:
            return math.inf, True, 1.0, math.inf
    else:
        prob = erlang_c(servers, load * servers)
        cond_mean = 1.0 / (servers * mu - rate)
    return total_wait_quantile(prob, cond_mean, turns), False, prob, cond_mean


def _priority_wait(
    tier: str, tier_mix: Mapping[str, float], servers: int, total_rate: float, mu: float
) -> tuple[float, float, bool]:
    # (P(wait), mean wait of those who wait, saturated) of the tier's priority class.
    if tier not in tier_mix:
        raise SimEngineError(f"tier_mix must include the deployment's tier {tier!r}")
    unknown = set(tier_mix) - set(TIER_PRIORITY)
    if unknown:
        raise SimEngineError(f"unknown tiers in tier_mix: {sorted(unknown)}")
    shares = {t: float(v) for t, v in tier_mix.items()}
    if any(v < 0 or not math.isfinite(v) for v in shares.values()) or sum(shares.values()) <= 0:
        raise SimEngineError(f"tier_mix shares must be >= 0 and sum > 0, got {dict(tier_mix)}")
    norm = sum(shares.values())
    classes = sorted({TIER_PRIORITY[t] for t in shares})
    rates = [
        total_rate * sum(v for t, v in shares.items() if TIER_PRIORITY[t] == c) / norm
        for c in classes
    ]
    est = wait_estimate(servers, rates, mu)
    mine = est.classes[classes.index(TIER_PRIORITY[tier])] if est.classes else None
    if mine is None:  # only one class present
        mean, sat = est.mean_wait, est.saturated
    else:
        mean, sat = mine.mean_wait, mine.saturated
    if sat:
        return 1.0, math.inf, True
    if est.prob_wait <= 0 or mean <= 0:
        return 0.0, 0.0, False
    return est.prob_wait, mean / est.prob_wait, False


# A software date: "YYYY-MM" or "YYYY-MM-DD" (a figure's publication date).
_SOFTWARE_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")


def _era_key(version: str) -> tuple[int, ...] | None:
    # A calibrated version "YYYY.MM" (or a date "YYYY-MM[-DD]") as (year, month), for
    # comparing eras by date, not as strings ("2026-08" < "2026.08" as strings).
    m = re.match(r"^(\d{4})[.-](\d{2})(?:[.-]\d{2})?$", version)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def software_era(params: EngineParams, device: str, software: str | None) -> tuple[str | None, str]:
    """(calibrated software version, how it was chosen) for a device.

    ``software`` None: the device's current version. A calibrated version: itself. A
    date "YYYY-MM" / "YYYY-MM-DD": the era in effect at that date, i.e. the latest
    calibrated version released on or before it; a date before every calibrated era
    resolves to the earliest one, and the note says so. Any other version string: the
    latest calibrated version not newer than it (e.g. "2024.11" -> the 2024.10 fit), or
    itself when none is older (``_serve`` then names the missing version).
    """
    hw = resolve_device(device)
    if software is None:
        version = params.software_for(hw.key)
        return version, f"{version} (current {hw.key} software)"
    probe = "t_layer" if hw.kind == "wafer" else "eta_mem"
    known = sorted(
        {
            k.split("@", 1)[1].split(":", 1)[0]
            for k in params.values
            if k.endswith(f":{probe}") and k.split("@", 1)[0] in (hw.key, hw.kind)
        },
        key=lambda v: (_era_key(v) or (0, 0), v),
    )
    if software in known:
        return software, software
    date = _SOFTWARE_DATE.match(software)
    key = _era_key(software)
    if date is not None and not (1 <= key[1] <= 12):
        raise SimEngineError(f"software date {software!r} has no month {key[1]}")
    earlier = [v for v in known if key is not None and (_era_key(v) or (0, 0)) <= key]
    if earlier:
        return earlier[-1], f"{earlier[-1]} (the {hw.key} era in effect at {software})"
    if date is not None and known:
        return known[0], (
            f"{known[0]} (earliest calibrated {hw.key} era; {software} predates it, "
            "no earlier fit exists)"
        )
    return software, software


def _resolve_software(params: EngineParams, deployment: Deployment) -> Deployment:
    # A figure dated in a software era the parameters do not name uses the era in
    # effect at that date (software_era).
    if deployment.software is None:
        return deployment
    version, _ = software_era(params, deployment.device, deployment.software)
    if version == deployment.software:
        return deployment
    return dataclasses.replace(deployment, software=version)


def serving_point(
    model: ModelSpec,
    deployment: Deployment,
    *,
    concurrency: int | None = None,
    input_tokens: int,
    output_tokens: int,
    output_tokens_cv: float = 0.0,
    speculative: bool | Speculation = False,
    with_transport: bool = False,
    rate_per_second: float | None = None,
    max_batch_size: int | None = None,
    replicas: int = 1,
    disaggregated_prefill: bool = False,
    offline_requests: int | None = None,
    max_output_tokens: int | None = None,
    server: str | None = None,
    kv_admission: str | None = None,
    params: EngineParams = DEFAULT_PARAMS,
) -> dict[str, Any]:
    """``replicas`` identical replicas serving (input, output) requests.

    Closed loop (``concurrency`` streams per replica, default 1; NIM / vLLM /
    TensorRT-LLM benchmarks): the decode batch is min(concurrency, ``max_batch_size``,
    what the paged KV cache holds); streams beyond the batch wait for a slot (their
    wait is in TTFT). Open loop (``rate_per_second`` Poisson arrivals for the whole
    deployment, MLPerf's server scenario; split evenly over replicas): the batch is
    what the rate sustains (Little's law at the service time of that batch), and TTFT
    adds the queueing (:func:`_open_loop`). ``max_batch_size`` None: the production
    default of ``server`` for the GPU's memory (:func:`simengine.kv.default_max_batch_size`).
    ``kv_admission`` (default: the ``server``'s, :func:`simengine.kv.kv_admission`):
    "paged" admits a stream while the tokens held fit the cache; "reserved"
    (TensorRT-LLM's GUARANTEED_NO_EVICT) only when its whole input + output fits, so the
    cache holds fewer streams (:func:`simengine.kv.admission_context`).
    ``output_tokens_cv`` (std / mean of the output lengths; default 0, fixed lengths)
    raises the context the streams in flight hold to the token-weighted mean
    (:func:`simengine.kv.mean_context`): their KV, hence the batch the cache holds, and
    their attention per step.

    A finite Offline run (``offline_requests`` N, MLPerf's Offline scenario,
    ``trtllm-bench``): N requests per replica queued at once; the slots are
    min(``concurrency`` if given, ``max_batch_size``, what the paged KV cache holds), the
    outputs N lengths of the stated mean and spread (capped at ``max_output_tokens``),
    and the throughput is the run's tokens / its length, the drain at the end included
    (:mod:`simengine.offline`). TTFT is then the mean wait for a slot + the prefill and
    first step; ``batch`` the mean over the run's steps.

    The figures a serving benchmark reports: TTFT, time per output token, per-stream
    tokens/s and the throughput of all replicas. ``with_transport`` adds the API round
    trip and per-token overheads (a client-side measurement).

    ``disaggregated_prefill`` (GPUs): prompts are prefilled on other GPUs of the same
    kind and their KV shipped to the replica, which only decodes (prefill-decode
    disaggregation: DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al., ISCA
    2024; SGLang and NVIDIA Dynamo serve this way). Decode steps then carry no prefill
    (no chunked-prefill interference) and TTFT is the prefill on its own GPUs + the KV
    transfer over the scale-out network + the first decode step; the throughput is the
    decode replicas'.
    """
    if offline_requests is not None:
        _positive_int(offline_requests, "offline_requests", 1)
        if rate_per_second is not None:
            raise SimEngineError(
                "give offline_requests (a finite run) or rate_per_second, not both"
            )
        if max_output_tokens is not None:
            _positive_int(max_output_tokens, "max_output_tokens", output_tokens)
        # Every request is queued at once; concurrency (if given) is the harness's cap.
        concurrency = (
            offline_requests if concurrency is None else min(concurrency, offline_requests)
        )
        if deployment.attention_data_parallel and attention_dp_in_phase(
            offline_requests, output_tokens_cv
        ):
            # Identical requests keep the ranks in phase: as a balancing server does.
            deployment = dataclasses.replace(deployment, attention_dp_balance=True)
    if rate_per_second is None:
        concurrency = _positive_int(1 if concurrency is None else concurrency, "concurrency", 1)
    else:
        if concurrency is not None:
            raise SimEngineError("give concurrency (closed loop) or rate_per_second, not both")
        if (
            isinstance(rate_per_second, bool)
            or not isinstance(rate_per_second, (int, float))
            or not math.isfinite(rate_per_second)
            or rate_per_second <= 0
        ):
            raise SimEngineError(f"rate_per_second must be a number > 0, got {rate_per_second!r}")
    _positive_int(replicas, "replicas", 1)
    admission = kv.kv_admission(server, kv_admission)
    if max_batch_size is None:
        max_batch = kv.default_max_batch_size(
            resolve_device(deployment.device).memory_bytes, server
        )
    else:
        max_batch = max_batch_size
    _positive_int(max_batch, "max_batch_size", 1)
    _, era = software_era(params, deployment.device, deployment.software)
    deployment = _resolve_software(params, deployment)
    if speculative != deployment.speculative:
        deployment = dataclasses.replace(deployment, speculative=speculative)
    # The server's cap on sequences in a step: the benchmark's concurrency (closed loop)
    # and max_batch_size; _serve limits it to what the paged KV cache holds.
    if deployment.attention_data_parallel:
        max_batch = attention_dp_batch_cap(max_batch, deployment.nodes_per_replica or 1)
    limit = max_batch if concurrency is None else min(concurrency, max_batch)
    p = params.with_values({f"tier:{deployment.tier}:batch": float(limit)})
    output_tokens_cv = kv.output_cv(output_tokens_cv)
    # The streams in flight hold the token-weighted mean context (kv.mean_context).
    context = kv.mean_context(input_tokens, output_tokens, output_tokens_cv)
    # The cache admits streams by what each counts for under the server's rule: the
    # tokens held (paged), or the whole input + output (reserved: fewer streams).
    admit = kv.admission_context(admission, input_tokens, output_tokens, output_tokens_cv)
    s = _serve(model, deployment, p, context=context, admit_context=admit)
    gpu = s.hw.kind == "gpu"
    # Streams one replica decodes at once: the GPU batch cap, or the wafer's slots.
    slots = s.batch_cap if gpu else float(s.place.streams_per_replica)
    prefill, side = _prefill_parts(s, input_tokens, 0)
    chunks = _chunks(s, input_tokens)
    if disaggregated_prefill:
        if not gpu:
            raise SimEngineError(f"disaggregated_prefill applies to GPUs only, not {s.hw.key}")
        kv_transfer = model.kv_bytes(input_tokens) / s.hw.scaleout_bandwidth
        prefill, chunks = prefill + kv_transfer, 1
    per_token, ttft_extra = 0.0, 0.0
    if with_transport:
        per_token = s.transport("per_token")
        ttft_extra = s.transport("ttft_overhead") + s.transport("round_trip")

    elsewhere = prefill if disaggregated_prefill else 0.0

    def at(batch: float) -> tuple[float, float, float]:
        # (TTFT without queueing, time per output token, the time a request holds a
        # decode slot: from its prefill on, or from its KV's arrival when disaggregated).
        line = _token_line(s, batch, context) if gpu else s.token_line
        decoding_with_prefills = gpu and not disaggregated_prefill
        extra = _interference(
            s, batch if decoding_with_prefills else None, side, input_tokens, output_tokens
        )
        step = _with_prefills(line, extra).at(context)
        tpot = step + per_token + extra
        ttft = prefill + chunks * step + ttft_extra
        return ttft, tpot, ttft - elsewhere + (output_tokens - 1) * tpot

    capacity = None
    run = None
    if offline_requests is not None:
        run = _offline_run(
            s, offline_requests, input_tokens, output_tokens, output_tokens_cv,
            max_output_tokens, int(min(float(concurrency), slots)), per_token,
            0.0 if disaggregated_prefill else prefill, side,
        )  # fmt: skip
        streams, tpot, queue = run.mean_batch, run.step_seconds, run.mean_wait
        ttft = prefill + chunks * tpot + ttft_extra
        throughput = replicas * run.throughput
    elif rate_per_second is None:
        streams = min(float(concurrency), slots)
        ttft, tpot, held = at(streams)
        # Closed loop: the concurrency - streams clients beyond the batch wait, each
        # request cycle, for a slot (by Little's law: concurrency / (streams / held)
        # requests/s - the request's own time).
        queue = max(0.0, concurrency * held / streams - (held + elsewhere))
        throughput = replicas * streams * output_tokens / held
    else:
        streams, ttft, tpot, queue, capacity = _open_loop(
            at, rate_per_second, replicas, slots,
            prefill if gpu and not disaggregated_prefill else 0.0,
        )  # fmt: skip
        throughput = rate_per_second * output_tokens
    return {
        "ttft_seconds": ttft + queue,
        "time_per_output_token_seconds": tpot,
        "tokens_per_second": 1.0 / tpot,
        "throughput_tokens_per_second": throughput,
        "queue_seconds": queue,
        "batch": streams,
        # The most streams a replica decodes at once: GPUs, min(the server's cap, what the
        # KV cache holds under its admission rule); wafers, the pipeline's slots.
        "batch_cap": slots,
        "kv_admission": admission if gpu else None,
        "capacity_requests_per_second": capacity,
        "replicas": replicas,
        "devices": s.place.nodes_per_replica,
        "tensor_parallel": s.place.tensor_parallel or 1,
        "pipeline_stages": s.place.pipeline_stages,
        "software": s.software,
        "software_era": era,
        "run_seconds": None if run is None else run.seconds,
        "drain_seconds": None if run is None else run.drain_seconds,
        **{
            f"completion_p{round(q * 100)}_seconds": None if run is None else v
            for q, v in zip(
                offline.COMPLETION_QUANTILES,
                (None,) * 3 if run is None else run.completion_quantiles,
                strict=True,
            )
        },
    }


def _offline_run(
    s: _Served,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    output_cv: float,
    max_output: int | None,
    slots: int,
    per_token: float,
    prefill: float,
    side: float = 0.0,
) -> offline.OfflineRun:
    # A finite run on one replica (simengine.offline): the step at each batch and mean
    # context is the served deployment's, the same line the steady state reads.
    gpu = s.hw.kind == "gpu"
    # Without speculation a GPU step is proportional to the streams' common context
    # plus a constant, both set by the batch alone (the co-batched streams' KV and
    # attention scale with the context; weights, GEMMs and collectives do not): one
    # (slope, constant) per batch size, not one step line per completion event.
    affine = gpu and s.knobs.speculation is None

    def step(batch: float, context: float) -> float:
        # Every stream in flight holds ``context`` tokens on average (GPUs: the batch's
        # KV and attention; a wafer's step depends on neither). The GPU's step: the
        # host's work for it is ``host_many``'s.
        line = _token_line(s, batch, context) if gpu else s.token_line
        return line._replace(floor=0.0).at(context) + per_token

    per_size: list = [None, None]  # the last batch array asked for, its coefficients

    def coefficients(batch: np.ndarray) -> np.ndarray:
        # (slope, constant, host floor) of the step at each batch size the run goes
        # through, once per size (step_many and host_many ask for the same batches).
        if per_size[0] is not batch:
            sizes, which = np.unique(batch, return_inverse=True)
            coef = np.empty((len(sizes), 3))
            for i, b in enumerate(sizes.tolist()):
                line = _token_line(s, b, 1.0)
                coef[i] = (max(line.mem0 + line.mem1, line.flop0 + line.flop1), line.fixed,
                           line.floor)  # fmt: skip
            per_size[:] = batch, coef[which]
        return per_size[1]

    def step_many(batch: np.ndarray, context: np.ndarray) -> np.ndarray:
        coef = coefficients(batch)
        return coef[:, 0] * context + coef[:, 1] + per_token

    def host_many(batch: np.ndarray) -> np.ndarray:
        # The host's work per step at each batch (simengine.host; the context does not
        # matter).
        return coefficients(batch)[:, 2]

    outputs = offline.output_lengths(output_tokens, output_cv, requests, max_output)
    # Chunked prefill: the prompts admitted at an event ride the next interval's decode
    # steps (_carried: what the steps cannot absorb of them; a pipeline stage carries its
    # share); wafers and disaggregated prefill (``prefill`` 0) take none from the steps.
    carry = None
    if gpu and prefill > 0:
        prompt = float(input_tokens)

        def carry(active: np.ndarray, prompts: np.ndarray, steps: np.ndarray) -> np.ndarray:
            return steps * _carried(s, active, prompts / steps, prompt, side)

    return offline.simulate(step, outputs, input_tokens, max(1, slots),
                            step_many=step_many if affine else None,
                            host_many=host_many if gpu and s.knobs.host_per_stream else None,
                            carry_many=carry)  # fmt: skip


def _open_loop(
    at, total_rate: float, replicas: int, slots: float, prefill: float
) -> tuple[float, float, float, float, float]:
    """Poisson arrivals of ``total_rate`` requests/s (MLPerf's server scenario) split
    evenly over ``replicas``: one replica sees rate = total_rate / replicas.

    ``at(batch)`` gives (TTFT, time per output token, request time S) at a decode batch.
    Sustained batch (Little's law): the mean number of requests in service N solves
    N = rate x S(max(1, N)) (a fixed point; S grows with N), found by bisection on
    [0, c] with c = the replica's slots (GPU: min(max_batch_size, what paged KV holds);
    wafer: its pipeline slots). Capacity = min(c / S(c), 1 / prefill): every slot busy,
    or the GPU busy prefilling alone. Queueing in TTFT (means): waiting for a slot, an
    M/D/c queue (Allen-Cunneen: Erlang C x (1 + 0) / 2 for Poisson arrivals and a fixed
    request size) with c slots and service time S(c): a request waits only while all c
    slots are held, and then every holder's request time is the full batch's (with S(N)
    a compute-bound replica, whose throughput N / S(N) has levelled off, would keep N
    well below c at a rate just under capacity and hardly queue); and, on GPUs, waiting
    for the prefill (chunked prefill takes waiting prompts first come, first served
    within the step's token budget): M/D/1 on the prefill time (Pollaczek-Khinchine).
    Returns (batch, TTFT at the batch, TPOT, queue seconds, capacity of all replicas
    in requests/s). SimEngineError naming the capacity when the rate reaches it.
    """
    rate = total_rate / replicas
    c = max(1, math.floor(slots))
    full = at(float(c))[2]
    capacity = c / full
    if prefill > 0:
        capacity = min(capacity, 1.0 / prefill)
    if rate >= capacity:
        raise SimEngineError(
            f"rate_per_second {total_rate:.4g} is at or above capacity: the deployment serves "
            f"at most {capacity * replicas:.4g} requests/s ({replicas} replica(s) x "
            f"{capacity:.4g}, {c} slots each)"
        )
    lo, hi = 0.0, float(c)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if rate * at(max(1.0, mid))[2] > mid:
            lo = mid
        else:
            hi = mid
    n = hi
    batch = max(1.0, n)
    ttft, tpot, _ = at(batch)
    slot_wait = wait_estimate(c, rate, 1.0 / full, 1.0, 0.0).mean_wait
    prefill_wait = wait_estimate(1, rate, 1.0 / prefill, 1.0, 0.0).mean_wait if prefill > 0 else 0.0
    return n, ttft, tpot, slot_wait + prefill_wait, capacity * replicas

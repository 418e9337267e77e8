"""Performance model: a served deployment, per-token decode, TTFT, transport, agent tasks.

By concern: :mod:`simengine.served` (a deployment and a deployment resolved against a
model and parameters), :mod:`simengine.step` (the GPU decode step as an operator-level
roofline line in the context), :mod:`simengine.prefill` (prefill, and chunked prefill
riding the decode steps), :mod:`simengine.wafer` (a token's pass through a wafer
pipeline), :mod:`simengine.kv` (KV capacity, batch caps, chunks), :mod:`simengine.moe`
(experts, their weight traffic and all-to-all), :mod:`simengine.parallel`
(tensor-parallel all-reduces, pipeline and wafer hops, attention data parallelism),
:mod:`simengine.speculative` (drafting and acceptance), :mod:`simengine.host` (the
host's work per step), :mod:`simengine.eras` (software eras), :mod:`simengine.serving`
(``serving_point``: a fleet's closed-loop, open-loop and finite-run figures). This
module serves a deployment (``_serve``) and predicts (``predict``, ``token_speed``, the
memoised service profiles the router reads).

GPUs follow the roofline (bytes / (BW eta_mem) vs FLOPs / (F eta_flop), whichever
binds, per kernel family) plus all-reduce collectives and a fixed per-step overhead.
Serving is continuous batching: the decode batch is the number of streams in flight on
the replica (the load times the tier's batch cap; the cap alone when no load is given;
the cap limited by what the paged KV cache holds), co-batched streams hold the
workload's own context (pipeline stages decode micro-batches of it), and every other
stream's prompt rides the decode steps in chunks (:func:`simengine.prefill.carried`),
so per-stream speed falls and replica throughput rises as concurrency grows. Wafers are
latency-bound (:mod:`simengine.wafer`). Speculative decoding: a verify step of k + 1
tokens per stream plus the drafter's passes, over the expected tokens per step.

An agent task is a sequence of turns; per turn: wait + transport round trip + TTFT
(server overhead + prefill of the uncached tokens + first step) + decode + the agent's
per-turn term (``agent:turn_overhead``: server-side work of an agent turn beyond TTFT
and decode - re-prefill of context evicted during the tool call, harness
orchestration); plus the tool time. Context grows turn by turn; with prompt caching
only new tokens prefill.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import SimEngineError
from .host import (
    eager_launch_param,
    eager_launch_seconds,
    graph_batch,
    host_param,
    host_step_seconds,
)
from .kv import batch_at, capacity_tokens, chunk_count
from .model import HashOnce, ModelSpec, hash_once
from .moe import (
    compute_peak,
    expert_peak,
    gemm_line,
)
from .parallel import (
    attention_split,
    latent_decode_padding,
    pipeline_microbatch,
    split_pipeline,
)
from .params import DEFAULT_PARAMS, EngineParams
from .placement import _split_layers, placement, resolve_device
from .prefill import (
    interference,
    prefill_parts,
    prefill_seconds,
    request_steps,
    with_prefills,
)
from .queueing import TIER_PRIORITY, erlang_c, total_wait_quantile, wait_estimate
from .served import TRANSPORT_NAMES, Deployment, Knobs, Served, positive_int
from .speculative import (
    PRODUCTION_METHOD,
    Speculation,
    drafter_shape,
    gpu_drafter_seconds,
    method_default,
)
from .step import ATTENTION_MATH_BYTES, Points, StepLine, decode_kernels, decode_step_line
from .wafer import pass_seconds, speculative_seconds

# Anything above this is a typo or an attack, not a task (larger than any context window).
MAX_TOKENS = 50_000_000


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
            positive_int(self.input_tokens, "input_tokens", 1)
            positive_int(self.output_tokens, "output_tokens", 1)
            positive_int(self.turns, "turns", 1)
            positive_int(self.tool_result_tokens, "tool_result_tokens", 0)
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


def _speculation(s: Served) -> Speculation | None:
    spec = s.deployment.speculative
    if spec is True:
        return method_default(PRODUCTION_METHOD[s.hw.kind])
    return spec or None


def _knobs(s: Served) -> Knobs:
    # Looked up in the order the formulas first need them (the first missing one is
    # the error).
    get, gpu = s.params.get, s.hw.kind == "gpu"
    spec = _speculation(s)
    if gpu:
        eta_flop = s.p("eta_flop")
        eta_mem = s.p("eta_mem")
        eta_expert = _expert_efficiency(s)
        widened = _widened_efficiency(s)
        tp = s.place.tensor_parallel or 1
        gemm = gemm_line(
            s.model,
            tp,
            s.deployment.expert_parallel,
            s.attention.extra_weight_bytes,
            tp * s.hw.memory_bandwidth * eta_mem,
            tp * compute_peak(s.model, s.hw, eta_expert, widened) * eta_flop,
            tp * expert_peak(s.model, s.hw, eta_expert, widened) * eta_flop,
            s.deployment.experts_balanced,
        )
        return Knobs(
            eta_mem=eta_mem,
            eta_flop=eta_flop,
            eta_attention=_decode_attention_efficiency(s, eta_flop),
            allreduce_base=get("gpu:allreduce_base"),
            activation_bytes=get("activation_bytes"),
            # Every kernel of the step costs its launch-to-finish latency (step.py).
            step_overhead=get("gpu:kernel_overhead") * decode_kernels(s.model),
            speculation=spec,
            tier_batch=get(f"tier:{s.deployment.tier}:batch"),
            chunk_tokens=s.deployment.prefill_budget(s.params),
            wafer_pass=0.0,
            wafer_fixed=0.0,
            host_per_stream=_host_per_stream(s),
            gemm=gemm,
            expert_efficiency=eta_expert,
            widened_efficiency=widened,
            eager_launch=_eager_launch(s),
            host_serial=not s.deployment.overlap_scheduler,
            graph_sizes=s.deployment.cuda_graph_batch_sizes if s.deployment.cuda_graphs else None,
            graph_ranks=(tp if s.deployment.attention_data_parallel else 1),
            eager_step=_eager_launch(s, eager=True),
        )
    verify_extra, draft = speculative_seconds(s, spec)
    return Knobs(
        eta_mem=0.0,
        eta_flop=get("wafer:eta_flop"),
        eta_attention=0.0,
        allreduce_base=0.0,
        activation_bytes=get("activation_bytes"),
        step_overhead=0.0,
        speculation=spec,
        tier_batch=None,
        chunk_tokens=None,
        wafer_pass=pass_seconds(s),
        wafer_fixed=get("wafer:t_fixed"),
        wafer_verify_extra=verify_extra,
        wafer_draft=draft,
    )


def _expert_efficiency(s: Served) -> float:
    # The routed experts' GEMMs' share of their tensor-core rate relative to a dense
    # GEMM's (params gpu:eta_expert); 1 for a dense model (no expert GEMMs).
    return s.p("eta_expert") if s.model.is_moe else 1.0


def _widened_efficiency(s: Served) -> float:
    # The share of their tensor-core rate GEMMs of widened weights keep (params
    # gpu:eta_widened, HardwareProfile.mma_peak); 1 (not looked up) when no weight of the
    # model is widened on this device.
    m = s.model
    if s.hw.widens(m.attention_bytes_per_param) or (
        m.is_moe and s.hw.widens(m.expert_bytes_per_param)
    ):
        return s.p("eta_widened")
    return 1.0


def _host_per_stream(s: Served) -> float:
    # The host's work per step for each stream of a replica's batch (simengine.host): one
    # scheduler per attention rank under attention data parallelism, each over its own
    # streams; else one over the replica's whole batch.
    if not s.hw.host:
        return 0.0
    ranks = (s.place.tensor_parallel or 1) if s.deployment.attention_data_parallel else 1
    return host_step_seconds(s.params.get(host_param(s.hw.host)), 1.0, ranks)


def _eager_launch(s: Served, eager: bool = False) -> float:
    # The host's launches a decode step waits for without CUDA graphs (simengine.host):
    # every kernel of the step, one eager PyTorch call each. ``eager``: a step that runs
    # eager whatever the deployment's flag (a batch above its largest captured graph).
    if not s.hw.host:
        return 0.0
    # Each counted kernel is gpu:eager_ops_per_kernel PyTorch calls when run eager.
    per_kernel = s.params.get(eager_launch_param(s.hw.host)) * s.params.get(
        "gpu:eager_ops_per_kernel"
    )
    graphs = s.deployment.cuda_graphs and not eager
    return eager_launch_seconds(per_kernel, decode_kernels(s.model), graphs)


def _graph_step(s: Served, b):
    # (the micro-batch a decode step of ``b`` streams computes, its eager launches): each
    # scheduler pads its share of a pipeline stage's micro-batch to its next captured
    # graph, or runs eager above the largest (simengine.host.graph_batch). Numbers or
    # arrays.
    k = s.knobs
    mb = pipeline_microbatch(b, s.place.pipeline_stages)
    if k.graph_sizes is None:
        return mb, k.eager_launch
    ranks = k.graph_ranks
    per, eager = graph_batch(k.graph_sizes, mb / ranks)
    if isinstance(eager, np.ndarray):
        return per * ranks, np.where(eager, k.eager_step, 0.0)
    return per * ranks, (k.eager_step if eager else 0.0)


def _decode_attention_efficiency(s: Served, eta_flop: float) -> float:
    # Decode attention's efficiency where one is calibrated for the device's generation
    # and software era (params: eta_decode_attention), else the GEMMs' eta_flop.
    found = s.params.find_hardware(
        s.hw.key, s.hw.kind, s.software, "eta_decode_attention", s.hw.generation
    )
    return eta_flop if found is None else found


def _server_token_seconds(s: Served, context):
    """Server-side time per generated token for a stream at ``context`` tokens (a number
    or an array)."""
    return s.token_line.at(context)


def _step_tokens(s: Served, mb: float) -> float:
    # The tokens a decode step's micro-batch ``mb`` (the graph's, _graph_step) multiplies
    # through the weights: each stream's draft tokens and its own when speculating.
    spec = s.knobs.speculation
    per_stream = 1 if spec is None else spec.draft_tokens + 1
    return mb * per_stream


def _decode_line(s: Served, b: float, other_context: float, mb) -> StepLine:
    # One decode step of ``b`` streams of a served GPU deployment, each other stream
    # holding ``other_context`` tokens (simengine.step): its kernels, before the launch
    # overhead, the drafter's passes and the host's work. ``mb``: the micro-batch the
    # step's captured graph computes (_graph_step).
    k = s.knobs
    spec = k.speculation
    stages = s.place.pipeline_stages
    return decode_step_line(
        s.model,
        s.hw,
        # Pipeline stages decode micro-batches (simengine.parallel.pipeline_microbatch);
        # the GEMMs and collectives compute the captured graph's padded batch.
        batch=pipeline_microbatch(b, stages),
        gemm_batch=mb,
        other_context_tokens=other_context,
        tensor_parallel=s.place.tensor_parallel or 1,
        pipeline_stages=stages,
        eta_mem=k.eta_mem,
        eta_flop=k.eta_flop,
        allreduce_base=k.allreduce_base,
        activation_bytes=k.activation_bytes,
        tokens_per_stream=1 if spec is None else spec.draft_tokens + 1,
        expert_parallel=s.deployment.expert_parallel,
        experts_balanced=s.deployment.experts_balanced,
        split=s.attention,
        eta_attention=k.eta_attention,
        gemm=k.gemm,
    )


# The parts of one stream's time per output token (token_parts), in the order a step
# runs them. GPUs: the decode step's attention kernels (the streams' KV read or its
# FLOPs, whichever binds), weight GEMMs (the weights the batch touches read once, or
# their FLOPs), collectives (tensor-parallel all-reduces, expert-parallel all-to-alls,
# pipeline hops), the kernels' launch-to-finish overhead, the drafter's passes
# (speculative decoding), the host's work beyond the GPU step when it binds, the other
# streams' prompt chunks riding the step (chunked prefill), the transport. Wafers: the
# weights streamed from SRAM, the KV read, the pipeline's pass, the speculative verify
# extra and drafter passes, the transport.
GPU_TOKEN_PARTS = ("attention", "weight_gemms", "collectives", "kernel_launches", "drafting",
                   "host_beyond_gpu", "prefill_riding", "transport")  # fmt: skip
WAFER_TOKEN_PARTS = ("weights", "kv_read", "pipeline_pass", "speculation", "transport")


def token_parts(
    s: Served, batch: float | None, context: float, extra: float = 0.0, per_token: float = 0.0
) -> tuple[dict[str, float], dict[str, str]]:
    """Where one stream's time per output token goes, at a decode batch of ``batch``
    streams each at ``context`` tokens: (seconds by part, which resource binds).

    The same line the prediction reads (:func:`_token_line`), cut into its terms
    (:data:`GPU_TOKEN_PARTS` / :data:`WAFER_TOKEN_PARTS`), each per generated token (a
    speculative step's parts over the tokens it yields): they sum to the time per output
    token. ``extra``: the other streams' prefills riding each token (chunked prefill,
    :func:`simengine.prefill.interference`); ``per_token``: the transport's. The bounds
    say which side of each roofline binds: GPUs' ``attention`` (``kv_read`` or
    ``flops``), ``weight_gemms`` (``read`` or ``flops``) and ``step`` (``gpu`` or
    ``host``); wafers' ``step`` (``pipeline``).
    """
    k = s.knobs
    spec = k.speculation
    per_step = spec.tokens_per_step if spec is not None else 1.0
    if s.hw.kind == "wafer":
        line = s.token_line
        pipeline = (k.wafer_pass + k.wafer_fixed) / per_step
        parts = {
            "weights": line.mem0,
            "kv_read": line.mem1 * context,
            "pipeline_pass": pipeline,
            "speculation": line.fixed - pipeline,
            "transport": per_token,
        }
        return parts, {"step": "pipeline"}
    b = float(batch or 1)
    mb, eager = _graph_step(s, b)
    d = _decode_line(s, b, context, mb)
    kv, flops = d.mem0 + d.mem1 * context, d.flop0 + d.flop1 * context
    tokens = _step_tokens(s, mb)
    gemm = k.gemm.at(tokens)
    drafting = 0.0 if spec is None else _gpu_drafting(s, d, b, context, spec, eager)
    launches = k.step_overhead + eager  # graph kernels' latency + eager launches
    gpu = (max(kv, flops) + d.fixed + launches + drafting) / per_step
    work = k.host_per_stream * b / per_step  # the host's work per token
    # Overlapped, the host waits on what the GPU step and its riding prefills leave of
    # its work (its launches included); between steps, all of its work adds.
    beyond = work if k.host_serial else max(0.0, work + eager / per_step - extra - gpu)
    parts = {
        "attention": max(kv, flops) / per_step,
        "weight_gemms": gemm / per_step,
        "collectives": (d.fixed - gemm) / per_step,
        "kernel_launches": launches / per_step,
        "drafting": drafting / per_step,
        "host_beyond_gpu": beyond,
        "prefill_riding": extra,
        "transport": per_token,
    }
    bounds = {
        "attention": "kv_read" if kv >= flops else "flops",
        "weight_gemms": "read" if k.gemm.read(tokens) >= gemm else "flops",
        "step": "host" if beyond > 0.0 and not k.host_serial else "gpu",
    }
    return parts, bounds


def _token_line(s: Served, batch: float | None, other_context: float) -> StepLine:
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
        return StepLine(mem0, s.model.kv_bytes_per_token / bw, mem0, 0.0, step / per_step)
    return gpu_token_line(s, float(batch or 1), other_context)


def gpu_token_line(s: Served, b, other_context: float) -> StepLine:
    """:func:`_token_line` of a served GPU deployment at a decode batch of ``b`` streams
    (a number, or an array of them: then the line's batch-dependent fields are arrays,
    one element per batch, which a finite run's every batch size reads at once)."""
    k = s.knobs
    spec = k.speculation
    mb, eager = _graph_step(s, b)
    line = _decode_line(s, b, other_context, mb)
    # The step's kernels: their launch-to-finish latency, plus the host launching each
    # one when no CUDA graph replays them (simengine.host: no graphs, or a batch above
    # the largest captured one).
    fixed = line.fixed + k.step_overhead + eager
    host = k.host_per_stream * b  # the host's work for the step (simengine.host)
    if k.host_serial:
        # No overlap scheduler: the host's work runs between GPU steps.
        fixed, floor = fixed + host, 0.0
    else:
        # Beside the GPU: a step takes no less than the host's work and its launches.
        floor = host + eager if k.host_per_stream else 0.0
    if spec is None:
        return StepLine(line.mem0, line.mem1, line.flop0, line.flop1, fixed, 0.0, floor)
    fixed += _gpu_drafting(s, line, b, other_context, spec, eager)
    per_step = spec.tokens_per_step
    return StepLine(line.mem0 / per_step, line.mem1 / per_step, line.flop0 / per_step,
                     line.flop1 / per_step, fixed / per_step,
                     floor=floor / per_step)  # fmt: skip


def _gpu_drafting(s: Served, line: StepLine, batch, context: float, spec: Speculation, eager=0.0):
    # The drafter's passes per verify step for ``batch`` streams (a number or an array)
    # at ``context`` tokens; ``eager``: the verify step's eager launches (the drafter's
    # passes run eager with it).
    m, k = s.model, s.knobs
    shape = drafter_shape(spec, m.layers)
    tp = s.place.tensor_parallel or 1
    one = gpu_drafter_seconds(
        shape,
        active_params=m.active_params_decode,
        bytes_per_param=m.attention_bytes_per_param,
        batch=batch,
        kv_bytes=s.attention.kv_copies * m.kv_bytes(batch * m.kv_tokens(context)),
        attention_flops=(
            m.decode_attention_flops
            * batch
            * m.kv_tokens(context)
            * latent_decode_padding(m, s.hw, s.attention)
        ),
        mem_rate=tp * s.hw.memory_bandwidth * k.eta_mem,
        flop_rate=(
            tp * compute_peak(m, s.hw, k.expert_efficiency, k.widened_efficiency) * k.eta_flop
        ),
        attention_rate=tp * s.hw.peak_flops(ATTENTION_MATH_BYTES) * k.eta_attention,
        fixed=line.collectives + k.step_overhead + eager,
    )
    return shape.passes * one


def _batch_at(
    s: Served, batch: float | None, context: float, window_pool: float | None = None
) -> tuple[float | None, float | None]:
    # (decode batch, the tier's batch cap) of a GPU deployment whose streams hold
    # ``context`` tokens; ``batch`` None: the cap. (None, None) on wafers.
    # ``window_pool``: the server's window-layer pool (kv.window_pool; None: shared).
    if s.hw.kind != "gpu":
        return None, None
    # The paged cache holds fewer tokens when the TP group stores each more than once,
    # and, under attention data parallelism, loses the memory of the replicated weights.
    split = s.attention
    kv_tokens = (
        s.place.kv_tokens_per_replica - split.extra_weight_bytes / s.model.kv_bytes_per_token
    )
    # A stream at ``context`` takes up kv.capacity_tokens whole-cache tokens (what it
    # holds, ModelSpec.kv_tokens, unless the server sizes its window layers' pool apart).
    return batch_at(
        kv_tokens / split.kv_copies,
        s.knobs.tier_batch,
        batch,
        capacity_tokens(s.model, context, window_pool),
    )


def _token_seconds(s: Served, context):
    # What the client sees per token: server step + per-token transport overhead.
    return _server_token_seconds(s, context) + s.transport_costs[2]


def _serve(
    model: ModelSpec,
    deployment: Deployment,
    params: EngineParams,
    *,
    batch: float | None = None,
    context: float = 1024.0,
    admit_context: float | None = None,
    window_pool: float | None = None,
) -> Served:
    # ``batch``: streams in flight per GPU replica (default: the tier's cap, i.e. full
    # load); ``context``: the context each co-batched stream holds (the workload's);
    # ``admit_context``: what each counts for when the KV cache admits streams (default:
    # ``context``, the paged rule; kv.admission_context); ``window_pool``: how the server
    # sizes a sliding-window model's window layers (kv.window_pool; None: shared pool).
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
    served = Served(model, hw, place, deployment, software, params, float(context), None)
    # Validate the software version now, with a clear message.
    served.p("t_layer" if hw.kind == "wafer" else "eta_mem")
    served = dataclasses.replace(
        served,
        transport_costs=tuple(served.transport_from_params(n) for n in TRANSPORT_NAMES),
        attention=attention_split(
            model, place.tensor_parallel or 1, deployment.attention_data_parallel
        ),
    )
    served = dataclasses.replace(served, knobs=_knobs(served))
    admit = context if admit_context is None else admit_context
    b, cap = _batch_at(served, batch, admit, window_pool)
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
    positive_int(context_tokens, "context_tokens", 0)
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


def _decode_span_seconds(s: Served, start_context: int, tokens: int) -> float:
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


def _chunks(s: Served, tokens: int) -> int:
    return chunk_count(tokens, s.knobs.chunk_tokens)


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
    tokens: Points
    chunk_steps: Points
    first_ctx: float  # ctx[0] and chunks[0] as Python floats (the hot path reads them)
    first_chunks: float
    mean_new: float  # mean prompt tokens a turn prefills (chunked-prefill interference)
    # The steps a turn spans on a GPU, on average (its chunk steps + its other output
    # tokens': the cycle the other streams' riding prompts spread over, interference).
    cycle_steps: float


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
        Points.of(token_x, token_w),
        Points.of(ctx, chunks - 1.0),
        float(ctx[0]),
        float(chunks[0]),
        float(new.sum()) / task.turns,
        float(request_steps(chunks, out).sum()) / task.turns,
    )


@dataclass(frozen=True, slots=True)
class _ServiceProfile:
    # The load-free part of a prediction at one decode batch: what the hardware does.
    served: Served  # the deployment (batch and line: see ``batch`` and ``line``)
    batch: float | None
    line: StepLine  # server per-token time at this batch
    turns: _Turns
    extra: float  # chunked-prefill interference per step (interference)
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
# (StepLine.weighted_sum), so an unseen load costs no cold profile.
@functools.lru_cache(maxsize=8192)
def _default_serve(model: ModelSpec, deployment: Deployment) -> Served:
    return _serve(model, deployment, DEFAULT_PARAMS)


@functools.lru_cache(maxsize=4096)
def _default_turns(task: TaskProfile, chunk_tokens: float | None) -> _Turns:
    return _turn_table(task, chunk_tokens)


def _prefill_totals(s: Served, turns: _Turns) -> tuple[float, float, float]:
    # (sum over turns, first turn) of the prefill time, and the sum of the part a decode
    # step cannot absorb when the prompt rides one (prefill_parts).
    prefill, side = prefill_parts(s, turns.new, turns.cached)
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
    s: Served, task: TaskProfile, batch: float | None, default: bool
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
    # The other streams' prompts ride every step of a turn: its chunk steps and its
    # decode steps (simengine.prefill.interference).
    extra = interference(s, b, side_sum / n, turns.mean_new, turns.cycle_steps)
    line = with_prefills(line, extra)
    producing = (
        line.weighted_sum(turns.tokens)
        + per_token * turns.tokens.w[-1]
        + extra * task.output_tokens
    )
    # The turns' chunk steps before each first token (chunk_steps' weights: chunks - 1
    # each) carry the riding prompts too.
    early = turns.chunk_steps.w[-1]
    chunked = line.weighted_sum(turns.chunk_steps) + extra * early if early else 0.0
    generation = n * overhead + pre_sum + producing + chunked + agent_term * n
    # TTFT: API overhead + prefill of the uncached tokens (its chunks ride decode steps
    # on a GPU, each carrying the other streams' riding prompts) + the first token.
    # Nothing of the agent's per-turn term.
    step0 = line.at(turns.first_ctx)
    first_ttft = overhead + pre_first + per_token + turns.first_chunks * (step0 + extra)
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
        + prefill_seconds(s, t.new, t.cached)
        + first
        + (t.chunks - 1) * (_server_token_seconds(s, t.ctx) + extra)
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

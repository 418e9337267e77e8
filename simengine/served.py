"""What is served: a deployment, and a deployment resolved against a model and parameters.

:class:`Deployment` says where and how a model is served (device, GPUs or wafers, tier,
transport, software era, parallelism, speculative decoding). :class:`Served` is one
resolved by :mod:`simengine.perf` (``_serve``) against a model and calibrated
parameters: the hardware, the placement, the attention split, the parameters the
formulas read once (:class:`Knobs`) and the decode step's line. The formulas by concern
(:mod:`simengine.step`, :mod:`simengine.prefill`, :mod:`simengine.wafer`,
:mod:`simengine.serving`) read a ``Served``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import SimEngineError
from .hardware import HardwareProfile
from .model import HashOnce, ModelSpec, hash_once
from .moe import GemmLine, experts_balanced
from .parallel import AttentionSplit
from .params import EngineParams
from .placement import Placement, resolve_device
from .speculative import Speculation
from .step import StepLine

TIERS: tuple[str, ...] = ("flex", "standard", "priority", "ultrafast")
TRANSPORTS: tuple[str, ...] = ("reworked", "legacy")


def positive_int(value: Any, name: str, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``, else a clear error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimEngineError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise SimEngineError(f"{name} must be >= {minimum}, got {value}")
    return value


def checked_graph_sizes(sizes) -> tuple[int, ...]:
    """``sizes`` as the tuple a deployment holds, or SimEngineError: distinct positive
    integers in ascending order, at least one."""
    if (
        not isinstance(sizes, (list, tuple))
        or not sizes
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes)
        or list(sizes) != sorted(set(sizes))
    ):
        raise SimEngineError(
            "cuda_graph_batch_sizes must be a list of distinct positive integers in "
            f"ascending order, got {sizes!r}"
        )
    return tuple(sizes)


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
    (:func:`simengine.parallel.attention_dp_idle`). ``expert_load_balancer``: the server
    balances the experts over the expert-parallel GPUs (replicas of hot experts placed
    by load: DeepSeek's EPLB, TensorRT-LLM's wide-EP balancer); None: as served in
    production, on beyond one 8-GPU group (:data:`simengine.moe.WIDE_EP`).
    ``cuda_graphs`` (GPUs): decode steps replay captured CUDA graphs (False: the host
    launches each kernel, :func:`simengine.host.eager_launch_param`);
    ``overlap_scheduler`` (GPUs): the host prepares the next step while the GPU runs
    this one (False: the host's work runs between steps, :mod:`simengine.host`).
    ``cuda_graph_batch_sizes`` (GPUs, with ``cuda_graphs``): the batch sizes each
    scheduler captured, ascending: a step pads its batch to the next one and runs eager
    above the largest (:func:`simengine.host.graph_batch`); None: every batch its own
    graph. ``prefill_chunk_tokens`` (GPUs): the prompt tokens the server schedules in
    one step on one scheduler (vLLM's ``max_num_batched_tokens``, SGLang's
    ``chunked_prefill_size``, TensorRT-LLM's ``max_num_tokens``): a longer prompt is
    prefilled in pieces of it (:mod:`simengine.host`); None: the engine's generic budget
    (param ``gpu:prefill_chunk_tokens``).
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
    expert_load_balancer: bool | None = None
    cuda_graphs: bool = True
    overlap_scheduler: bool = True
    cuda_graph_batch_sizes: tuple[int, ...] | None = None
    prefill_chunk_tokens: int | None = None

    def prefill_budget(self, params) -> float:
        """The prompt tokens a step schedules on one scheduler (GPUs): the stated or
        server-default ``prefill_chunk_tokens``, else the engine's generic budget."""
        return self.prefill_chunk_tokens or params.get("gpu:prefill_chunk_tokens")

    def __post_init__(self) -> None:
        hw = resolve_device(self.device)
        if self.prefill_chunk_tokens is not None:
            if hw.kind != "gpu":
                raise SimEngineError(f"prefill_chunk_tokens applies to GPUs only, not {hw.key}")
            positive_int(self.prefill_chunk_tokens, "prefill_chunk_tokens", 1)
        sizes = self.cuda_graph_batch_sizes
        if sizes is not None:
            if hw.kind != "gpu":
                raise SimEngineError(f"cuda_graph_batch_sizes applies to GPUs only, not {hw.key}")
            if not isinstance(sizes, tuple):
                raise SimEngineError(f"cuda_graph_batch_sizes must be a tuple, got {sizes!r}")
            checked_graph_sizes(sizes)
        for name in ("cuda_graphs", "overlap_scheduler"):
            if not isinstance(getattr(self, name), bool):
                raise SimEngineError(f"{name} must be true or false, got {getattr(self, name)!r}")
            if not getattr(self, name) and hw.kind != "gpu":
                raise SimEngineError(f"{name} = false applies to GPUs only, not {hw.key}")
        if self.expert_load_balancer is not None:
            if not isinstance(self.expert_load_balancer, bool):
                raise SimEngineError(
                    f"expert_load_balancer must be true, false or null, got "
                    f"{self.expert_load_balancer!r}"
                )
            if self.expert_load_balancer and self.expert_parallel <= 1:
                raise SimEngineError("expert_load_balancer needs expert_parallel > 1")
        for name in ("attention_data_parallel", "attention_dp_balance"):
            if not isinstance(getattr(self, name), bool):
                raise SimEngineError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.attention_dp_balance and not self.attention_data_parallel:
            raise SimEngineError("attention_dp_balance needs attention_data_parallel")
        if self.attention_data_parallel and hw.kind != "gpu":
            raise SimEngineError(f"attention_data_parallel applies to GPUs only, not {hw.key}")
        if self.pipeline_parallel is not None:
            positive_int(self.pipeline_parallel, "pipeline_parallel", 1)
        positive_int(self.nodes, "nodes", 1)
        positive_int(self.expert_parallel, "expert_parallel", 1)
        if self.tier not in TIERS:
            raise SimEngineError(f"unknown tier {self.tier!r}; known: {list(TIERS)}")
        if self.transport not in TRANSPORTS:
            raise SimEngineError(f"unknown transport {self.transport!r}; known: {list(TRANSPORTS)}")
        if self.nodes_per_replica is not None:
            positive_int(self.nodes_per_replica, "nodes_per_replica", 1)

    @property
    def experts_balanced(self) -> bool:
        """Whether the experts are balanced over the expert-parallel GPUs (the stated
        ``expert_load_balancer``, else the production default: wide EP only)."""
        return experts_balanced(self.expert_parallel, self.expert_load_balancer)


@dataclass(frozen=True)
class Served:
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
    token_line: StepLine | None = None  # set by _serve
    transport_costs: tuple[float, float, float] = (0.0, 0.0, 0.0)  # set by _serve
    knobs: Knobs | None = None  # set by _serve
    attention: AttentionSplit | None = None  # set by _serve (GPUs: how attention is split)

    def p(self, name: str) -> float:
        return self.params.hardware(
            self.hw.key, self.hw.kind, self.software, name, self.hw.generation
        )

    def transport(self, name: str) -> float:
        return self.transport_costs[TRANSPORT_NAMES.index(name)]

    def transport_from_params(self, name: str) -> float:
        t = self.deployment.transport
        return self.params.get(f"transport:legacy:{name}") * self.params.get(
            f"transport:{t}:{name}_factor"
        )


TRANSPORT_NAMES = ("round_trip", "ttft_overhead", "per_token")


@dataclass(frozen=True, slots=True)
class Knobs:
    # The parameters a served deployment's per-token and prefill formulas read, looked
    # up once per deployment (EngineParams lookups are dict work the hot path repeats).
    eta_mem: float  # GPUs
    eta_flop: float  # GPUs: eta_flop; wafers: wafer:eta_flop (prefill)
    eta_attention: float  # GPUs: decode attention's share of the 16-bit peak
    allreduce_base: float
    activation_bytes: float
    step_overhead: float  # GPUs: the step's kernels x gpu:kernel_overhead
    speculation: Speculation | None  # speculative decoding (None: off)
    tier_batch: float | None  # GPUs: the tier's batch cap
    chunk_tokens: float | None  # GPUs: chunked-prefill chunk
    wafer_pass: float  # wafers: one token through the pipeline
    wafer_fixed: float
    wafer_verify_extra: float = 0.0  # wafers: the k draft tokens' compute in a verify pass
    wafer_draft: float = 0.0  # wafers: one drafter pass
    host_per_stream: float = 0.0  # GPUs: the host's seconds per stream in the batch, per step
    # GPUs: the host's eager kernel launches a step waits for (0 with CUDA graphs), and
    # whether the host's per-stream work runs between steps instead of beside them.
    eager_launch: float = 0.0
    host_serial: bool = False
    # GPUs with CUDA graphs: the batch sizes each scheduler captured (None: every batch
    # its own graph), the schedulers a replica's batch is split over (attention-DP
    # ranks; else 1), and the launches of a step that runs eager above the largest size.
    graph_sizes: tuple[int, ...] | None = None
    graph_ranks: int = 1
    eager_step: float = 0.0
    gemm: GemmLine | None = None  # GPUs: the replica's weight GEMMs by tokens in a step
    # GPUs: the routed experts' GEMMs' share of their tensor-core rate relative to a
    # dense GEMM's (params gpu:eta_expert; 1 for a dense model and on wafers).
    expert_efficiency: float = 1.0
    # GPUs: the share of their tensor-core rate GEMMs of widened 4-bit weights keep (a
    # mixed-input GEMM on a device without 4-bit tensor cores; params gpu:eta_widened;
    # 1 where nothing is widened: HardwareProfile.mma_peak).
    widened_efficiency: float = 1.0

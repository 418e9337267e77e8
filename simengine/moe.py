"""Mixture of experts: expert sizes, weight traffic per decode step, expert parallelism.

Sizes (the spec's ``experts`` E, ``experts_per_token`` k, ``shared_experts`` S):
every token uses the non-expert part N (attention, embeddings, dense layers), the S
shared experts and k of the E routed experts, so with total T and active A::

    T = N + (E + S) e,  A = N + (k + S) e   =>   e = (T - A) / (E - k),
    N = T - (E + S) e.

Decode weight traffic at a batch of B tokens: N + S e + the distinct routed experts
the batch touches, E (1 - (1 - k/E)^B) e (uniform routing: an expert is idle only if
none of the B tokens picks it), each part at its own dtype (``attention_dtype`` for N,
``expert_dtype`` for the experts).

Expert parallelism (GPUs, ``expert_parallel`` = P): the routed experts are split over P
GPUs. Where the P GPUs hold different tokens (attention data parallelism), every MoE
layer sends each token's activations to its k experts (dispatch) and brings the results
back (combine), two all-to-alls (DeepEP, DeepSeek-V3 sec. 3.4); attending
tensor-parallel, every GPU holds every token, runs its own experts on the ones routed to
them and all-reduces the outputs as under TP (dispatches). With tokens spread over the
P GPUs, each GPU sends (B / P) k hidden x bytes per value
(the dispatch quantized to the experts' GEMM input with its block scales when that is
narrower than the activations, the combine at the activations' width: dispatch_bytes),
of which (P - 1) / P leave the GPU, over NVLink inside one NVLink domain (8 GPUs on
HGX, 72 on GB200 NVL72; DeepEP measures ~153 GB/s of H800's 160) and over the
scale-out network beyond it (~43-47 GB/s of 50 per 400 Gb/s NIC): latency per
collective plus bytes over the fabric, twice per MoE layer. The experts' weights and
FLOPs are then read by max(TP, P) GPUs at once.

Expert load imbalance (GPUs, expert parallelism P > 1): routers do not spread tokens
evenly; a few experts of each layer are hot, and the GPU holding them receives more of
the batch's routed tokens than the mean, so every MoE layer waits for that busiest rank
(its routed-expert GEMM FLOPs and the tokens its dispatch and combine carry). TensorRT-LLM
measured it on DeepSeek-R1 (tech blog 4, "Scaling Expert Parallelism in TensorRT-LLM,
part 1", Table 1: EP32, 8 experts a rank, 128 routed tokens an expert on average,
without a load balancer): the busiest rank 1.564 above the mean (2.564 times it), the
busiest expert 10.948 above it, averaged over layers and steps. Model
(:func:`rank_load_factor`): an expert's load in one step is Poisson around a popularity
drawn from a gamma law of coefficient of variation ``EXPERT_LOAD_CV``; a rank's load
sums its E/P experts (a gamma law of CV^2 (1/lambda + cv^2) / (E/P), lambda = tokens
k / E); the busiest of P ranks sits at Blom's expected normal maximum under the
Wilson-Hilferty transform. ``EXPERT_LOAD_CV`` = 1.67 is the value for which this law
gives the blog's 1.564 at its own setting (not fitted to any calibration point or
hold-out figure); the same law then gives its busiest expert at 10.5 (measured 10.948).
A server that balances the experts (DeepSeek's EPLB, SGLang's and TensorRT-LLM's
balancers: hot experts replicated and placed by load) leaves each rank's load at a
spread of ``EXPERT_LOAD_CV_BALANCED`` (the blog's Table 1 with its balancer: 52.0 and
53.9 over a mean of 1,024 at EP32 and EP36, the busiest rank 0.109 and 0.115 above the
mean; this law gives 0.13) plus the routing's Poisson noise. Every server leaves it off
unless configured (TensorRT-LLM's ``moe_config.load_balancer``, default None; SGLang's
``--enable-eplb``); the published wide-EP deployments configure it and MLPerf's DEP8
DeepSeek-R1 configs do not (NVIDIA's v5.1 ``deepseek-r1.py``: the WIDEEP backend without
a balancer), so a deployment that does not say is balanced beyond one 8-GPU group
(``WIDE_EP``) and not within it (``Deployment.expert_load_balancer``).

Tile padding (GPUs): a grouped GEMM computes each expert's routed rows in whole tiles
of rows, the tile sized by the kernel to the experts' mean rows m: 1.3 m rounded up to a
power of two, from 8 to 64 rows (FlashInfer's and TensorRT-LLM's trtllm-gen MoE,
calculate_tile_tokens_dim: a 1.3 "imbalance factor", next_positive_power_of_2, "Cap to
8-64 tokens per CTA tile as it's the range supported by the kernel"). An expert's rows
end part-way into their last tile, so each touched expert computes half a tile more
than it has on average (:func:`expert_padding_rows`): about 0.92 rows per routed row
while the tile grows with m, 32 rows an expert once it is capped. The padded rows cost
the experts' FLOPs, not their weight reads, so a memory-bound step does not see them:
they weigh where many experts each get a few dozen rows (decode at large batch over
many small experts) and fade in a prefill chunk's hundreds of rows an expert.

Wafers: an MoE whose weights span more than one wafer has each layer's experts on
other wafers than the tokens that need them (expert-parallel over the replica's
wafers), so each MoE layer is no longer a local pass: the token's activations travel
to the wafers holding its k experts and the results come back, two hops per MoE layer
over the CS-3 I/O, each carrying k x hidden x activation bytes.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from .errors import SimEngineError
from .parallel import allreduce_seconds


def expert_sizes(
    total: float, active: float, experts: int, per_token: int, shared: int = 0
) -> tuple[float, float]:
    """(parameters per expert e, non-expert parameters N) from total and active counts."""
    if not 0 < per_token < experts:
        raise SimEngineError(f"need 0 < experts_per_token < experts, got {per_token} of {experts}")
    if shared < 0:
        raise SimEngineError(f"shared_experts must be >= 0, got {shared}")
    per_expert = (total - active) / (experts - per_token)
    non_expert = total - (experts + shared) * per_expert
    if non_expert < -1e-9 * total:
        raise SimEngineError(
            f"active/total parameters are inconsistent with {per_token} of {experts} experts "
            f"(+{shared} shared) active: the non-expert part would be negative"
        )
    return per_expert, max(non_expert, 0.0)


def touched_fraction(share: float, tokens):
    """Share of a layer's routed experts a batch of ``tokens`` touches when each token
    picks ``share`` = k/E of them at random: 1 - (1 - k/E)^B, B at least 1 (an expert is
    idle only if no token picks it). ``tokens``: a number or an array."""
    if isinstance(tokens, np.ndarray):
        # (1 - s)^B as exp(B log(1 - s)): numpy's power with an array exponent is a
        # scalar pow per element, its exp is vectorised (same value to a few ulp; a fit
        # evaluates this over every interval of its offline runs).
        return -np.expm1(np.maximum(tokens, 1.0) * math.log1p(-share))
    return 1.0 - (1.0 - share) ** max(tokens, 1.0)


def experts_touched(experts: int, per_token: int, tokens):
    """Expected distinct routed experts a batch of ``tokens`` touches in one layer:
    E (1 - (1 - k/E)^B) (a number or an array)."""
    return experts * touched_fraction(per_token / experts, tokens)


# Coefficient of variation of one layer's expert popularity within a step (DeepSeek-R1,
# TensorRT-LLM tech blog 4, Table 1; see the module docstring for how it follows).
EXPERT_LOAD_CV = 1.67
# A balanced rank's load spread (the same table, with the balancer), and the widest
# expert-parallel group served without one by default.
EXPERT_LOAD_CV_BALANCED = 0.052
WIDE_EP = 8
# The tile a grouped expert GEMM computes an expert's routed rows in (module docstring,
# "Tile padding"): sized to TILE_LOAD_FACTOR x the experts' mean rows, rounded up to a
# power of two, between EXPERT_TILE_MIN_ROWS and EXPERT_TILE_ROWS rows.
EXPERT_TILE_ROWS = 64
EXPERT_TILE_MIN_ROWS = 8
TILE_LOAD_FACTOR = 1.3
# Rounding up to a power of two overshoots by sqrt(2) on average (log-uniform loads).
_TILE_PER_ROW = TILE_LOAD_FACTOR * math.sqrt(2.0)


def expert_padding_rows(tokens, experts: int, per_token: int, tile: float = EXPERT_TILE_ROWS):
    """Rows a step's grouped expert GEMMs compute beyond its ``tokens`` x k routed rows:
    half a tile for each touched expert (an expert's rows end part-way into their last
    tile, half of it on average), the tile sized by the kernel to the experts' mean rows
    m = tokens k / (E touched): ``TILE_LOAD_FACTOR`` m rounded up to a power of two
    (sqrt 2 too many on average), between ``EXPERT_TILE_MIN_ROWS`` and ``tile`` rows. So
    E touched / 2 x that tile: while the tile grows with m, TILE_LOAD_FACTOR sqrt(2) / 2
    rows per routed row, held between E touched / 2 x its bounds; touched = 1 - (1 -
    k/E)^tokens, none for no tokens. ``tokens``: a number or an array."""
    if isinstance(tokens, np.ndarray):
        touched = -np.expm1(tokens * math.log1p(-per_token / experts))
        rows = (0.5 * _TILE_PER_ROW * per_token) * tokens
        half = (0.5 * experts) * touched
        return np.minimum(np.maximum(rows, EXPERT_TILE_MIN_ROWS * half), tile * half)
    if tokens <= 0.0:
        return 0.0
    half = 0.5 * experts * (1.0 - (1.0 - per_token / experts) ** tokens)
    rows = 0.5 * _TILE_PER_ROW * per_token * tokens
    return min(max(rows, EXPERT_TILE_MIN_ROWS * half), tile * half)


def experts_balanced(expert_parallel: int, stated: bool | None = None) -> bool:
    """Whether a balancer places the experts: the ``stated`` setting, else as served in
    production (beyond one 8-GPU group, ``WIDE_EP``; see the module docstring)."""
    return expert_parallel > WIDE_EP if stated is None else stated


@functools.lru_cache(maxsize=256)
def _normal_max(n: int) -> float:
    # Blom's approximation of the expected largest of n standard normal draws.
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def rank_load_factor(
    tokens,
    experts: int,
    per_token: int,
    ranks: int,
    balanced: bool = False,
    cv: float = EXPERT_LOAD_CV,
):
    """Busiest expert-parallel rank's routed tokens over the mean, for a step of ``tokens``
    tokens (a number or an array) whose ``per_token`` of ``experts`` routed experts are
    split over ``ranks`` GPUs: 1 without expert parallelism.

    A rank's load is a gamma law of mean 1 and CV^2 v = (1/lambda + cv^2) / (E/P)
    (lambda = tokens k / E routed tokens an expert; Poisson noise plus popularity skew),
    or 1 / (lambda E/P) + ``EXPERT_LOAD_CV_BALANCED``^2 when a balancer placed them;
    the busiest of P is (1 - v/9 + z_P sqrt(v/9))^3 (Wilson-Hilferty, z_P Blom's expected
    normal maximum), held within [1, P] (the approximation fails for the tiny loads of a
    few tokens, where the step reads weights and no FLOPs bind).
    """
    if ranks <= 1:
        return 1.0
    z = _normal_max(ranks)
    if isinstance(tokens, np.ndarray):
        # The same formula with scalar factors first and the cube as two products
        # (numpy's ** 3 is a pow per element): a fit evaluates it over every interval
        # of its offline runs.
        per_rank = ranks / experts
        inv = (1.0 / (per_token / experts)) / np.maximum(tokens, 1.0)  # 1 / lambda
        if balanced:
            w = (inv * (per_rank / 9.0)) + EXPERT_LOAD_CV_BALANCED**2 / 9.0
        else:
            w = (inv + cv * cv) * (per_rank / 9.0)
        f = 1.0 - w + z * np.sqrt(w)
        f *= f * f
        return np.clip(f, 1.0, float(ranks), out=f)
    lam = max(tokens, 1.0) * per_token / experts
    if balanced:
        v = ranks / (lam * experts) + EXPERT_LOAD_CV_BALANCED**2
    else:
        v = (1.0 / lam + cv * cv) * ranks / experts
    f = (1.0 - v / 9.0 + z * math.sqrt(v / 9.0)) ** 3
    return min(max(f, 1.0), float(ranks))


def routed_flops_per_token(model, tensor_parallel: int = 1, expert_parallel: int = 1) -> float:
    """FLOPs of one token's routed experts at the tensor-parallel group's rate (2 k e,
    the group's share of them: :func:`expert_share`)."""
    if not model.is_moe:
        return 0.0
    return (2.0 * model.expert_layout[1] * model.per_expert_params
            * expert_share(model, tensor_parallel, expert_parallel))  # fmt: skip


def padding_flops_per_row(model, tensor_parallel: int = 1, expert_parallel: int = 1) -> float:
    """FLOPs of one padded row through one routed expert at the tensor-parallel group's
    rate (2 e, the group's share: a token's routed FLOPs over its k experts,
    :func:`routed_flops_per_token`; tile padding, module docstring)."""
    if not model.is_moe:
        return 0.0
    return routed_flops_per_token(model, tensor_parallel, expert_parallel) / model.expert_layout[1]


def imbalance_flops(
    model, tokens, tensor_parallel: int, expert_parallel: int, balanced: bool = False
):
    """Routed-expert FLOPs the busiest expert-parallel rank does beyond the mean for a
    step of ``tokens`` tokens, at the group's rate (:func:`rank_load_factor`); 0 without
    expert parallelism."""
    if expert_parallel <= 1 or not model.is_moe:
        return 0.0
    experts, k = model.expert_layout
    factor = rank_load_factor(tokens, experts, k, expert_parallel, balanced)
    return routed_flops_per_token(model, tensor_parallel, expert_parallel) * tokens * (factor - 1.0)


# Block-scale bytes per value that a quantized activation carries with it, by its width:
# NVFP4, one FP8 (E4M3) scale per 16 values; 8-bit, DeepEP's and DeepSeek-V3's FP32 scale
# per 128-value token group (MXFP8's E8M0 scale per 32 values is the same 1/32 byte).
QUANT_SCALE_BYTES: dict[float, float] = {0.5: 1.0 / 16.0, 1.0: 4.0 / 128.0}


def dispatch_bytes(model, hw, activation_bytes: float) -> float:
    """Bytes per value of a token's activations in an MoE layer's dispatch all-to-all.

    Servers quantize a token's activations to the routed experts' GEMM input before the
    dispatch, so it carries the narrower values with their block scales, and bring the
    experts' outputs back at the activations' own width (the combine): DeepSeek-V3's
    report (sec. 3.3, "Low-Precision Communication": dispatch in FP8, combine in BF16)
    and DeepEP's FP8 dispatch; TensorRT-LLM's post-quant all-to-all
    (``TRTLLM_MOE_POST_QUANT_ALLTOALLV``, default on) for NVFP4 experts; SGLang's NVFP4
    quantization fused into DeepEP (LMSYS, GB200 Part II, 2025-09). The experts' input is
    the operand width their tensor cores take
    (:meth:`simengine.hardware.HardwareProfile.mma_operand_bytes`): 16-bit experts, and
    4-bit weights widened to BF16 on Hopper (W4A16), dispatch the activations as they are.
    """
    width = hw.mma_operand_bytes(model.expert_bytes_per_param, model.expert_activation_bytes)
    if width >= activation_bytes:
        return activation_bytes
    return width + QUANT_SCALE_BYTES.get(width, 0.0)


def all_to_all_seconds(
    tokens: float,
    per_token: int,
    hidden: int,
    activation_bytes: float,
    group: int,
    *,
    latency: float,
    bandwidth: float,
    base: float,
    dispatched_bytes: float | None = None,
) -> float:
    """Dispatch + combine of one MoE layer over an expert-parallel group of ``group``.

    Each of the two all-to-alls: ``base`` (launch) + ``latency`` (the fabric's) +
    the bytes one GPU sends, (tokens / group) k hidden x bytes per value x (group - 1) /
    group, over ``bandwidth``: the dispatch at ``dispatched_bytes`` per value (the
    quantized activations, :func:`dispatch_bytes`; default ``activation_bytes``), the
    combine at ``activation_bytes``. Zero for a group of one.
    """
    if group <= 1:
        return 0.0
    per_value = activation_bytes + (
        activation_bytes if dispatched_bytes is None else dispatched_bytes
    )
    values = (tokens / group) * per_token * hidden * (group - 1) / group
    return 2.0 * (base + latency) + values * per_value / bandwidth


def wafer_expert_hops(
    moe_layers: int,
    per_token: int,
    hidden: int,
    activation_bytes: float,
    *,
    hop_latency: float,
    link_bandwidth: float,
) -> float:
    """Seconds per token of the cross-wafer expert traffic of an MoE spread over wafers:
    per MoE layer two hops (to the wafers holding the k chosen experts and back), each
    carrying k x hidden x activation bytes over the wafer's I/O."""
    per_hop = hop_latency + per_token * hidden * activation_bytes / link_bandwidth
    return moe_layers * 2.0 * per_hop


def attention_peak(model, hw, widened: float = 1.0) -> float:
    """Dense peak FLOP/s of the non-expert weight GEMMs (attention projections, dense
    and shared layers): the tensor-core rate of their weights and activations
    (:meth:`simengine.hardware.HardwareProfile.mma_peak`; ``widened``: the share a
    mixed-input GEMM keeps where 4-bit weights are widened, params ``gpu:eta_widened``)."""
    return hw.mma_peak(model.attention_bytes_per_param, model.attention_activation_bytes, widened)


def expert_peak(model, hw, efficiency: float = 1.0, widened: float = 1.0) -> float:
    """Dense peak FLOP/s of the routed experts' GEMMs: the tensor-core rate of their
    weights and activations (``widened`` as in :func:`attention_peak`), times
    ``efficiency`` (what a served MoE layer's grouped GEMMs reach of it relative to a
    dense GEMM; params ``gpu:eta_expert``)."""
    peak = hw.mma_peak(model.expert_bytes_per_param, model.expert_activation_bytes, widened)
    return peak * efficiency


def compute_peak(model, hw, expert_efficiency: float = 1.0, widened: float = 1.0) -> float:
    """Dense peak FLOP/s for a token's active parameters at their dtypes: the non-expert
    and expert shares of the active parameters each at the tensor-core rate of their
    weights and activations (NVFP4 experts run at Blackwell's 4-bit rate, MXFP4 ones
    with MXFP8 activations at its 8-bit rate, BF16 attention at the 16-bit rate), the
    routed experts' at ``expert_efficiency`` of theirs (:func:`expert_peak`; shared
    experts multiply every token, a dense GEMM), combined as the time they take (a
    harmonic mean weighted by FLOPs); ``widened``: the share of their rate GEMMs of
    widened 4-bit weights keep (:func:`attention_peak`)."""
    non_expert, expert = model.active_split
    peak_a = attention_peak(model, hw, widened)
    if not expert:
        return peak_a
    peak_e = expert_peak(model, hw, 1.0, widened)
    routed = model.expert_layout[1] * model.per_expert_params
    if peak_e == peak_a and expert_efficiency == 1.0:
        return peak_a
    seconds = (non_expert / peak_a + (expert - routed) / peak_e
               + routed / (peak_e * expert_efficiency))  # fmt: skip
    return (non_expert + expert) / seconds


def expert_share(model, tensor_parallel: int, expert_parallel: int) -> float:
    """How much of the experts' weight traffic and FLOPs one tensor-parallel group's
    rate carries: experts split over max(TP, EP) GPUs run TP / max(TP, EP) as long."""
    if expert_parallel <= 1 or not model.is_moe:
        return 1.0
    return tensor_parallel / max(tensor_parallel, expert_parallel)


def step_weight_bytes(model, tokens, tensor_parallel: int = 1, expert_parallel: int = 1):
    """Weight bytes a step of ``tokens`` tokens reads, expressed at the tensor-parallel
    group's rate (experts spread wider by expert parallelism count for less)."""
    share = expert_share(model, tensor_parallel, expert_parallel)
    if share == 1.0:
        return model.decode_weight_bytes(tokens)
    return model.decode_weight_bytes(tokens) - (1.0 - share) * model.expert_weight_bytes(tokens)


class GemmLine(NamedTuple):
    """The weight GEMMs of one step as a function of its tokens x, in seconds at a group's
    rates: max(the weights x tokens touch, read once, their 2 N_active x FLOPs). The read
    is the weights every step reads (``always``: non-expert and shared-expert weights,
    plus what an attention split adds) and the routed experts the tokens touch
    (``experts`` x touched(k/E, x): :func:`touched_fraction`; 0 for a dense model); the
    FLOPs add the rows the experts' tiles pad (:func:`expert_padding_rows`).
    Built once per served deployment (:func:`gemm_line`); the decode step and the prompt
    chunks that ride it (simengine.perf) read the same line."""

    always: float  # seconds to read the weights every step reads
    experts: float  # seconds to read every routed expert (at the group's share)
    share: float  # k / E
    per_token: float  # seconds of GEMM FLOPs per token
    # Expert parallelism: seconds of one token's routed-expert FLOPs, and (E, k, P,
    # balanced) for the busiest rank's excess (rank_load_factor); 0 / None without it.
    routed: float = 0.0
    skew: tuple[int, int, int, bool] | None = None
    # Tile padding: seconds of one row through one routed expert at the experts' rate,
    # and (E, k) for expert_padding_rows; 0 / None for a dense model.
    pad_row: float = 0.0
    layout: tuple[int, int] | None = None

    def read(self, tokens):
        """Seconds to read the weights ``tokens`` tokens touch (a number or an array)."""
        if self.experts:
            return self.always + self.experts * touched_fraction(self.share, tokens)
        return self.always

    def padding(self, tokens):
        """Seconds of the rows the experts' GEMM tiles pad for ``tokens`` tokens
        (:func:`expert_padding_rows` at ``pad_row`` a row; 0 for a dense model)."""
        if not self.pad_row:
            return 0.0
        experts, k = self.layout
        if isinstance(tokens, np.ndarray) and tokens.size <= 6:
            # A prompt's few turns (the router's prefill): element by element costs less
            # than the array operations' own overhead.
            rows = [expert_padding_rows(t, experts, k) for t in tokens.ravel().tolist()]
            return self.pad_row * np.array(rows).reshape(tokens.shape)
        return self.pad_row * expert_padding_rows(tokens, experts, k)

    def at(self, tokens):
        """Seconds for ``tokens`` tokens (a number or an array)."""
        flops = self.per_token * tokens
        if self.routed:
            flops = flops + self.routed * tokens * (rank_load_factor(tokens, *self.skew) - 1.0)
        if not self.experts:
            read = self.always
        elif isinstance(tokens, np.ndarray):
            read = self.read(tokens)
            # A step computes at least one token's experts' tiles.
            flops = flops + self.padding(np.maximum(tokens, 1.0))
        else:
            # A number (the router's path; a step has at least one token): the touched
            # experts once for their read and their tiles' rows, expert_padding_rows
            # inlined (a decode step's line is evaluated once per batch it serves).
            t = tokens if tokens > 1.0 else 1.0
            touched = 1.0 - (1.0 - self.share) ** t  # touched_fraction
            read = self.always + self.experts * touched
            experts, k = self.layout
            half = 0.5 * experts * touched
            rows = 0.5 * _TILE_PER_ROW * k * t
            rows = rows if rows > EXPERT_TILE_MIN_ROWS * half else EXPERT_TILE_MIN_ROWS * half
            rows = rows if rows < EXPERT_TILE_ROWS * half else EXPERT_TILE_ROWS * half
            flops += self.pad_row * rows
            return read if read >= flops else flops
        if isinstance(flops, float):  # a number (the router's path): no numpy
            return read if read >= flops else flops
        return np.maximum(read, flops)


def gemm_line(
    model,
    tensor_parallel: int,
    expert_parallel: int,
    extra_weight_bytes: float,
    mem_rate: float,
    flop_rate: float,
    routed_rate: float = 0.0,
    balanced: bool = False,
) -> GemmLine:
    """A step's weight GEMMs on a group reading at ``mem_rate`` bytes/s and multiplying at
    ``flop_rate`` FLOP/s (:class:`GemmLine`; the bytes are :func:`step_weight_bytes`');
    with expert parallelism the busiest rank's excess routed FLOPs run at ``routed_rate``
    (the experts' tensor-core rate over the group; default ``flop_rate``); ``balanced``:
    a balancer placed the experts."""
    experts = 0.0
    share = 0.0
    routed_seconds, skew = 0.0, None
    pad_row, layout = 0.0, None
    if model.is_moe:
        routed, k = model.expert_layout
        share = k / routed
        layout = (routed, k)
        pad_row = padding_flops_per_row(model, tensor_parallel, expert_parallel) / (
            routed_rate or flop_rate
        )
        full = model.expert_params * model.expert_bytes_per_param
        experts = full * expert_share(model, tensor_parallel, expert_parallel) / mem_rate
        if expert_parallel > 1:
            routed_seconds = (routed_flops_per_token(model, tensor_parallel, expert_parallel)
                              / (routed_rate or flop_rate))  # fmt: skip
            skew = (routed, k, expert_parallel, balanced)
    active = step_active_params(model, tensor_parallel, expert_parallel)
    return GemmLine(
        (model.always_read_bytes + extra_weight_bytes) / mem_rate,
        experts,
        share,
        2 * active / flop_rate,
        routed_seconds,
        skew,
        pad_row,
        layout,
    )


def step_active_params(model, tensor_parallel: int = 1, expert_parallel: int = 1) -> float:
    """Active parameters per token at the tensor-parallel group's rate (see above)."""
    non_expert, expert = model.active_split
    return non_expert + expert * expert_share(model, tensor_parallel, expert_parallel)


def dispatches(model, tensor_parallel: int, expert_parallel: int) -> bool:
    """Whether an MoE layer dispatches its tokens to their experts' GPUs (all-to-all).

    Only where the tokens are spread over the expert-parallel group, i.e. under attention
    data parallelism (``tensor_parallel`` here: the group attention all-reduces over, 1
    when each GPU attends for its own streams). Attending tensor-parallel, every GPU of
    the group holds every token after attention's all-reduce, so each runs its own
    experts on the tokens routed to them and the outputs are all-reduced like a
    tensor-parallel MLP's: vLLM uses its all-to-all kernels only with data parallelism
    (``FusedMoEParallelConfig.use_all2all_kernels``: dp_size > 1 and use_ep), and
    TensorRT-LLM's MoE all-to-all needs attention DP ("alltoall should only enabled with
    attention dp").
    """
    return model.is_moe and expert_parallel > 1 and tensor_parallel < expert_parallel


def moe_collectives_seconds(
    model,
    hw,
    tokens,
    tensor_parallel: int,
    expert_parallel: int,
    base: float,
    activation_bytes: float,
    balanced: bool = False,
):
    """Collectives of one step over all layers (``tokens``: a number or an array):
    tensor parallelism all-reduces twice per layer (attention and MLP/experts outputs,
    :func:`simengine.parallel.allreduce_seconds`); with expert parallelism the experts'
    all-reduce becomes a dispatch + combine all-to-all over the EP group where tokens are
    spread over it (:func:`dispatches`; the dispatch quantized to the experts' input,
    :func:`dispatch_bytes`), on NVLink
    when the group fits the NVLink domain, else over the scale-out network, its bytes
    the busiest rank's (:func:`rank_load_factor`; ``balanced``: a balancer placed the
    experts)."""
    act = tokens * model.hidden_size * activation_bytes
    ar = allreduce_seconds(hw, act, tensor_parallel, base)
    if not dispatches(model, tensor_parallel, expert_parallel):
        return 2 * model.layers * ar
    on_nvlink = expert_parallel <= hw.max_tensor_parallel
    # The busiest rank receives and sends its excess of the routed tokens too.
    experts, k = model.expert_layout
    a2a = all_to_all_seconds(
        tokens * rank_load_factor(tokens, experts, k, expert_parallel, balanced),
        k,
        model.hidden_size,
        activation_bytes,
        expert_parallel,
        latency=hw.link_latency if on_nvlink else hw.scaleout_latency,
        bandwidth=hw.link_bandwidth if on_nvlink else hw.scaleout_bandwidth,
        base=base,
        dispatched_bytes=dispatch_bytes(model, hw, activation_bytes),
    )
    return model.layers * (ar + a2a)

"""Engine parameters: fixed physical assumptions plus the fitted, versioned constants.

Parameter names are flat strings so the fit can treat them as a vector:

* ``<device>@<software>:<name>`` or ``<kind>@<software>:<name>`` for hardware/software
  constants, e.g. ``wse-3@2026.08:t_layer`` (seconds) or ``gpu@2026.02:eta_mem``.
  Lookup tries the device key first, then the tensor-core generation (``hopper``,
  ``blackwell``), then the kind (``gpu``/``wafer``), so a device-specific fit can
  override a shared one; then the same names without a software era
  (``hopper:eta_flop``: one value for every era).
* ``tier:<tier>:batch`` - decode batch per GPU replica for a service tier.
* ``transport:legacy:<name>`` - per-request/per-token overheads of the legacy
  transport; ``transport:reworked:<name>_factor`` - the Spark rework, as multipliers.

``DEFAULT_PARAMS`` = the fixed values below overlaid with ``data/params.json``, which
is written by ``python -m simengine.calibration --write`` (the fit); it is data, never
hand-edited.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SimEngineError

PARAMS_FILE = Path(__file__).with_name("data") / "params.json"

# Assumptions that no published figure constrains; kept fixed (not fitted) and listed
# so the calibration table can show them.
FIXED_VALUES: dict[str, float] = {
    # GenZ all-reduce launch cost.
    "gpu:allreduce_base": 5e-6,
    # Activations crossing links (pipeline hops, all-reduce) are BF16.
    "activation_bytes": 2.0,
    # Context per stream at which placement plans a replica's stream capacity (wafers:
    # with their pipeline slots) and token_speed's co-batched context. A GPU batch is
    # capped by the KV the streams actually hold (paged KV, simengine.kv), not by this.
    "batch_context_tokens": 8192.0,
    # Prompt tokens per chunk of chunked prefill (vLLM / TensorRT-LLM default order).
    "gpu:prefill_chunk_tokens": 2048.0,
    # Legacy client-server round trip (the rework applies a fixed factor): the GDP-Val
    # totals hardly constrain it (rank check), so an assumption.
    "transport:legacy:round_trip": 0.2,
    # GPU HBM efficiency (notes: eta_mem 0.6-0.8). The GPU calibration points do not
    # determine it (fitted with them it takes about 0.8 with under 10 % of its spread
    # removed by the data: the fit's rank check), so it stays at the centre of the range.
    # One value for both GPU software eras (2025.04: the serving software of 2025;
    # 2026.02: TensorRT-LLM 1.2+, vLLM 0.14+; see PRIORS).
    "gpu@2025.04:eta_mem": 0.75,
    "gpu@2026.02:eta_mem": 0.75,
    # The server's host (CPU) work per request in flight per decode step, overlapped with
    # the GPU's step (a step takes the longer of the two; simengine.host has the sources):
    # Grace 45.11 ms per iteration over 1,536 requests per attention rank (TensorRT-LLM
    # PR #10273, gpt-oss-120b on GB200, 2025-12); x86 the same at the 2.75x ratio of the
    # two hosts' CPU time per PyTorch module call (TransformerEngine issue #2053). No
    # calibration point separates them from the GPU step: fixed, not fitted.
    "host:grace:per_request": 45.11e-3 / 1536,
    "host:x86:per_request": 45.11e-3 / 1536 / (37.08 / 13.48),
    # The host's CPU time per kernel a decode step launches without CUDA graphs (eager
    # PyTorch; simengine.host.eager_launch_param): one torch.nn.Linear forward's CPU
    # time, 37.08 us on GB200's Grace and 13.48 us on a DGX H100's Xeon
    # (TransformerEngine issue #2053). Fixed; how many such calls an eager step makes per
    # kernel the engine counts is fitted (gpu:eager_ops_per_kernel, below).
    "host:grace:eager_launch": 37.08e-6,
    "host:x86:eager_launch": 13.48e-6,
    # Speculative decoding is no parameter: its gain follows from the method's published
    # acceptance and draft length and the hardware's step costs (simengine.speculative).
    # Wafer-to-wafer hop latency (physical: 0.1-5 us; the CS-3 system I/O), plus the
    # activations over 150 GB/s; and the per-token fixed cost (LM head, sampling).
    "wafer:t_link": 1.0e-6,
    "wafer:t_fixed": 50e-6,
    # Server-side API work before prefill (auth, moderation, tokenisation) on the legacy
    # transport; the rework halves it. Assumption: no published figure pins it down.
    "transport:legacy:ttft_overhead": 0.05,
    # Per streamed token overhead of the legacy transport (assumption; see rank check).
    "transport:legacy:per_token": 100e-6,
    # Batch cap of the flex tier: no published figure (kept at its prior).
    "tier:flex:batch": 256.0,
    # Streams in flight per pipeline stage on a wafer pipeline (notes: up to P streams).
    "wafer:streams_per_stage": 1.0,
    # Wafer prefill efficiency against the 125 PFLOP/s (sparse) peak.
    "wafer:eta_flop": 0.05,
    # The Spark transport rework as published: round trip -80 %, per-token -30 %,
    # server-side TTFT overhead -50 %. Inputs describing the profile, not outputs.
    "transport:reworked:round_trip_factor": 0.2,
    "transport:reworked:per_token_factor": 0.7,
    "transport:reworked:ttft_overhead_factor": 0.5,
    "transport:legacy:round_trip_factor": 1.0,
    "transport:legacy:per_token_factor": 1.0,
    "transport:legacy:ttft_overhead_factor": 1.0,
}

# Software version each device runs unless a Deployment names another one.
DEFAULT_SOFTWARE: dict[str, str] = {
    "wse-3": "2026.08",
    "h100": "2026.02",
    "h200": "2026.02",
    "b200": "2026.02",
    "gb200-nvl72": "2026.02",
}


class ReadLog(dict):
    """Parameter values that note every name read from them (``read``, shared by the
    copies :meth:`EngineParams.with_values` makes; a name a copy replaced is not the
    original's value, so reading it there is not noted): the fit differentiates a
    target only by the parameters it reads (simengine.calibration)."""

    __slots__ = ("read", "replaced")

    def __init__(
        self,
        values: Mapping[str, float],
        read: set[str] | None = None,
        replaced: frozenset[str] = frozenset(),
    ):
        super().__init__(values)
        self.read: set[str] = set() if read is None else read
        self.replaced = replaced

    def _note(self, name: object) -> None:
        if name not in self.replaced:
            self.read.add(name)  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> float:
        self._note(name)
        return dict.__getitem__(self, name)

    def __contains__(self, name: object) -> bool:
        self._note(name)
        return dict.__contains__(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        self._note(name)
        return dict.get(self, name, default)

    def updated(self, updates: Mapping[str, float]) -> ReadLog:
        """A copy with ``updates`` applied, noting into the same ``read``."""
        return ReadLog({**self, **updates}, self.read, self.replaced | frozenset(updates))


@dataclass(frozen=True)
class EngineParams:
    """A versioned set of engine parameters (immutable; use :meth:`with_values`)."""

    version: str
    values: Mapping[str, float]
    software: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SOFTWARE))
    fitted: tuple[str, ...] = ()
    # find_hardware's answers (values never change; not kept for a ReadLog, whose every
    # read must be noted).
    _found: dict[tuple[str, ...], float | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def get(self, name: str) -> float:
        """Value of a flat parameter; SimEngineError names it when missing."""
        try:
            return float(self.values[name])
        except KeyError:
            raise SimEngineError(f"parameter {name!r} is not defined in {self.version}") from None

    def hardware(
        self, device: str, kind: str, software: str, name: str, generation: str = ""
    ) -> float:
        """Look up ``device@software:name``, falling back to ``generation@software:name``
        (the device's tensor-core generation, when it has one) and then to
        ``kind@software:name``; then the same three without a software era
        (``generation:name``: a figure every era shares)."""
        value = self.find_hardware(device, kind, software, name, generation)
        if value is not None:
            return value
        raise SimEngineError(
            f"no calibrated {name!r} for {device}@{software} (params {self.version}); "
            f"known versions: {sorted({k.split(':')[0] for k in self.values if '@' in k})}"
        )

    def find_hardware(
        self, device: str, kind: str, software: str, name: str, generation: str = ""
    ) -> float | None:
        """:meth:`hardware`'s value, or None where no key names it (no error built)."""
        memo = not isinstance(self.values, ReadLog)
        ask = (device, kind, software, name, generation)
        if memo and ask in self._found:
            return self._found[ask]
        scopes = [device, generation, kind] if generation else [device, kind]
        keys = [f"{scope}@{software}:{name}" for scope in scopes]
        keys += [f"{scope}:{name}" for scope in scopes]
        value = next((float(self.values[k]) for k in keys if k in self.values), None)
        if memo:
            self._found[ask] = value
        return value

    def software_for(self, device: str) -> str:
        """Default software version of a device."""
        return self.software.get(device, DEFAULT_SOFTWARE.get(device, "2026.08"))

    def with_values(self, updates: Mapping[str, float], version: str | None = None) -> EngineParams:
        """Copy with some values replaced."""
        return EngineParams(
            version=version or self.version,
            values=(
                self.values.updated(updates)
                if isinstance(self.values, ReadLog)
                else {**self.values, **updates}
            ),
            software=dict(self.software),
            fitted=self.fitted,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        return {
            "version": self.version,
            "software": dict(self.software),
            "fitted": list(self.fitted),
            "values": dict(self.values),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineParams:
        """Inverse of :meth:`to_dict`; fixed values fill in anything the data lacks."""
        return cls(
            version=str(data.get("version", "unversioned")),
            values={**FIXED_VALUES, **{k: float(v) for k, v in data.get("values", {}).items()}},
            software={**DEFAULT_SOFTWARE, **data.get("software", {})},
            fitted=tuple(data.get("fitted", ())),
        )


def load_params(path: str | Path = PARAMS_FILE) -> EngineParams:
    """Load a parameter file written by the calibration."""
    with open(path, encoding="utf-8") as fh:
        return EngineParams.from_dict(json.load(fh))


@dataclass(frozen=True)
class Prior:
    """Prior belief about a fitted parameter: centre and spread in the fit's space.

    ``transform`` is ``"log"`` (positive) or ``"logit"`` (a fraction in (0, 1));
    ``sd`` is the standard deviation in that transformed space. Where published
    figures do not pin a parameter down, the prior does, and the table says so.
    """

    value: float
    sd: float
    transform: str = "log"
    why: str = ""


# Fitted parameters and their priors (centre from hardware data or common practice).
# No more of them than the rank of the fit targets' sensitivity (checked by the fit).
PRIORS: dict[str, Prior] = {
    # Wafer per-token model: per layer t_layer + active bytes on the wafer / (21 PB/s
    # eta_sram), plus physical hops (fixed above); both per software era (kernels move
    # them 4-5x between releases).
    "wse-3@2024.08:t_layer": Prior(10e-6, 0.7, why="launch software (2 Llama points)"),
    "wse-3@2024.10:t_layer": Prior(10e-6, 0.7, why="spec-decoding era (5 models)"),
    "wse-3@2026.08:t_layer": Prior(10e-6, 0.7, why="Spark and Sol Ultrafast"),
    "wse-3@2024.08:eta_sram": Prior(0.1, 1.0, "logit", why="share of 21 PB/s SRAM BW"),
    "wse-3@2024.10:eta_sram": Prior(0.1, 1.0, "logit", why="share of 21 PB/s SRAM BW"),
    "wse-3@2026.08:eta_sram": Prior(0.1, 1.0, "logit", why="share of 21 PB/s SRAM BW"),
    # Decode batch cap per GPU replica: what separates the tiers on the same GPUs.
    "tier:priority:batch": Prior(8.0, 1.0, why="small batch = fast stream"),
    "tier:standard:batch": Prior(64.0, 1.0, why="throughput batch"),
    # GPU tensor-core efficiency (notes: eta_flop 0.5-0.7), fitted to the GPU calibration
    # points (data/gpu_points.toml: MLPerf and serving-framework figures from sources no
    # hold-out figure comes from), one per tensor-core generation: the share of the
    # datasheet's dense peak that serving reaches is not the same on Hopper (H100/H200)
    # and Blackwell (B200/GB200, whose 4-bit peak doubles the 8-bit one at the same
    # power); eta_mem is not determined by the points (fixed above). The same in both
    # GPU software eras: the dense MLPerf results of 2026 (llama2-70b on 8x B200, four
    # submitters) are within 0-3 % of 2025's.
    "hopper:eta_flop": Prior(
        0.55, 1.0, "logit", why="share of tensor-core peak, Hopper (GPU points)"
    ),
    "blackwell:eta_flop": Prior(
        0.55, 1.0, "logit", why="share of tensor-core peak, Blackwell (GPU points)"
    ),
    # Decode attention's share of the 16-bit tensor-core peak, per GPU software era, on
    # Blackwell: where attention binds on compute (multi-head latent attention at full
    # batch: every query head attends over the whole latent) it is not the GEMMs'
    # efficiency, and it moved with the software: DeepSeek-R1 on the same 8x B200 DEP8
    # deployment went from 33,379 tok/s (MLPerf v5.1, Sept. 2025) to 58,582 and 56,930
    # (v6.0, v6.1) while dense llama2-70b stayed within 3 %. The deepseek-r1 points of
    # each era fit it; the data cannot tell attention from the MoE GEMMs or the
    # all-to-all of the same steps, and attention is most of them (engine). Hopper has
    # no point where decode attention binds: there it is the GEMMs' eta_flop.
    "blackwell@2025.04:eta_decode_attention": Prior(
        0.55, 1.0, "logit", why="decode attention, Blackwell, 2025 software (deepseek-r1)"
    ),
    "blackwell@2026.02:eta_decode_attention": Prior(
        0.55, 1.0, "logit", why="decode attention, Blackwell, 2026 software (deepseek-r1)"
    ),
    # What a served MoE layer's routed-expert GEMMs reach of their tensor-core rate,
    # relative to a dense GEMM's (a multiplier on eta_flop for the routed experts' FLOPs;
    # shared experts multiply every token, a dense GEMM). One grouped GEMM with thousands
    # of rows per expert runs at about the dense rate in a kernel benchmark (DeepGEMM's
    # H800 table: 4 groups x 8,192 rows, N 4,096, K 7,168 at 1,297 TFLOPS against 1,304
    # for one 4,096-row GEMM of that N and K), but a served layer splits a step's tokens
    # over its experts (tokens x k / E rows each: a few dozen in decode, a few hundred in
    # a prefill chunk), pads each expert's rows to its tile (TensorRT-LLM sizes the tile
    # for 1.3x the mean expert load, rounded up to a power of two:
    # tensorrt_llm/_torch/custom_ops, tile_tokens_dim) and runs routing, permute,
    # activation-quantize and finalize passes a dense layer does not. Prior 0.8; the GPU
    # points fit it: gpt-oss-120b's prefill-heavy MLPerf Offline runs (mostly routed-
    # expert FLOPs; three on B200, one on H200) against the dense llama points (eta_flop
    # alone). One value for every GPU and era: split per generation, the one Hopper
    # point, gpt-oss on H200, fits Hopper's value alone (0.52 against Blackwell's 0.59),
    # and the split fit ends at a higher cost (29.5 against 28.1) in the same 200
    # iterations.
    "gpu:eta_expert": Prior(
        0.8, 1.0, "logit", why="routed experts' GEMMs vs dense, rate share (GPU points)"
    ),
    # What a GEMM whose 4-bit weights are widened before they multiply (a device without
    # 4-bit tensor cores: Hopper) keeps of the 16-bit rate it runs at: a mixed-input
    # GEMM converts every weight tile to 16 bits in registers, applying its block scales,
    # before the MMA takes it (CUTLASS's Hopper mixed-input mainloop, examples/55), work
    # a native GEMM does not do; NVIDIA/cutlass #1549 measures Hopper's mixed-input GEMM
    # below the native one, vllm-project/vllm #8006 says a W4A16 model gains in
    # memory-bound steps only. A multiplier on the tensor-core rate of those GEMMs
    # (HardwareProfile.mma_peak); memory-bound steps do not see it. Added in issue 28's
    # twenty-ninth round. Prior 0.7; the GPU points fit it: gpt-oss-120b's MXFP4 experts
    # on H200 in RedHat's prefill-heavy MLPerf Offline run (vLLM) are the Hopper point
    # whose steps the widened GEMMs' FLOPs hold (the SGLang H100 batch-1 points read
    # them and are memory-bound). Until then that point's slowness went into
    # gpu:eta_expert, shared with Blackwell, whose MXFP4 and NVFP4 experts run natively.
    "gpu:eta_widened": Prior(
        0.7, 1.0, "logit", why="widened 4-bit weights' GEMMs, rate share (GPU points)"
    ),
    # Time of each kernel a GPU decode step launches, outside the roofline: its launch-
    # to-finish latency under CUDA graphs, however little the kernel does, so a step's
    # fixed time grows with the kernels its layers launch (simengine.step,
    # decode_kernels: 436 for gpt-oss-120b, 980 for DeepSeek-R1). Prior: 4 us, the
    # middle of the "launch-and-latency floor of 3-5 us" a small decode kernel runs at on
    # B200 in a CUDA graph (flashinfer-ai/flashinfer PR #5315, 2026-09). Until issue 28's
    # thirteenth round this was one figure per step (gpu:step_overhead, prior 2 ms). The
    # GPU points' single-stream figures (gpt-oss-120b at batch 1) fit it.
    "gpu:kernel_overhead": Prior(
        4.0e-6, 0.7, why="per kernel of a decode step (GPU points at batch 1)"
    ),
    # PyTorch ops an eager decode step launches per kernel the engine counts
    # (simengine.step.decode_kernels counts a served step's fused kernels; eager PyTorch
    # runs unfused elementwise ops, casts and copies beside them), each at the host's
    # per-call CPU time (host:<host>:eager_launch, fixed). Prior 1 (one call a kernel).
    # Fitted to TensorRT-LLM's own CUDA-graph ablation (tech blog 3, +22 % for DeepSeek-R1
    # on 8x B200 at maximum throughput; the calibration target ablation_cuda_graphs);
    # checked against a batch-1 ablation on H200 (deepspeedai/DeepSpeed PR #8352: GPT-2
    # under SGLang and vLLM, eager against graphs; simengine.calibration.ablation_checks).
    "gpu:eager_ops_per_kernel": Prior(
        1.0, 0.7, why="eager PyTorch ops per decode kernel (CUDA-graph ablation)"
    ),
    # The agent's per-turn term (server side, beyond TTFT and decode): re-prefill of the
    # context evicted while a tool runs, harness orchestration. GDP-Val pins it.
    "agent:turn_overhead": Prior(1.0, 1.0, why="per agent turn, not in TTFT"),
}


def _default_params() -> EngineParams:
    if PARAMS_FILE.exists():
        return load_params(PARAMS_FILE)
    # Only before the first fit has been written: start from the priors.
    return EngineParams(
        version="priors",
        values={**FIXED_VALUES, **{name: p.value for name, p in PRIORS.items()}},
    )


DEFAULT_PARAMS: EngineParams = _default_params()

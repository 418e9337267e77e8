"""Hardware profiles as data: wafers (Cerebras WSE-3) and GPUs (H100, H200, B200, GB200).

Figures are vendor datasheet values (see reference/simengine-notes.md). Nothing here is
fitted: fitted efficiencies and latencies live in :mod:`simengine.params`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

HardwareKind = Literal["wafer", "gpu"]


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator (a whole wafer or a single GPU).

    Bandwidths are bytes/s, FLOP/s are dense peak; latencies are seconds.
    ``link_*`` is the fast fabric between nodes of one replica (NVLink inside a GPU
    node, the CS-3 system I/O between wafers); ``scaleout_*`` joins GPU nodes
    (InfiniBand) when a replica spans several 8-GPU nodes.
    """

    key: str
    name: str
    kind: HardwareKind
    memory_bytes: float
    memory_bandwidth: float
    peak_flops_16bit: float
    peak_flops_8bit: float
    link_latency: float
    link_bandwidth: float
    scaleout_latency: float
    scaleout_bandwidth: float
    # Dense 4-bit (FP4) peak; 0 = no 4-bit tensor cores (Hopper, the wafer: 4-bit weights
    # are widened to 16 bits before they multiply, :meth:`mma_peak`).
    peak_flops_4bit: float = 0.0
    # Part of memory left for weights + KV once runtime buffers and activations are out.
    usable_memory_fraction: float = 0.9
    # Largest tensor-parallel group on the fast fabric (one NVLink domain).
    max_tensor_parallel: int = 1
    cores: int = 0
    # Tensor-core generation (GPUs: "hopper", "blackwell"): parameters fitted per
    # generation (``<generation>@<software>:<name>``) are looked up between the device's
    # own and its kind's (EngineParams.hardware).
    generation: str = ""
    # The CPU family of the host the GPU is served from (GPUs: "x86" for DGX/HGX H100,
    # H200 and B200, "grace" for GB200 NVL72's Arm Neoverse V2): the server's per-request
    # work each decode step runs there (simengine.host, params ``host:<host>:per_request``).
    # "" (wafers): no host term.
    host: str = ""
    # Query rows one tensor-core tile of a latent-attention (MLA) decode kernel holds
    # (simengine.parallel.latent_decode_padding): the query heads each GPU attends for,
    # times the query tokens of a verify step, fill tiles of this many rows, and a short
    # tile computes as a full one. Hopper 64 (FlashMLA's kBlockM, one warpgroup's wgmma
    # M), Blackwell 128 (the CUTLASS / TensorRT-LLM MLA decode kernels' 128-head tile on
    # one SM's tcgen05 MMA); 0 (wafers): no such tile.
    latent_decode_rows: int = 0

    @property
    def usable_memory_bytes(self) -> float:
        """Memory available for weights and KV cache on one node."""
        return self.memory_bytes * self.usable_memory_fraction

    def peak_flops(self, bytes_per_param: float) -> float:
        """Dense peak of tensor cores multiplying operands of ``bytes_per_param``: 4-bit
        when <= 0.5 byte (Blackwell; elsewhere the 8-bit rate), 8-bit when <= 1 byte,
        else 16-bit."""
        if bytes_per_param <= 0.5 and self.peak_flops_4bit:
            return self.peak_flops_4bit
        return self.peak_flops_8bit if bytes_per_param <= 1.0 else self.peak_flops_16bit

    def mma_peak(
        self, weight_bytes: float, activation_bytes: float = 0.0, widened: float = 1.0
    ) -> float:
        """Dense peak of a weight GEMM whose weights hold ``weight_bytes`` per value and
        whose activations ``activation_bytes`` (0: quantized like the weights).

        A tensor-core instruction takes both operands at one precision, so the GEMM runs
        at the rate of the wider one: FP4 weights with FP8 activations (W4A8) at the
        8-bit rate, with BF16 activations (W4A16) at the 16-bit rate. A device without
        4-bit tensor cores widens 4-bit weights to 16 bits before they multiply (W4A16:
        TensorRT-LLM runs MXFP4 experts on Hopper with BF16 activations, on Blackwell
        with MXFP8 ones; examples/models/core/gpt_oss/README.md, "MoE Support Matrix").

        ``widened``: the share of that rate a GEMM keeps when its weights are widened
        (:meth:`widens`): a mixed-input GEMM converts each weight tile from 4 bits to the
        tensor cores' width in registers, with its block scales, before the MMA takes it
        (CUTLASS's Hopper mixed-input mainloop: shared memory -> registers -> convert and
        dequantize -> wgmma; examples/55_hopper_mixed_dtype_gemm), work a native GEMM
        does not do, so a compute-bound one runs below the 16-bit rate (NVIDIA/cutlass
        #1549, "Hopper mixed precision gemm always worse than FP8"; vllm-project/vllm
        #8006: "mixed-precision inference provides improvements in memory-bound
        scenarios, not compute-bound"). Params ``gpu:eta_widened``; 1 elsewhere.
        """
        if self.widens(weight_bytes):  # multiplied at 16 bits (mma_operand_bytes)
            return self.peak_flops_16bit * widened
        return self.peak_flops(max(weight_bytes, activation_bytes))

    def widens(self, weight_bytes: float) -> bool:
        """True when weights of ``weight_bytes`` per value must be widened before they
        multiply: 4-bit weights on a device without 4-bit tensor cores (Hopper)."""
        return weight_bytes <= 0.5 and not self.peak_flops_4bit

    def mma_operand_bytes(self, weight_bytes: float, activation_bytes: float = 0.0) -> float:
        """Bytes per value of the operands a weight GEMM's tensor-core instruction takes
        (:meth:`mma_peak`): the wider of its weights and activations (0: quantized like
        the weights), 16 bits for 4-bit weights where there are no 4-bit tensor cores."""
        if self.widens(weight_bytes):
            return 2.0
        return max(weight_bytes, activation_bytes)

    def to_dict(self) -> dict[str, object]:
        """Plain dict (JSON-friendly) of the profile."""
        return asdict(self)


# Link bandwidths are per GPU and per direction: what one GPU can send while it receives
# as much (the ring all-reduce and the all-to-all formulas divide the bytes a GPU sends
# by it). NVIDIA quotes NVLink as the sum of both directions: NVLink 4 (H100/H200) "900
# GB/s" is 18 links x 25 GB/s each way = 450 GB/s per direction, NVLink 5 (Blackwell)
# "1.8 TB/s" is 900 GB/s per direction (nccl-tests all-reduce bus bandwidth on an HGX
# H100 tops out near 450 GB/s). InfiniBand NDR 400 Gb/s is already per direction.
_NVLINK4 = 450e9
_IB_NDR = 50e9
_NVLINK5 = 900e9

HARDWARE: dict[str, HardwareProfile] = {
    "wse-3": HardwareProfile(
        key="wse-3",
        name="Cerebras WSE-3 (CS-3)",
        kind="wafer",
        memory_bytes=44e9,  # on-chip SRAM
        memory_bandwidth=21e15,
        # Cerebras quotes 125 PFLOP/s "AI compute" (sparse FP16); no dense figure is
        # published, so the same number is used and the wafer prefill efficiency is low.
        peak_flops_16bit=125e15,
        peak_flops_8bit=125e15,
        link_latency=1e-6,  # nominal; the effective per-hop latency is fitted (t_link)
        link_bandwidth=150e9,  # ~1.2 Tb/s system I/O
        scaleout_latency=1e-6,
        scaleout_bandwidth=150e9,
        max_tensor_parallel=1,
        cores=900_000,
    ),
    "h100": HardwareProfile(
        key="h100",
        name="NVIDIA H100 SXM",
        kind="gpu",
        memory_bytes=80e9,
        memory_bandwidth=3.35e12,
        peak_flops_16bit=989e12,
        peak_flops_8bit=1979e12,
        link_latency=1e-6,
        link_bandwidth=_NVLINK4,
        scaleout_latency=5e-6,
        scaleout_bandwidth=_IB_NDR,
        max_tensor_parallel=8,
        generation="hopper",
        host="x86",
        latent_decode_rows=64,
    ),
    "h200": HardwareProfile(
        key="h200",
        name="NVIDIA H200 SXM",
        kind="gpu",
        memory_bytes=141e9,
        memory_bandwidth=4.8e12,
        peak_flops_16bit=989e12,
        peak_flops_8bit=1979e12,
        link_latency=1e-6,
        link_bandwidth=_NVLINK4,
        scaleout_latency=5e-6,
        scaleout_bandwidth=_IB_NDR,
        max_tensor_parallel=8,
        generation="hopper",
        host="x86",
        latent_decode_rows=64,
    ),
    # DGX/HGX B200 (the system published benchmarks run on): 1,440 GB HBM3e over 8 GPUs
    # = 180 GB each, 8 TB/s; dense BF16 2.25 / FP8 4.5 / FP4 9 PFLOP/s (datasheet
    # figures are with sparsity, twice these); NVLink 5 1.8 TB/s per GPU (both
    # directions), 8-GPU domain.
    "b200": HardwareProfile(
        key="b200",
        name="NVIDIA B200 (DGX/HGX B200)",
        kind="gpu",
        memory_bytes=180e9,
        memory_bandwidth=8e12,
        peak_flops_16bit=2250e12,
        peak_flops_8bit=4500e12,
        peak_flops_4bit=9000e12,
        link_latency=1e-6,
        link_bandwidth=_NVLINK5,
        scaleout_latency=5e-6,
        scaleout_bandwidth=_IB_NDR,
        max_tensor_parallel=8,
        generation="blackwell",
        host="x86",
        latent_decode_rows=128,
    ),
    # GB200 NVL72: 72 Blackwell GPUs in ONE NVLink 5 domain (130 TB/s / 72 = 1.8 TB/s
    # per GPU, both directions), so tensor- and expert-parallel groups up to 72 stay on NVLink. HBM3e
    # 13.4 TB / 72 = 186 GB and 576 TB/s / 72 = 8 TB/s per GPU; dense BF16 2.5 / FP8 5 /
    # FP4 10 PFLOP/s per GPU (NVIDIA GB200 NVL72 datasheet: 360/720/1,440 PF for the
    # rack with sparsity, half that dense). Scale-out beyond the rack: 800 Gb/s ConnectX-8 per GPU.
    "gb200-nvl72": HardwareProfile(
        key="gb200-nvl72",
        name="NVIDIA GB200 NVL72",
        kind="gpu",
        memory_bytes=186e9,
        memory_bandwidth=8e12,
        peak_flops_16bit=2500e12,
        peak_flops_8bit=5000e12,
        peak_flops_4bit=10000e12,
        link_latency=1e-6,
        link_bandwidth=_NVLINK5,
        scaleout_latency=5e-6,
        scaleout_bandwidth=100e9,
        max_tensor_parallel=72,
        generation="blackwell",
        host="grace",
        latent_decode_rows=128,
    ),
}

"""Hardware profiles as data: wafers (Cerebras WSE-3) and GPUs (H100, H200, B200).

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
    # Part of memory left for weights + KV once runtime buffers and activations are out.
    usable_memory_fraction: float = 0.9
    # Largest tensor-parallel group on the fast fabric (one NVLink domain).
    max_tensor_parallel: int = 1
    cores: int = 0

    @property
    def usable_memory_bytes(self) -> float:
        """Memory available for weights and KV cache on one node."""
        return self.memory_bytes * self.usable_memory_fraction

    def peak_flops(self, bytes_per_param: float) -> float:
        """Dense peak at the precision of the weights (8-bit tensor cores when <= 1 byte)."""
        return self.peak_flops_8bit if bytes_per_param <= 1.0 else self.peak_flops_16bit

    def to_dict(self) -> dict[str, object]:
        """Plain dict (JSON-friendly) of the profile."""
        return asdict(self)


_NVLINK4 = 900e9  # H100/H200 NVLink 4, bytes/s per GPU
_IB_NDR = 50e9  # 400 Gb/s InfiniBand per GPU

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
    ),
    "b200": HardwareProfile(
        key="b200",
        name="NVIDIA B200",
        kind="gpu",
        memory_bytes=192e9,
        memory_bandwidth=8e12,
        peak_flops_16bit=2250e12,
        peak_flops_8bit=4500e12,
        link_latency=1e-6,
        link_bandwidth=1800e9,  # NVLink 5
        scaleout_latency=5e-6,
        scaleout_bandwidth=_IB_NDR,
        max_tensor_parallel=8,
    ),
}

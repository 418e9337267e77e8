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
"""

from __future__ import annotations

from .hardware import HardwareProfile


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


def collective_seconds(
    hw: HardwareProfile,
    layers: int,
    activation_bytes: float,
    tensor_parallel: int,
    pipeline_stages: int,
    allreduce_base: float,
) -> float:
    """Communication of one forward pass on GPUs: two all-reduces per layer over the TP
    group plus the pipeline hops, for ``activation_bytes`` of activations."""
    t = 2 * layers * allreduce_seconds(hw, activation_bytes, tensor_parallel, allreduce_base)
    return t + pipeline_hops_seconds(hw, activation_bytes, pipeline_stages)


def wafer_hop_seconds(
    t_link: float, hidden_size: int, activation_bytes: float, link_bandwidth: float
) -> float:
    """Physical wafer-to-wafer hop: link latency + one token's activations over the I/O."""
    return t_link + hidden_size * activation_bytes / link_bandwidth

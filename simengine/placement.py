"""Placement: how many wafers/GPUs one replica needs and how many streams a pool holds."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .errors import SimEngineError
from .hardware import HARDWARE, HardwareProfile
from .model import ModelSpec


@dataclass(frozen=True)
class Placement:
    """Result of :func:`placement`.

    ``wafers_per_replica`` is set on wafers (pipeline depth), ``tensor_parallel`` on
    GPUs; ``pipeline_stages`` is the number of nodes a token crosses in sequence.
    ``streams_per_replica`` is the concurrency one replica supports at
    ``context_tokens`` of context: KV-cache capacity limits it (and, on wafers, so do
    the pipeline slots). ``replicas`` and ``stream_capacity`` are None without a pool.
    """

    model: str
    device: str
    kind: str
    nodes: int | None
    nodes_per_replica: int
    wafers_per_replica: int | None
    tensor_parallel: int | None
    pipeline_stages: int
    layers_per_stage: tuple[int, ...]
    replicas: int | None
    kv_bytes_free_per_replica: float
    kv_tokens_per_replica: float
    context_tokens: int
    streams_per_replica: int
    stream_capacity: int | None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict."""
        data = asdict(self)
        data["layers_per_stage"] = list(self.layers_per_stage)
        return data


def resolve_device(device: str) -> HardwareProfile:
    """HardwareProfile for a device key, or SimEngineError listing the known keys."""
    try:
        return HARDWARE[device]
    except KeyError:
        raise SimEngineError(f"unknown device {device!r}; known: {sorted(HARDWARE)}") from None


def _split_layers(layers: int, stages: int) -> tuple[int, ...]:
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if i < extra else 0) for i in range(stages))


def _wafer_stages(model: ModelSpec, hw: HardwareProfile, forced: int | None) -> int:
    # Each wafer holds whole layers: their weights plus room for one full-window
    # stream's KV of those layers (weights stay resident, so nothing may spill).
    per_layer = (model.weight_bytes + model.window_kv_bytes) / model.layers
    per_wafer = math.floor(hw.usable_memory_bytes / per_layer)
    if per_wafer < 1 and model.is_moe:
        # A mixture of experts whose layer outgrows a wafer spreads each layer's experts
        # over wafers (the engine charges the cross-wafer expert hops, simengine.moe).
        needed = math.ceil(model.layers * per_layer / hw.usable_memory_bytes)
        if forced is not None and forced < needed:
            raise SimEngineError(
                f"{model.name} needs at least {needed} {hw.key} wafers per replica, got {forced}"
            )
        return needed if forced is None else forced
    if per_wafer < 1:
        raise SimEngineError(
            f"{model.name}: one layer needs {per_layer / 1e9:.1f} GB (weights + KV for the "
            f"{model.context_window}-token window) but a {hw.key} holds "
            f"{hw.usable_memory_bytes / 1e9:.1f} GB usable"
        )
    needed = math.ceil(model.layers / per_wafer)
    if forced is None:
        return needed
    if forced < needed:
        raise SimEngineError(
            f"{model.name} needs at least {needed} {hw.key} wafers per replica, got {forced}"
        )
    if forced > model.layers:
        raise SimEngineError(
            f"{model.name} has {model.layers} layers; cannot spread it over {forced} wafers"
        )
    return forced


def _gpu_layout(model: ModelSpec, hw: HardwareProfile, forced: int | None) -> tuple[int, int]:
    need = model.weight_bytes + model.window_kv_bytes

    def fits(tp: int, pp: int) -> bool:
        return need <= tp * pp * hw.usable_memory_bytes

    if forced is not None:
        if forced < 1:
            raise SimEngineError(f"nodes_per_replica must be >= 1, got {forced}")
        tp = min(forced, hw.max_tensor_parallel)
        if forced % tp:
            raise SimEngineError(
                f"{forced} GPUs per replica is not a multiple of the NVLink domain ({tp})"
            )
        if not fits(tp, forced // tp):
            raise SimEngineError(
                f"{model.name} needs {need / 1e9:.0f} GB (weights + one full-window KV); "
                f"{forced} x {hw.key} hold {forced * hw.usable_memory_bytes / 1e9:.0f} GB"
            )
        return tp, forced // tp
    tp = 1
    while tp <= hw.max_tensor_parallel:
        if fits(tp, 1):
            return tp, 1
        tp *= 2
    tp = hw.max_tensor_parallel
    # Beyond one NVLink domain: pipeline over nodes (adds scale-out hops per token).
    return tp, math.ceil(need / (tp * hw.usable_memory_bytes))


def placement(
    model: ModelSpec,
    device: str,
    nodes: int | None = None,
    *,
    context_tokens: int | None = None,
    nodes_per_replica: int | None = None,
    streams_per_stage: float = 1.0,
) -> Placement:
    """Place ``model`` on ``device``: nodes per replica, replicas in a pool, stream capacity.

    Wafers: layers are split over the fewest wafers whose SRAM holds their weights plus
    one full-window KV reserve (Spark: 1, Sol: a pipeline of several). GPUs: the
    smallest power-of-two tensor-parallel group that holds the same, with pipeline
    stages over nodes only beyond one NVLink domain.

    ``context_tokens`` (default: the context window, the worst case) sets how many
    concurrent streams the free KV memory holds. ``nodes_per_replica`` forces a deeper
    pipeline / wider group than the minimum. Raises SimEngineError when the model
    cannot fit, or when ``nodes`` is smaller than one replica.
    """
    hw = resolve_device(device)
    if nodes is not None and (not isinstance(nodes, int) or nodes < 1):
        raise SimEngineError(f"pool size must be a positive integer, got {nodes!r}")
    ctx = model.context_window if context_tokens is None else int(context_tokens)
    if ctx < 1:
        raise SimEngineError(f"context_tokens must be >= 1, got {context_tokens!r}")

    if hw.kind == "wafer":
        stages = _wafer_stages(model, hw, nodes_per_replica)
        tp, npr = None, stages
        slots = max(1, math.floor(stages * streams_per_stage))
    else:
        tp, stages = _gpu_layout(model, hw, nodes_per_replica)
        npr = tp * stages
        slots = None

    kv_free = npr * hw.usable_memory_bytes - model.weight_bytes
    kv_tokens = kv_free / model.kv_bytes_per_token
    streams = max(1, math.floor(kv_tokens / ctx))  # placement reserved >= 1 full window
    if slots is not None:
        streams = min(streams, slots)

    replicas = None
    if nodes is not None:
        replicas = nodes // npr
        if replicas < 1:
            raise SimEngineError(
                f"{model.name} needs {npr} {hw.key} per replica but the pool has only {nodes}"
            )
    return Placement(
        model=model.name,
        device=hw.key,
        kind=hw.kind,
        nodes=nodes,
        nodes_per_replica=npr,
        wafers_per_replica=npr if hw.kind == "wafer" else None,
        tensor_parallel=tp,
        pipeline_stages=stages,
        layers_per_stage=_split_layers(model.layers, stages),
        replicas=replicas,
        kv_bytes_free_per_replica=kv_free,
        kv_tokens_per_replica=kv_tokens,
        context_tokens=ctx,
        streams_per_replica=streams,
        stream_capacity=None if replicas is None else replicas * streams,
    )

"""Wafers (CS-3): one token's pass through a served model's pipeline, and its costs.

Wafers are latency-bound, not bandwidth-bound: per-token time is the sum over layers of
(t_layer + the layer's active bytes on its cores / (SRAM bandwidth x eta_sram)) +
(P - 1) wafer-to-wafer hops (+ two expert hops per MoE layer when an MoE spans wafers,
:func:`simengine.moe.wafer_expert_hops`) + t_fixed; t_layer is calibrated per software
version, a hop is physical (link latency + activation transfer, about a microsecond:
:func:`simengine.parallel.wafer_hop_seconds`). Speculative decoding on a wafer: a
verify pass (the pass + the draft tokens' compute on the busiest wafer) and the
drafter's passes (:mod:`simengine.speculative`).

``s``: a served deployment (:mod:`simengine.perf`, ``_serve``) on a wafer.
"""

from __future__ import annotations

from .moe import compute_peak, wafer_expert_hops
from .parallel import wafer_hop_seconds
from .placement import placement
from .served import Served
from .speculative import Speculation, drafter_shape, wafer_drafter_seconds


def hop_seconds(s: Served) -> float:
    return wafer_hop_seconds(
        s.params.get("wafer:t_link"),
        s.model.hidden_size,
        s.params.get("activation_bytes"),
        s.hw.link_bandwidth,
    )


def pass_seconds(s: Served) -> float:
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
    return (
        m.layers * per_layer + (place.pipeline_stages - 1) * hop_seconds(s) + expert_hop_seconds(s)
    )


def expert_hop_seconds(s: Served) -> float:
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


def speculative_seconds(s: Served, spec: Speculation | None) -> tuple[float, float]:
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

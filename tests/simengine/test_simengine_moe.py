"""Mixture of experts (issue 28): expert sizes, weight traffic, expert parallelism, wafers."""

from __future__ import annotations

import pytest

from simengine import DEFAULT_PARAMS, HARDWARE, Deployment, SimEngineError, perf, placement, wafer
from simengine.moe import all_to_all_seconds, expert_sizes, experts_touched, wafer_expert_hops
from simengine.spec import model_from_spec, parse_spec, predict_spec

# DeepSeek-V3-shaped: 671B total, 37B active, 256 routed experts, 8 per token, 1 shared.
DSV3 = {
    "name": "dsv3", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
    "head_dim": 128, "params_b": 671, "active_params_b": 37, "dtype": "fp8",
    "experts": 256, "experts_per_token": 8, "shared_experts": 1,
    "kv_bytes_per_token": 70272,
}  # fmt: skip


def test_expert_sizes_follow_total_and_active():
    e, n = expert_sizes(671e9, 37e9, 256, 8, 1)
    assert e == pytest.approx((671e9 - 37e9) / 248)
    assert n == pytest.approx(671e9 - 257 * e)
    # The sizes reproduce both counts.
    assert n + 257 * e == pytest.approx(671e9)
    assert n + 9 * e == pytest.approx(37e9)
    with pytest.raises(SimEngineError, match="non-expert part would be negative"):
        expert_sizes(100e9, 10e9, 16, 8, 0)


def test_distinct_experts_touched_grow_with_batch_and_saturate():
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    seq = [experts_touched(256, 8, b) for b in (1, 2, 8, 32, 128, 1024)]
    assert seq == sorted(seq)
    assert seq[-1] == pytest.approx(256, rel=1e-3)
    assert experts_touched(256, 8, 128) / 256 == pytest.approx(1 - (1 - 8 / 256) ** 128)


def test_decode_weight_bytes_by_component_dtype():
    fp8 = model_from_spec(DSV3)
    mixed = model_from_spec({**DSV3, "attention_dtype": "bf16", "expert_dtype": "fp4"})
    e = fp8.per_expert_params
    # Batch 1: non-expert + shared + k routed experts, each at its own bytes.
    assert fp8.decode_weight_bytes(1) == pytest.approx(fp8.non_expert_params + 9 * e)
    assert mixed.decode_weight_bytes(1) == pytest.approx(fp8.non_expert_params * 2.0 + 9 * e * 0.5)
    assert mixed.weight_bytes == pytest.approx(fp8.non_expert_params * 2.0 + 257 * e * 0.5)
    # A big batch reads (nearly) every expert: weight traffic rises with the batch.
    assert fp8.decode_weight_bytes(256) > 10 * fp8.decode_weight_bytes(1)


def test_shared_experts_move_parameters_from_non_expert_to_experts():
    none = model_from_spec({**DSV3, "shared_experts": 0})
    one = model_from_spec(DSV3)
    assert one.per_expert_params == pytest.approx(none.per_expert_params)
    assert one.non_expert_params == pytest.approx(none.non_expert_params - one.per_expert_params)
    fp4_experts = {**DSV3, "expert_dtype": "fp4"}
    assert (
        model_from_spec({**fp4_experts, "shared_experts": 1}).weight_bytes
        < model_from_spec({**fp4_experts, "shared_experts": 0}).weight_bytes
    )


def test_all_to_all_costs_bytes_over_the_fabric_and_grows_off_nvlink():
    nv = HARDWARE["h100"]
    kw = {"latency": nv.link_latency, "bandwidth": nv.link_bandwidth, "base": 5e-6}
    assert all_to_all_seconds(64, 8, 7168, 2.0, 1, **kw) == 0.0
    small = all_to_all_seconds(8, 8, 7168, 2.0, 8, **kw)
    big = all_to_all_seconds(512, 8, 7168, 2.0, 8, **kw)
    assert big > small
    # bytes: (512 / 8) x 8 x 7168 x 2 x 7/8 per GPU per direction, twice.
    assert big - small == pytest.approx(2 * (504 / 8) * 8 * 7168 * 2 * 7 / 8 / nv.link_bandwidth)
    ib = all_to_all_seconds(
        512, 8, 7168, 2.0, 8, latency=nv.scaleout_latency, bandwidth=nv.scaleout_bandwidth,
        base=5e-6,
    )  # fmt: skip
    # NVLink 4 moves 450 GB/s each way per GPU, NDR InfiniBand 50 GB/s: ~9x in bytes.
    assert ib > 5 * big


def _moe_spec(hardware, devices, ep, **extra):
    return {
        "model": DSV3, "hardware": hardware, "devices": devices, "expert_parallel": ep,
        "concurrency": 64, "input_tokens": 1000, "output_tokens": 500, **extra,
    }  # fmt: skip


def test_expert_parallel_all_to_all_is_cheaper_inside_one_nvlink_domain():
    # 16 GPUs: two 8-GPU HGX nodes (the all-to-all crosses InfiniBand) vs 16 GPUs of one
    # GB200 NVL72 domain (NVLink). Same HBM bandwidth per GPU (8 TB/s): B200 vs GB200,
    # and the same layout (TP 8 x 2 stages) so only the all-to-all's fabric differs much.
    hgx = predict_spec(_moe_spec("b200", 16, 16, tensor_parallel=8))
    nvl = predict_spec(_moe_spec("gb200-nvl72", 16, 16, tensor_parallel=8))
    assert hgx["tensor_parallel"] == nvl["tensor_parallel"] == 8
    assert nvl["time_per_output_token_seconds"] < 0.9 * hgx["time_per_output_token_seconds"]


def test_expert_parallel_adds_the_all_to_all_only_where_tokens_are_spread():
    # Attending tensor-parallel, every GPU holds every token: expert parallelism changes
    # the experts' split, not the collectives (the outputs are all-reduced as under TP;
    # simengine.moe.dispatches). Attending data-parallel, each GPU sends its own tokens
    # to their experts and back: an all-to-all and no all-reduce. (Until issue 28's
    # twenty-eighth round every expert-parallel step paid the all-to-all.)
    def collectives(**extra):
        r = predict_spec(_moe_spec("gb200-nvl72", 8, extra.pop("ep"), **extra))
        return r["time_per_output_token_parts"]["collectives"]

    tp = collectives(ep=1)
    assert collectives(ep=8) == pytest.approx(tp, rel=1e-9)
    dp = collectives(ep=8, attention_data_parallel=True)
    assert dp > 0 and dp != pytest.approx(tp)
    with pytest.raises(SimEngineError, match="multiple of expert_parallel"):
        parse_spec(_moe_spec("gb200-nvl72", 12, 8))
    with pytest.raises(SimEngineError, match="needs a mixture of experts"):
        dense = {**DSV3, "active_params_b": 671}
        for key in ("experts", "experts_per_token", "shared_experts"):
            dense.pop(key)
        parse_spec({**_moe_spec("gb200-nvl72", 8, 8), "model": dense})
    with pytest.raises(SimEngineError, match="GPUs only"):
        parse_spec(_moe_spec("cs-3", None, 2))


def test_wafer_expert_hops_are_two_per_moe_layer():
    one = wafer_expert_hops(1, 8, 7168, 2.0, hop_latency=1e-6, link_bandwidth=150e9)
    assert one == pytest.approx(2 * (1e-6 + 8 * 7168 * 2 / 150e9))
    assert wafer_expert_hops(61, 8, 7168, 2.0, hop_latency=1e-6, link_bandwidth=150e9) == (
        pytest.approx(61 * one)
    )


KIMI = {
    "name": "kimi-k2", "layers": 61, "hidden": 7168, "heads": 64, "kv_heads": 64,
    "head_dim": 128, "params_b": 1040, "active_params_b": 32.6, "experts": 384,
    "experts_per_token": 8, "shared_experts": 1, "kv_bytes_per_token": 70272,
}  # fmt: skip


def _wafer_served(model):
    spec = {"model": model, "hardware": "cs-3", "speculative": False, "software": "2026.08"}
    m, dep, _ = parse_spec(spec)
    place = placement(m, "wse-3", context_tokens=m.context_window)
    dep = Deployment("wse-3", place.nodes_per_replica, nodes_per_replica=place.nodes_per_replica,
                     software="2026.08")  # fmt: skip
    return perf._serve(m, dep, DEFAULT_PARAMS)


def test_a_trillion_parameter_moe_on_wafers_pays_two_expert_hops_per_layer():
    # Kimi-K2-shaped 1T MoE (384 experts, 8 active, 1 shared) in BF16 spans many wafers:
    # each of its 61 layers sends the token to the wafers holding its experts and back.
    s = _wafer_served(KIMI)
    assert s.place.pipeline_stages > 20
    hops = wafer.expert_hop_seconds(s)
    assert hops == pytest.approx(
        wafer_expert_hops(61, 8, 7168, 2.0, hop_latency=1e-6, link_bandwidth=150e9)
    )
    assert s.knobs.wafer_pass > hops > 0.1 * s.knobs.wafer_pass
    # One wafer: the experts are local (no expert hops); dense: none either.
    small = {**KIMI, "name": "small-moe", "params_b": 20, "active_params_b": 3.6, "experts": 32,
             "experts_per_token": 4, "layers": 24, "hidden": 2880, "dtype": "fp8"}  # fmt: skip
    assert _wafer_served(small).place.pipeline_stages == 1
    assert wafer.expert_hop_seconds(_wafer_served(small)) == 0.0
    dense = {"name": "qwen3-32b", "layers": 64, "hidden": 5120, "heads": 64, "kv_heads": 8,
             "head_dim": 128, "params_b": 32.8}  # fmt: skip
    assert wafer.expert_hop_seconds(_wafer_served(dense)) == 0.0


def test_an_moe_layer_larger_than_a_wafer_spreads_its_experts_over_wafers():
    # 2T parameters in BF16 over 30 layers: ~133 GB a layer, more than a wafer's SRAM.
    # A dense model that size cannot be placed; the MoE spreads its experts.
    giant = {**KIMI, "name": "giant-moe", "params_b": 2000, "active_params_b": 60, "layers": 30}
    s = _wafer_served(giant)
    assert s.place.pipeline_stages > 30
    assert wafer.expert_hop_seconds(s) > 0
    dense = {k: v for k, v in giant.items() if "expert" not in k}
    dense["active_params_b"] = 2000
    with pytest.raises(SimEngineError, match="one layer needs"):
        placement(model_from_spec(dense), "wse-3")


def test_spec_expert_fields_are_validated():
    with pytest.raises(SimEngineError, match="experts_per_token is required"):
        model_from_spec({k: v for k, v in DSV3.items() if k != "experts_per_token"})
    with pytest.raises(SimEngineError, match="must be < model.experts"):
        model_from_spec({**DSV3, "experts_per_token": 256})
    with pytest.raises(SimEngineError, match="needs model.experts"):
        model_from_spec({k: v for k, v in DSV3.items() if k != "experts"})
    with pytest.raises(SimEngineError, match="active_params_b < model.params_b"):
        model_from_spec({**DSV3, "active_params_b": 671})
    with pytest.raises(SimEngineError, match="model.expert_dtype must be one of"):
        model_from_spec({**DSV3, "expert_dtype": "fp2"})
    m = model_from_spec(DSV3)
    assert (m.experts, m.experts_per_token, m.shared_experts) == (256, 8, 1)
    assert m.expert_layout == (256, 8)

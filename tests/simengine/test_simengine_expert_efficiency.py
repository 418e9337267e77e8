"""The routed experts' GEMM efficiency (issue 28, seventeenth round).

The term isolated: a served MoE layer's routed-expert GEMMs reach ``gpu:eta_expert`` of
the rate a dense GEMM reaches (eta_flop) on the same tensor cores: the FLOPs of a
token's k routed experts take 1 / eta_expert times as long, its attention, dense layers
and shared experts (every token, a dense GEMM) do not. It shows where expert FLOPs bind:
an MoE's prefill and its decode at large batch; a memory-bound decode step (the weights
read once for the batch) and any dense model are unchanged.
"""

from __future__ import annotations

import pytest

from simengine.hardware import HARDWARE
from simengine.moe import compute_peak, expert_peak
from simengine.params import DEFAULT_PARAMS
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_openloop import LLAMA_70B

# Llama 4 Maverick's layout (one routed and one shared expert per token) and Qwen3-235B's
# (eight routed, none shared).
SHARED = {
    "name": "moe-shared", "layers": 48, "hidden": 5120, "heads": 40, "kv_heads": 8,
    "head_dim": 128, "params_b": 400.0, "active_params_b": 17.0, "experts": 128,
    "experts_per_token": 1, "shared_experts": 1, "dtype": "fp8",
}  # fmt: skip
MOE = {
    "name": "moe", "layers": 94, "hidden": 4096, "heads": 64, "kv_heads": 4,
    "head_dim": 128, "params_b": 235.0, "active_params_b": 22.0, "experts": 128,
    "experts_per_token": 8, "shared_experts": 0, "dtype": "fp8",
}  # fmt: skip
DENSE = LLAMA_70B  # FP8


def test_only_the_routed_experts_flops_slow_down():
    m, hw = model_from_spec(SHARED), HARDWARE["b200"]
    non_expert, expert = m.active_split
    routed = m.expert_layout[1] * m.per_expert_params
    assert 0 < routed < expert  # one routed and one shared expert per token
    peak_e = expert_peak(m, hw)
    for eff in (1.0, 0.5, 0.25):
        seconds = (non_expert + expert) / compute_peak(m, hw, eff)
        base = (non_expert + expert) / compute_peak(m, hw)
        assert seconds - base == pytest.approx(routed / peak_e * (1 / eff - 1), rel=1e-12)
    assert expert_peak(m, hw, 0.5) == pytest.approx(0.5 * peak_e)
    dense = model_from_spec(DENSE)
    assert compute_peak(dense, hw, 0.25) == compute_peak(dense, hw)


def assert_prefill_slows_and_decode_does_not(spec, param, slows):
    """One long prompt and its lone stream's decode with ``param`` at 0.9 and at 0.3: the
    prefill (compute-bound) slows by over 20 % when ``slows``, else not at all; the
    decode step (one stream: it reads the weights, barely multiplies) stays put."""
    fast, slow = (predict_spec(spec, DEFAULT_PARAMS.with_values({param: v})) for v in (0.9, 0.3))
    if slows:
        assert slow["ttft_seconds"] > 1.2 * fast["ttft_seconds"]
    else:
        assert slow["ttft_seconds"] == fast["ttft_seconds"]
    assert slow["time_per_output_token_seconds"] == pytest.approx(
        fast["time_per_output_token_seconds"], rel=1e-3
    )


@pytest.mark.parametrize(("model", "moe"), [(MOE, True), (DENSE, False)])
def test_prefill_slows_where_expert_flops_bind(model, moe):
    spec = {"model": model, "hardware": "b200", "devices": 8, "tensor_parallel": 8,
            "concurrency": 1, "input_tokens": 16000, "output_tokens": 100,
            "software": "2026-02"}  # fmt: skip
    assert_prefill_slows_and_decode_does_not(spec, "gpu:eta_expert", moe)


def assert_large_batch_decode_slows(model, hardware, devices, software, param, low):
    """2,048 streams of ``model`` decoding on ``devices`` GPUs (prefill elsewhere): with
    ``param`` at ``low`` instead of 0.9 the same batch takes longer a token (its experts'
    GEMMs bind)."""
    spec = {"model": model, "hardware": hardware, "devices": devices,
            "tensor_parallel": devices, "concurrency": 2048, "max_batch_size": 2048,
            "input_tokens": 100, "output_tokens": 2000, "disaggregated_prefill": True,
            "software": software}  # fmt: skip
    fast, slow = (predict_spec(spec, DEFAULT_PARAMS.with_values({param: v})) for v in (0.9, low))
    assert slow["batch"] == fast["batch"] == 2048
    assert slow["time_per_output_token_seconds"] > fast["time_per_output_token_seconds"]


def test_a_large_batch_decode_turns_compute_bound_on_the_experts():
    assert_large_batch_decode_slows(MOE, "b200", 8, "2026-02", "gpu:eta_expert", 0.05)

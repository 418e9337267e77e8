"""GEMMs of widened 4-bit weights (issue 28, twenty-ninth round).

The term isolated: a device without 4-bit tensor cores (Hopper) widens 4-bit weights to
16 bits in registers before they multiply (a mixed-input GEMM), so their GEMMs run at
``gpu:eta_widened`` of the 16-bit rate they already ran at. Only those GEMMs: 8- and
16-bit weights, and every weight on Blackwell (native FP4 tensor cores), are unchanged;
a memory-bound step (one stream's decode) is unchanged too, since the term is on the
FLOP rate, not on the weights' bytes.
"""

from __future__ import annotations

import pytest

from simengine.hardware import HARDWARE
from simengine.moe import attention_peak, compute_peak, expert_peak
from simengine.params import DEFAULT_PARAMS
from simengine.spec import model_from_spec

from .test_simengine_expert_efficiency import (
    assert_large_batch_decode_slows,
    assert_prefill_slows_and_decode_does_not,
)

# gpt-oss-120b's layout: MXFP4 routed experts, BF16 attention.
MXFP4_MOE = {
    "name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
    "head_dim": 64, "params_b": 117.0, "active_params_b": 5.1, "experts": 128,
    "experts_per_token": 4, "shared_experts": 0, "dtype": "mxfp4", "attention_dtype": "bf16",
}  # fmt: skip
# A dense 70B model at 4-bit weights (every GEMM widened on Hopper) and at FP8.
DENSE_INT4 = {
    "name": "dense-w4", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
    "head_dim": 128, "params_b": 70.6, "dtype": "int4",
}  # fmt: skip
DENSE_FP8 = {**DENSE_INT4, "name": "dense-fp8", "dtype": "fp8"}


def test_only_4_bit_weights_on_a_device_without_4_bit_tensor_cores_are_widened():
    h100, h200, b200 = HARDWARE["h100"], HARDWARE["h200"], HARDWARE["b200"]
    assert h100.widens(0.5) and h200.widens(0.5)
    assert not h100.widens(1.0) and not h100.widens(2.0)
    assert not b200.widens(0.5)
    # The widened GEMM keeps its share of the 16-bit rate it runs at; the others ignore it.
    assert h100.mma_peak(0.5, 0.0, 0.6) == pytest.approx(0.6 * h100.peak_flops_16bit)
    assert h100.mma_peak(1.0, 0.0, 0.6) == h100.peak_flops_8bit
    assert b200.mma_peak(0.5, 1.0, 0.6) == b200.peak_flops_8bit


def test_the_experts_slow_down_and_the_16_bit_attention_does_not():
    m, hw = model_from_spec(MXFP4_MOE), HARDWARE["h100"]
    assert attention_peak(m, hw, 0.5) == attention_peak(m, hw)  # BF16 attention
    assert expert_peak(m, hw, 1.0, 0.5) == pytest.approx(0.5 * expert_peak(m, hw))
    non_expert, expert = m.active_split
    # Every expert FLOP (routed, and here no shared ones) takes 1 / widened as long.
    extra = (non_expert + expert) / compute_peak(m, hw, 1.0, 0.5) - (
        (non_expert + expert) / compute_peak(m, hw)
    )
    assert extra == pytest.approx(expert / expert_peak(m, hw), rel=1e-12)
    dense = model_from_spec(DENSE_INT4)
    assert compute_peak(dense, hw, 1.0, 0.5) == pytest.approx(0.5 * compute_peak(dense, hw))
    assert compute_peak(dense, HARDWARE["b200"], 1.0, 0.5) == compute_peak(dense, HARDWARE["b200"])


@pytest.mark.parametrize(
    ("model", "hardware", "widened"),
    [
        (MXFP4_MOE, "h100", True),
        (DENSE_INT4, "h200", True),
        (DENSE_FP8, "h200", False),
        (MXFP4_MOE, "b200", False),
        (DENSE_INT4, "b200", False),
    ],
)
def test_a_prefill_slows_only_where_weights_are_widened(model, hardware, widened):
    spec = {"model": model, "hardware": hardware, "devices": 4, "tensor_parallel": 4,
            "concurrency": 1, "input_tokens": 16000, "output_tokens": 100,
            "software": "2025-11"}  # fmt: skip
    assert_prefill_slows_and_decode_does_not(spec, "gpu:eta_widened", widened)


def test_a_compute_bound_decode_step_of_widened_experts_slows():
    assert_large_batch_decode_slows(MXFP4_MOE, "h100", 4, "2025-11", "gpu:eta_widened", 0.1)


def test_the_fitted_share_is_a_real_slowdown():
    # The calibration fits it (simengine.calibration, group "gpu"): a share, below 1.
    assert 0.0 < DEFAULT_PARAMS.get("gpu:eta_widened") < 1.0

"""Weight GEMMs run at the wider of their weights' and activations' precision.

A tensor-core instruction takes both operands at one precision: MXFP4 experts with MXFP8
activations (W4A8, gpt-oss on Blackwell) multiply at the 8-bit rate, with BF16 ones
(W4A16, gpt-oss on Hopper, which has no 4-bit tensor cores) at the 16-bit rate; NVFP4
(W4A4) at Blackwell's 4-bit rate (TensorRT-LLM examples/models/core/gpt_oss/README.md,
"MoE Support Matrix"). Memory traffic follows the weights alone.
"""

from __future__ import annotations

import pytest

from simengine import HARDWARE, SimEngineError
from simengine.moe import compute_peak
from simengine.spec import model_from_spec, predict_spec

GPT_OSS = {
    "name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
    "head_dim": 64, "params_b": 117.0, "active_params_b": 5.1, "experts": 128,
    "experts_per_token": 4, "attention_dtype": "bf16", "expert_dtype": "mxfp4",
}  # fmt: skip


@pytest.mark.parametrize("key", ["b200", "gb200-nvl72"])
def test_blackwell_multiplies_at_the_wider_operand(key):
    hw = HARDWARE[key]
    assert hw.mma_peak(0.5) == hw.peak_flops_4bit  # W4A4 (NVFP4)
    assert hw.mma_peak(0.5, 1.0) == hw.peak_flops_8bit  # W4A8 (MXFP4 x MXFP8)
    assert hw.mma_peak(0.5, 2.0) == hw.peak_flops_16bit  # W4A16
    assert hw.mma_peak(1.0) == hw.peak_flops_8bit  # W8A8
    assert hw.mma_peak(1.0, 0.5) == hw.peak_flops_8bit  # never faster than the weights


@pytest.mark.parametrize("key", ["h100", "h200", "wse-3"])
def test_without_4_bit_tensor_cores_4_bit_weights_multiply_in_16_bits(key):
    hw = HARDWARE[key]
    for activations in (0.0, 0.5, 1.0, 2.0):
        assert hw.mma_peak(0.5, activations) == hw.peak_flops_16bit
    assert hw.mma_peak(1.0) == hw.peak_flops_8bit  # FP8 weights keep the 8-bit rate


def test_activation_defaults_follow_the_weight_format():
    def acts(**fields):
        m = model_from_spec({**GPT_OSS, **fields})
        return m.attention_activation_bytes, m.expert_activation_bytes

    assert acts() == (0.0, 1.0)  # BF16 attention as its weights; MXFP4 experts with MXFP8
    assert acts(expert_dtype="nvfp4") == (0.0, 0.0)  # NVFP4 quantizes activations (W4A4)
    assert acts(expert_dtype="int4") == (0.0, 2.0)  # AWQ / GPTQ: weight-only (W4A16)
    assert acts(expert_dtype="fp8") == (0.0, 0.0)  # W8A8
    assert acts(activation_dtype="bf16") == (2.0, 2.0)  # stated: both components
    assert acts(dtype="mxfp4", attention_dtype=None, expert_dtype=None) == (1.0, 1.0)


def test_an_unknown_activation_dtype_is_an_error():
    with pytest.raises(SimEngineError, match="activation_dtype must be one of"):
        model_from_spec({**GPT_OSS, "activation_dtype": "fp6"})


def test_mxfp4_experts_run_at_the_8_bit_rate_on_blackwell_and_16_bit_on_hopper():
    mx = model_from_spec(GPT_OSS)
    nv = model_from_spec({**GPT_OSS, "expert_dtype": "nvfp4"})
    b200, h200 = HARDWARE["b200"], HARDWARE["h200"]
    n, e = mx.active_split
    assert compute_peak(mx, b200) == pytest.approx(
        (n + e) / (n / b200.peak_flops_16bit + e / b200.peak_flops_8bit)
    )
    assert compute_peak(nv, b200) > compute_peak(mx, b200)
    assert compute_peak(mx, h200) == h200.peak_flops_16bit


def _predict(hardware: str, **model):
    return predict_spec({
        "model": {**GPT_OSS, **model}, "hardware": hardware, "devices": 1,
        "input_tokens": 8000, "output_tokens": 64,
    })  # fmt: skip


def test_activations_slow_the_compute_bound_prefill_not_the_memory_bound_decode():
    # One 8k prompt is compute-bound: W4A8 takes longer than W4A4 on B200. A lone
    # stream's decode reads the weights, whose bytes the activations do not change.
    w4a8, w4a4 = _predict("b200"), _predict("b200", activation_dtype="nvfp4")
    assert w4a8["ttft_seconds"] > 1.15 * w4a4["ttft_seconds"]
    assert w4a8["time_per_output_token_seconds"] == pytest.approx(
        w4a4["time_per_output_token_seconds"], rel=0.02
    )
    # On H200 the MXFP4 experts multiply in 16 bits: prefill slower than FP8 experts'.
    assert _predict("h200")["ttft_seconds"] > _predict("h200", expert_dtype="fp8")["ttft_seconds"]

"""The dispatch all-to-all carries quantized activations (issue 28, twenty-eighth round).

The term isolated: under expert parallelism a server quantizes a token's activations to
the routed experts' GEMM input before they leave the GPU, so the dispatch carries the
narrower values with their block scales, and the experts' outputs come back at the
activations' own width (DeepSeek-V3 report sec. 3.3: dispatch in FP8, combine in BF16;
TensorRT-LLM's post-quant all-to-all; SGLang's NVFP4 dispatch through DeepEP)
(``simengine.moe.dispatch_bytes``). Only the dispatch's bytes change: the combine, the
latencies, a model without expert parallelism and a 16-bit expert are as before.
"""

from __future__ import annotations

import pytest

from simengine.hardware import HARDWARE
from simengine.moe import (
    QUANT_SCALE_BYTES,
    all_to_all_seconds,
    dispatch_bytes,
    dispatches,
    moe_collectives_seconds,
)
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_dataparallel import DEEPSEEK  # DeepSeek-V3/R1's shape, FP8, MLA

FP8 = 1.0 + 4.0 / 128.0  # one FP32 scale per 128-value token group
NVFP4 = 0.5 + 1.0 / 16.0  # one FP8 scale per 16 values


def _model(**dtypes):
    return model_from_spec({**DEEPSEEK, **dtypes})


@pytest.mark.parametrize(
    ("dtypes", "device", "expected"),
    [
        ({"dtype": "bf16"}, "b200", 2.0),  # 16-bit experts: the activations as they are
        ({"dtype": "fp8"}, "h200", FP8),  # W8A8 (DeepSeek's FP8 dispatch)
        ({"dtype": "fp8"}, "b200", FP8),
        ({"dtype": "nvfp4"}, "b200", NVFP4),  # W4A4 on Blackwell's 4-bit tensor cores
        ({"dtype": "nvfp4"}, "h200", 2.0),  # no 4-bit tensor cores: widened to BF16
        ({"dtype": "fp8", "expert_dtype": "mxfp4"}, "b200", FP8),  # W4A8 (MXFP8 inputs)
        ({"dtype": "fp8", "expert_dtype": "mxfp4"}, "h100", 2.0),  # W4A16 on Hopper
        ({"dtype": "fp8", "expert_dtype": "int4"}, "b200", 2.0),  # W4A16
    ],
)
def test_the_dispatch_carries_the_experts_input_width(dtypes, device, expected):
    assert dispatch_bytes(_model(**dtypes), HARDWARE[device], 2.0) == pytest.approx(expected)


def test_the_dispatch_is_never_wider_than_the_activations():
    # Activations already at 8 bits (a spec's activation_dtype) stay as they are.
    model = _model(dtype="fp8")
    assert dispatch_bytes(model, HARDWARE["b200"], 1.0) == 1.0
    assert QUANT_SCALE_BYTES == {0.5: 1 / 16, 1.0: 1 / 32}


def test_only_the_dispatch_half_of_the_all_to_all_narrows():
    nv = HARDWARE["b200"]
    kw = {"latency": nv.link_latency, "bandwidth": nv.link_bandwidth, "base": 5e-6}
    args = (4096.0, 8, 7168, 2.0, 8)
    both16 = all_to_all_seconds(*args, **kw)
    assert all_to_all_seconds(*args, **kw, dispatched_bytes=2.0) == both16
    fp8 = all_to_all_seconds(*args, **kw, dispatched_bytes=FP8)
    values = (4096.0 / 8) * 8 * 7168 * 7 / 8  # one GPU's values each way
    # The bytes the dispatch no longer sends; the latencies and the combine unchanged.
    assert both16 - fp8 == pytest.approx(values * (2.0 - FP8) / nv.link_bandwidth)
    # A group of one has no all-to-all, whatever its width.
    assert all_to_all_seconds(4096.0, 8, 7168, 2.0, 1, **kw, dispatched_bytes=FP8) == 0.0


def test_a_steps_collectives_shrink_with_the_experts_input_and_only_under_ep():
    hw = HARDWARE["b200"]
    bf16, fp8, fp4 = _model(dtype="bf16"), _model(dtype="fp8"), _model(dtype="nvfp4")
    ep = [moe_collectives_seconds(m, hw, 4096.0, 1, 8, 10e-6, 2.0) for m in (bf16, fp8, fp4)]
    assert ep[0] > ep[1] > ep[2]
    # Without expert parallelism the experts' outputs are all-reduced at 16 bits: no
    # dispatch, the same collectives whatever the weights.
    tp = [moe_collectives_seconds(m, hw, 4096.0, 8, 1, 10e-6, 2.0) for m in (bf16, fp8, fp4)]
    assert tp[0] == tp[1] == tp[2]


def _dep8(dtype):
    return {
        "model": {**DEEPSEEK, "dtype": dtype}, "hardware": "b200", "devices": 8,
        "tensor_parallel": 8, "expert_parallel": 8, "attention_data_parallel": True,
        "concurrency": 2048, "input_tokens": 1000, "output_tokens": 1000,
    }  # fmt: skip


def test_a_predictions_collectives_part_follows_the_dispatch_width():
    # The time-per-token parts: the collectives part of a DEP8 NVFP4 step is below the
    # same step's with FP8 experts (per token, at the same batch).
    fp4 = predict_spec(_dep8("nvfp4"))
    fp8 = predict_spec(_dep8("fp8"))
    per_token = [r["time_per_output_token_parts"]["collectives"] for r in (fp4, fp8)]
    assert fp4["batch"] == fp8["batch"]
    assert 0.0 < per_token[0] < per_token[1]


def test_only_spread_tokens_are_dispatched():
    # simengine.moe.dispatches: an all-to-all only where the expert-parallel group's
    # GPUs hold different tokens (attention data parallel: its all-reduce group is 1).
    # Attending tensor-parallel over the group, every GPU holds every token and the
    # experts' outputs are all-reduced (vLLM: all-to-all kernels only with dp_size > 1;
    # TensorRT-LLM: all-to-all only with attention DP).
    moe, dense = _model(), model_from_spec({**DEEPSEEK, "active_params_b": 671.0,
                                            "experts": None, "experts_per_token": None,
                                            "shared_experts": 0})  # fmt: skip
    assert dispatches(moe, 1, 8)  # attention DP8 + EP8
    assert not dispatches(moe, 8, 8)  # TP8 attention, EP8
    assert not dispatches(moe, 8, 4)  # TP8 attention, EP4 (each expert TP2)
    assert dispatches(moe, 8, 16)  # two TP8 groups, one EP16 group: tokens spread
    assert not dispatches(moe, 1, 1) and not dispatches(dense, 1, 8)
    hw = HARDWARE["h200"]
    # Undispatched, the layer's collectives are the tensor-parallel all-reduces.
    assert moe_collectives_seconds(moe, hw, 512.0, 8, 8, 10e-6, 2.0) == moe_collectives_seconds(
        moe, hw, 512.0, 8, 1, 10e-6, 2.0
    )

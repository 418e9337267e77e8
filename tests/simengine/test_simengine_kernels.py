"""Kernel launches of a GPU decode step (issue 28, thirteenth round).

The term isolated: every kernel a decode step launches costs its launch-to-finish
latency (params ``gpu:kernel_overhead``) however little it does, so a step's fixed time
is that latency times the kernels its layers launch (``simengine.step.decode_kernels``,
counted per layer as TensorRT-LLM lays out a DeepSeek-R1 decode layer). A deeper model,
latent attention (MLA: more projections) and routed experts (router, top-k, grouped
GEMMs) each add kernels; at batch 1 on one GPU the step's time over its roofline grows
by exactly that count times the latency.
"""

from __future__ import annotations

import copy

import pytest

from simengine import DEFAULT_PARAMS
from simengine.spec import model_from_spec, predict_spec
from simengine.step import decode_kernels

from .test_simengine_attention import QWEN3_30B
from .test_simengine_dataparallel import DEEPSEEK  # DeepSeek-V3/R1's shape, FP8, MLA

DENSE = {
    "name": "dense-48", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4,
    "head_dim": 128, "params_b": 3.3, "dtype": "fp8",
}  # fmt: skip


def test_kernels_grow_with_depth_latent_attention_and_experts():
    dense, moe = model_from_spec(DENSE), model_from_spec(QWEN3_30B)
    deeper = model_from_spec({**DENSE, "layers": 96})
    # GQA attention 4 + dense feed-forward 3 + 2 norms per layer, 4 per step.
    assert decode_kernels(dense) == 48 * 9 + 4
    assert decode_kernels(deeper) - decode_kernels(dense) == 48 * 9
    # Routed experts: router, top-k, two grouped GEMMs, activation, reduction (6, not 3).
    assert decode_kernels(moe) - decode_kernels(dense) == 48 * 3
    # MLA: 8 attention kernels; DeepSeek-R1's 61 layers launch 2.25x gpt-oss-120b's 36.
    mla = model_from_spec(DEEPSEEK)
    assert mla.latent_cache and decode_kernels(mla) == 61 * 16 + 4
    gpt_oss_shape = model_from_spec({**QWEN3_30B, "layers": 36})
    assert decode_kernels(mla) / decode_kernels(gpt_oss_shape) == pytest.approx(980 / 436)


def _batch1_token_seconds(model_spec, kernel_overhead):
    params = DEFAULT_PARAMS.with_values({"gpu:kernel_overhead": kernel_overhead})
    spec = {
        "model": model_spec, "hardware": "b200", "devices": 1, "tensor_parallel": 1,
        "concurrency": 1, "input_tokens": 1000, "output_tokens": 200, "transport": "none",
    }  # fmt: skip
    return predict_spec(copy.deepcopy(spec), params)["time_per_output_token_seconds"]


@pytest.mark.parametrize("model_spec", [DENSE, QWEN3_30B])
def test_a_batch_of_one_pays_each_kernels_latency(model_spec):
    # With the latency at 0 the step is its roofline (no collectives on one GPU); each
    # microsecond of kernel latency adds one microsecond per kernel to every token.
    bare = _batch1_token_seconds(model_spec, 0.0)
    slow = _batch1_token_seconds(model_spec, 5e-6)
    kernels = decode_kernels(model_from_spec(model_spec))
    assert slow - bare == pytest.approx(5e-6 * kernels, rel=1e-6)


def test_the_fit_leaves_a_few_microseconds_per_kernel():
    # The GPU points at batch 1 (gpt-oss-120b, simengine/data/gpu_points.toml) fit it;
    # a small decode kernel's launch-and-latency floor is 3-5 us (params.py).
    assert 1e-6 <= DEFAULT_PARAMS.get("gpu:kernel_overhead") <= 10e-6

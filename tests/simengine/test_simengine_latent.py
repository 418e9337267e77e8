"""A latent KV cache stated by its width (issue 28, seventeenth round).

The term isolated: multi-head latent attention (DeepSeek-V3/R1, Kimi K2) caches one
latent per token and layer that every query head attends over, 512 + 64 = 576 values.
``model.kv_latent`` states that width; the cache's bytes follow ``kv_dtype`` (576 x
layers x bytes per value) unless ``kv_bytes_per_token`` states a published layout, and
decode attention's FLOPs follow the width whatever the dtype. Before it a spec could
state the latent only as bytes, and the width was read back as bytes / layers / the
dtype's bytes: a BF16 cache stated with the FP8 byte count read as a 288-wide latent
(half the attention FLOPs, half the cache).
"""

from __future__ import annotations

import re

import pytest

from simengine.errors import SimEngineError
from simengine.holdout import legacy_spec
from simengine.spec import model_from_spec, predict_spec

DSR1 = {
    "name": "deepseek-r1", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
    "head_dim": 128, "params_b": 671.0, "active_params_b": 37.0, "experts": 256,
    "experts_per_token": 8, "shared_experts": 1, "dtype": "fp8",
}  # fmt: skip


@pytest.mark.parametrize(("kv_dtype", "value_bytes"), [("bf16", 2), ("fp8", 1)])
def test_the_cache_follows_the_dtype_and_the_flops_follow_the_width(kv_dtype, value_bytes):
    m = model_from_spec({**DSR1, "kv_latent": 576, "kv_dtype": kv_dtype})
    assert m.kv_bytes_per_token == 576 * 61 * value_bytes  # 70,272 / 35,136
    assert m.latent_cache and m.kv_shards == 1  # one latent, held whole by every TP GPU
    assert m.latent_width == 576
    assert m.decode_attention_flops == 4 * 61 * 128 * 576


def test_a_published_layout_sets_the_bytes_and_the_width_the_flops():
    # DeepSeek-V3.2's FP8 cache as vLLM and SGLang store it: 512 FP8 values, four FP32
    # scales and 64 BF16 RoPE values, 656 bytes per token and layer.
    m = model_from_spec({**DSR1, "kv_latent": 576, "kv_dtype": "fp8",
                         "kv_bytes_per_token": 656 * 61})  # fmt: skip
    assert m.kv_bytes_per_token == 656 * 61
    assert m.decode_attention_flops == 4 * 61 * 128 * 576


def test_bytes_alone_are_read_back_as_a_width_at_the_dtype():
    # The pre-existing way, unchanged: a published byte count below K and V per head.
    fp8 = model_from_spec({**DSR1, "kv_bytes_per_token": 35136, "kv_dtype": "fp8"})
    assert fp8.latent_width == 576
    # The trap kv_latent removes: the FP8 byte count with a BF16 cache reads 288.
    bf16 = model_from_spec({**DSR1, "kv_bytes_per_token": 35136, "kv_dtype": "bf16"})
    assert bf16.latent_width == 288


def test_a_wider_cache_decodes_slower_at_the_same_flops():
    spec = {"hardware": "b200", "devices": 8, "tensor_parallel": 8, "expert_parallel": 8,
            "attention_data_parallel": True, "concurrency": 4096, "input_tokens": 2000,
            "output_tokens": 500, "software": "2026-02"}  # fmt: skip
    bf16 = predict_spec({**spec, "model": {**DSR1, "kv_latent": 576, "kv_dtype": "bf16"}})
    fp8 = predict_spec({**spec, "model": {**DSR1, "kv_latent": 576, "kv_dtype": "fp8"}})
    assert bf16["kv_bytes_per_token"] == 2 * fp8["kv_bytes_per_token"]
    assert bf16["throughput_tokens_per_second"] < fp8["throughput_tokens_per_second"]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({**DSR1, "kv_latent": 0}, "model.kv_latent must be an integer >= 1"),
        ({**DSR1, "kv_latent": 576.0}, "model.kv_latent must be an integer >= 1"),
        ({**DSR1, "kv_latent": True}, "model.kv_latent must be an integer >= 1"),
        ({**DSR1, "kv_latent": 2 * 128 * 128}, "must be below K and V per KV head"),
        ({**DSR1, "kv_latent": 576, "kv_bytes_per_token": 2 * 61 * 128 * 128},
         "for a latent cache (model.kv_latent)"),
    ],
)  # fmt: skip
def test_spec_errors(model, message):
    with pytest.raises(SimEngineError, match=re.escape(message)):
        model_from_spec(model)


def test_the_legacy_engine_reads_the_bytes_the_width_gives():
    spec = {"model": {**DSR1, "kv_latent": 576, "kv_dtype": "bf16"}, "hardware": "b200",
            "devices": 8, "tensor_parallel": 8, "concurrency": 1, "input_tokens": 100,
            "output_tokens": 100}  # fmt: skip
    old, _ = legacy_spec(spec)
    assert "kv_latent" not in old["model"]
    assert old["model"]["kv_bytes_per_token"] == 576 * 61 * 2

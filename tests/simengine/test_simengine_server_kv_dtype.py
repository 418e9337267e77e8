"""The KV cache's dtype a server defaults to (issue 28, eighteenth round).

The term isolated: a spec that names its ``server`` and states neither ``kv_dtype`` nor
the cache's size gets that server's "auto" cache. vLLM and SGLang store it in the
model's data type, 16-bit whatever the weights' quantization, so an FP8 checkpoint
keeps a BF16 cache: twice the bytes per token, half the streams a KV-bound replica
holds. TensorRT-LLM (and a spec naming no server) takes the checkpoint's
quantization: the weights' dtype, never below 8 bits, as before. A stated ``kv_dtype``
wins everywhere; a stated ``kv_bytes_per_token`` states the cache and is read as before;
a 16-bit model is unchanged.
"""

from __future__ import annotations

import pytest

from simengine.kv import SERVER_KV_VALUE_BYTES, server_kv_value_bytes
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_latent import DSR1
from .test_simengine_openloop import LLAMA_70B  # FP8 weights

# 70B FP8 on 2 x H100, more streams asked for than its cache holds at either dtype.
KV_BOUND = {"model": LLAMA_70B, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
            "concurrency": 1000, "input_tokens": 1000, "output_tokens": 500}  # fmt: skip


def test_the_servers_auto_dtype():
    assert server_kv_value_bytes("vllm") == server_kv_value_bytes("sglang") == 2.0
    assert server_kv_value_bytes("tensorrt-llm") is None
    assert server_kv_value_bytes(None) is None
    assert server_kv_value_bytes(["vllm"]) is None  # validated elsewhere, never a crash
    assert set(SERVER_KV_VALUE_BYTES) == {"vllm", "sglang"}


@pytest.mark.parametrize("server", ["vllm", "sglang"])
def test_a_paged_server_keeps_an_fp8_checkpoints_cache_in_16_bits(server):
    fp8 = model_from_spec(LLAMA_70B).kv_bytes_per_token
    assert fp8 == 2 * 80 * 8 * 128 * 1
    assert model_from_spec(LLAMA_70B, server=server).kv_bytes_per_token == 2 * fp8
    assert model_from_spec(LLAMA_70B, server="tensorrt-llm").kv_bytes_per_token == fp8
    auto, trt = (predict_spec({**KV_BOUND, "server": s}) for s in (server, "tensorrt-llm"))
    assert auto["kv_bytes_per_token"] == 2 * trt["kv_bytes_per_token"]
    # KV-bound: the 16-bit cache holds about half the streams (paged against reserved
    # admission aside, compared at the same rule).
    paged_trt = predict_spec({**KV_BOUND, "server": "tensorrt-llm", "kv_admission": "paged"})
    assert auto["batch_cap"] == pytest.approx(paged_trt["batch_cap"] / 2, rel=0.05)
    assert auto["throughput_tokens_per_second"] < paged_trt["throughput_tokens_per_second"]


def test_a_stated_dtype_or_size_wins():
    for kv_dtype, value_bytes in (("fp8", 1), ("bf16", 2)):
        m = model_from_spec({**LLAMA_70B, "kv_dtype": kv_dtype}, server="vllm")
        assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * value_bytes
    # A published layout (DeepSeek's FP8 latent, 576 x 61 bytes) keeps its bytes and the
    # width they give at the weights' dtype.
    stated = model_from_spec({**DSR1, "kv_bytes_per_token": 35136}, server="sglang")
    assert stated.kv_bytes_per_token == 35136 and stated.latent_width == 576
    # A latent stated by its width follows the server's dtype.
    latent = model_from_spec({**DSR1, "kv_latent": 576}, server="sglang")
    assert latent.kv_bytes_per_token == 576 * 61 * 2 and latent.latent_width == 576


def test_a_16_bit_model_is_the_same_under_every_server():
    bf16 = {**LLAMA_70B, "dtype": "bf16"}
    sizes = {model_from_spec(bf16, server=s).kv_bytes_per_token
             for s in (None, "vllm", "sglang", "tensorrt-llm")}  # fmt: skip
    assert sizes == {2 * 80 * 8 * 128 * 2}

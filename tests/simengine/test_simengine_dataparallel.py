"""Operator-level roofline, attention data parallelism and disaggregated prefill (issue 28).

Each term isolated:

* a decode step is the attention kernels' roofline plus the weight GEMMs' roofline (they
  run one after the other), not one roofline over the whole step;
* attention data parallelism ("DEP"): a latent (MLA) cache is no longer copied on every
  GPU, so the replica holds more streams; each GPU streams the whole attention per step
  (``group - 1`` extra copies of the always-read weights); ``max_batch_size`` holds per
  GPU; attention needs no all-reduce;
* disaggregated prefill: decode steps carry no prefill, TTFT adds the KV transfer.
"""

from __future__ import annotations

import dataclasses

import pytest

from simengine import SimEngineError, decode_step_seconds
from simengine.hardware import HARDWARE
from simengine.kv import KV_PAGE_TOKENS
from simengine.moe import compute_peak
from simengine.parallel import attention_dp_batch_cap, attention_dp_weight_bytes
from simengine.served import Deployment
from simengine.serving import serving_point
from simengine.spec import model_from_spec, predict_spec
from simengine.step import ATTENTION_MATH_BYTES

from .test_simengine_kv import LLAMA_8B

# DeepSeek-V3/R1's shape: MLA (one latent KV "head"), 256 experts, 8 routed + 1 shared.
DEEPSEEK = {
    "name": "deepseek-r1", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
    "head_dim": 128, "params_b": 671.0, "active_params_b": 37.0, "experts": 256,
    "experts_per_token": 8, "shared_experts": 1, "kv_bytes_per_token": 35136,
    "dtype": "fp8",
}  # fmt: skip
DEP8 = {"model": DEEPSEEK, "hardware": "h200", "devices": 8, "tensor_parallel": 8,
        "expert_parallel": 8, "input_tokens": 1000, "output_tokens": 1000}  # fmt: skip


def test_decode_step_sums_the_attention_and_gemm_rooflines():
    # 8B FP8 on one H100 at 512 streams of 400 tokens: the KV read (attention) and the
    # GEMM FLOPs take about as long; the step is their sum (+ nothing else on one GPU).
    m = model_from_spec(LLAMA_8B, tokens=8192)
    hw = HARDWARE["h100"]
    batch, ctx = 512, 400.0
    step = decode_step_seconds(m, hw, batch=batch, context_tokens=ctx, other_context_tokens=ctx)
    kv_read = batch * ctx * m.kv_bytes_per_token / hw.memory_bandwidth
    # Attention multiplies at the 16-bit rate (test_simengine_attention.py).
    attn_flops = batch * ctx * m.decode_attention_flops / hw.peak_flops(ATTENTION_MATH_BYTES)
    gemm = max(m.weight_bytes / hw.memory_bandwidth,
               batch * 2 * m.active_params_decode / compute_peak(m, hw))  # fmt: skip
    assert step == pytest.approx(max(kv_read, attn_flops) + gemm, rel=1e-9)
    # Both kernel families matter here: a single roofline over the step would hide one.
    assert min(kv_read, gemm) > 0.3 * max(kv_read, gemm)
    single = max((m.weight_bytes + batch * ctx * m.kv_bytes_per_token) / hw.memory_bandwidth,
                 (batch * 2 * m.active_params_decode + batch * ctx * 4 * m.layers
                  * m.hidden_size) / compute_peak(m, hw))  # fmt: skip
    assert step > 1.2 * single


def test_attention_dp_weights_and_batch_cap_formulas():
    m = model_from_spec(DEEPSEEK, tokens=2000)
    assert attention_dp_weight_bytes(m, 1) == 0.0
    assert attention_dp_weight_bytes(m, 8) == pytest.approx(7 * m.always_read_bytes)
    # The always-read weights: everything but the routed experts.
    routed = m.weight_bytes - m.always_read_bytes
    assert routed == pytest.approx(m.expert_params * m.expert_bytes_per_param)
    assert attention_dp_batch_cap(1024, 8) == 8192
    dense = model_from_spec(LLAMA_8B, tokens=2000)
    assert dense.always_read_bytes == dense.weight_bytes


def test_attention_dp_holds_more_mla_streams_than_tensor_parallel():
    # MLA's latent cache is whole on every GPU of a TP group (8 copies over 8 GPUs); under
    # attention DP each stream's KV lives on one GPU, less the replicated attention.
    asked = {**DEP8, "concurrency": 20000, "max_batch_size": 4096}
    tp = predict_spec(asked)
    dp = predict_spec({**asked, "attention_data_parallel": True})
    m = model_from_spec(DEEPSEEK, tokens=2000)
    per_stream = 1000 + 500 + KV_PAGE_TOKENS / 2
    extra_tokens = attention_dp_weight_bytes(m, 8) / m.kv_bytes_per_token
    tp_kv_tokens = tp["batch"] * per_stream * 8  # 8 copies
    assert dp["batch"] == pytest.approx((tp_kv_tokens - extra_tokens) / per_stream, rel=1e-6)
    assert dp["batch"] > 5 * tp["batch"]
    # 1.38x (1.65x until issue 28's seventeenth round): the larger batch makes the routed
    # experts' GEMMs bind (gpu:eta_expert), which the streams' KV does not relieve.
    assert dp["throughput_tokens_per_second"] > 1.3 * tp["throughput_tokens_per_second"]


def test_attention_dp_batch_cap_is_per_gpu():
    spec = {**DEP8, "concurrency": 4000, "max_batch_size": 64, "attention_data_parallel": True}
    assert predict_spec(spec)["batch"] == 8 * 64
    assert predict_spec({**spec, "attention_data_parallel": False})["batch"] == 64


def test_attention_dp_at_one_stream_streams_the_replicated_attention():
    # One stream: the step is weight-bound; every GPU reads the whole attention, so a
    # single stream is slower under attention DP than under attention TP (DEP is a
    # throughput setting), and the difference is the replicated bytes over the group's rate.
    one = {**DEP8, "concurrency": 1}
    tp = predict_spec(one)["time_per_output_token_seconds"]
    dp = predict_spec({**one, "attention_data_parallel": True})["time_per_output_token_seconds"]
    assert dp > tp


def test_attention_dp_spec_rules():
    with pytest.raises(SimEngineError, match="attention_data_parallel needs"):
        predict_spec({**DEP8, "expert_parallel": 1, "attention_data_parallel": True})
    with pytest.raises(SimEngineError, match="attention_data_parallel needs"):
        predict_spec({"model": LLAMA_8B, "hardware": "h100", "devices": 2,
                      "attention_data_parallel": True})  # fmt: skip
    with pytest.raises(SimEngineError, match="attention_data_parallel must be true or false"):
        predict_spec({**DEP8, "attention_data_parallel": "yes"})
    with pytest.raises(SimEngineError, match="GPUs only"):
        predict_spec({"model": LLAMA_8B, "hardware": "cs-3", "attention_data_parallel": True})
    with pytest.raises(SimEngineError, match="GPUs only"):
        Deployment("wse-3", 1, attention_data_parallel=True)


def test_disaggregated_prefill_removes_interference_and_adds_the_kv_transfer():
    base = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 256,
            "input_tokens": 4000, "output_tokens": 200}  # fmt: skip
    co = predict_spec(base)
    dis = predict_spec({**base, "disaggregated_prefill": True})
    assert dis["batch"] == co["batch"]
    # Prompts of 4,000 tokens per 200 out: the colocated decode carries 20x its tokens in
    # prefill; without them each token is much faster and the replica decodes more.
    assert dis["time_per_output_token_seconds"] < 0.5 * co["time_per_output_token_seconds"]
    assert dis["throughput_tokens_per_second"] > 2 * co["throughput_tokens_per_second"]
    # TTFT at one stream: the prefill + the KV over the scale-out network + one step.
    one = {**base, "concurrency": 1}
    co1 = predict_spec(one)
    dis1 = predict_spec({**one, "disaggregated_prefill": True})
    m = model_from_spec(LLAMA_8B, tokens=4200)
    transfer = m.kv_bytes(4000) / HARDWARE["h100"].scaleout_bandwidth
    step = dis1["time_per_output_token_seconds"]
    chunks = 2  # 4,000 tokens in 2,048-token chunks ride two decode steps when colocated
    assert dis1["ttft_seconds"] == pytest.approx(co1["ttft_seconds"] - chunks * step + transfer
                                                 + step, rel=1e-6)  # fmt: skip


def test_disaggregated_prefill_open_loop_capacity_is_the_decode_pools():
    base = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "rate_per_second": 1.0,
            "input_tokens": 4000, "output_tokens": 200}  # fmt: skip
    co = predict_spec(base)["capacity_requests_per_second"]
    dis = predict_spec({**base, "disaggregated_prefill": True})["capacity_requests_per_second"]
    assert dis > co


def test_disaggregated_prefill_spec_rules():
    with pytest.raises(SimEngineError, match="disaggregated_prefill must be true or false"):
        predict_spec({"model": LLAMA_8B, "hardware": "h100", "disaggregated_prefill": 1})
    with pytest.raises(SimEngineError, match="GPUs only"):
        predict_spec({"model": LLAMA_8B, "hardware": "cs-3", "disaggregated_prefill": True})
    m = model_from_spec(LLAMA_8B, tokens=2000)
    with pytest.raises(SimEngineError, match="GPUs only"):
        serving_point(m, Deployment("wse-3", 1), input_tokens=100, output_tokens=100,
                      disaggregated_prefill=True)  # fmt: skip


def test_deployment_flag_changes_the_hash():
    a = Deployment("h200", 8, expert_parallel=8)
    b = dataclasses.replace(a, attention_data_parallel=True)
    assert a != b and hash(a) != hash(b)

"""Paged KV, the server's batch cap, pipeline parallelism and replicas (issue 28).

Each term isolated: a GPU replica's batch is limited by the KV the requests hold so far
(input + output / 2 + half a page; with an output spread, the token-weighted mean
context), not by a planning window per stream; the server's
``max_batch_size`` caps it (production default by GPU memory); pipeline stages decode
micro-batches (a single stream gains nothing from them, the bubble closes once the
batch reaches the stage count); ``replicas`` multiply throughput.
"""

from __future__ import annotations

import pytest

from simengine import SimEngineError, placement
from simengine.kv import (
    DEFAULT_MAX_BATCH_SIZE,
    KV_PAGE_TOKENS,
    default_max_batch_size,
    held_tokens,
    kv_streams,
    mean_context,
    tp_kv_replication,
)
from simengine.parallel import pipeline_bubble, pipeline_microbatch
from simengine.spec import model_from_spec, predict_spec

LLAMA_70B_BF16 = {
    "name": "llama-3.3-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
    "head_dim": 128, "params_b": 70.6, "dtype": "bf16",
}  # fmt: skip
LLAMA_8B = {
    "name": "llama-3.1-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
    "head_dim": 128, "params_b": 8.0, "dtype": "fp8",
}  # fmt: skip


def _kv_tokens(model: dict, device: str, devices: int, inp: int, out: int) -> float:
    spec = model_from_spec(model, tokens=inp + out)
    return placement(spec, device, nodes_per_replica=devices).kv_tokens_per_replica


def test_held_tokens_are_the_context_plus_half_a_page():
    assert KV_PAGE_TOKENS == 16
    assert held_tokens(1250.0) == 1258.0
    assert kv_streams(1_258_000.0, 1250.0) == pytest.approx(1000.0)


def test_batch_limited_by_tokens_held_grows_as_outputs_shorten():
    # 70B BF16 on 2 x H100: about 16 GB of KV free, far fewer streams than asked for.
    base = {"model": LLAMA_70B_BF16, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
            "concurrency": 4000, "max_batch_size": 4096, "input_tokens": 1000}  # fmt: skip
    batches = []
    for out in (4000, 2000, 1000, 250):
        r = predict_spec({**base, "output_tokens": out})
        kv_tokens = _kv_tokens(LLAMA_70B_BF16, "h100", 2, 1000, out)
        # Exactly what the paged cache holds: each stream input + output/2 + half a page.
        assert r["batch"] == pytest.approx(kv_tokens / (1000 + out / 2 + KV_PAGE_TOKENS / 2))
        batches.append(r["batch"])
    assert batches == sorted(batches) and batches[-1] > 2 * batches[0]


def test_server_with_1400_in_flight_is_not_capped_at_the_planning_window():
    # 8B FP8 on one H100 with short requests: the paged cache holds thousands of
    # streams; the old cap (every stream at an 8,192-token window) was ~100.
    spec = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 1400,
            "max_batch_size": 2048, "input_tokens": 200, "output_tokens": 200}  # fmt: skip
    r = predict_spec(spec)
    window_cap = _kv_tokens(LLAMA_8B, "h100", 1, 200, 200) / 8192
    assert window_cap < 150
    assert r["batch"] == 1400 and r["queue_seconds"] == 0.0
    # Throughput keeps growing past ~100 streams (it would be flat under the old cap).
    at_100 = predict_spec({**spec, "concurrency": 100})
    assert r["throughput_tokens_per_second"] > 1.4 * at_100["throughput_tokens_per_second"]


def test_mean_context_is_token_weighted_by_the_output_spread():
    # Fixed lengths: the prompt plus half the output. Spread: E[o^2] / (2 E[o]).
    assert mean_context(1000, 400) == 1200.0
    assert mean_context(1000, 400, 1.0) == 1400.0  # exponential-like outputs: twice
    # Against the definition, for a two-point distribution (100 or 700 tokens, equally
    # likely): mean 400, std 300, cv 0.75.
    lengths = [100, 700]
    weighted = sum(o * o for o in lengths) / (2 * sum(lengths))
    assert mean_context(1000, 400, 300 / 400) == pytest.approx(1000 + weighted)


def test_output_spread_shrinks_a_kv_bound_batch_and_slows_the_step():
    # 70B BF16 on 2 x H100, KV-bound: the same mean output with a spread holds more
    # context per stream in flight, so fewer streams fit and each step attends longer.
    spec = {"model": LLAMA_70B_BF16, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
            "concurrency": 4000, "max_batch_size": 4096, "input_tokens": 1000,
            "output_tokens": 1000}  # fmt: skip
    rows = [predict_spec({**spec, "output_tokens_cv": cv}) for cv in (0, 0.5, 1.0, 2.0)]
    assert rows[0] == predict_spec(spec)  # 0 is the default
    kv_tokens = _kv_tokens(LLAMA_70B_BF16, "h100", 2, 1000, 1000 * 5)
    assert rows[2]["batch"] == pytest.approx(kv_tokens / (1000 + 1000 + KV_PAGE_TOKENS / 2))
    batches = [r["batch"] for r in rows]
    thr = [r["throughput_tokens_per_second"] for r in rows]
    assert batches == sorted(batches, reverse=True) and batches[0] > 1.5 * batches[-1]
    assert thr == sorted(thr, reverse=True)
    # One stream alone: no KV bound, but the longer token-weighted context is attended
    # every step, so it is slower too (a little).
    one = {**spec, "concurrency": 1}
    assert (predict_spec({**one, "output_tokens_cv": 1.0})["time_per_output_token_seconds"]
            > predict_spec(one)["time_per_output_token_seconds"])  # fmt: skip


@pytest.mark.parametrize("bad", [-0.1, 11, "1", True, float("nan")])
def test_output_spread_out_of_range_is_a_spec_error(bad):
    spec = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "output_tokens_cv": bad}
    with pytest.raises(SimEngineError, match="output_tokens_cv"):
        predict_spec(spec)


def test_output_spread_must_fit_the_context_window():
    # The longest output is at least mean x (1 + cv^2): 500 x 5 = 2,500 tokens.
    model = {**LLAMA_8B, "context_window": 3000}
    spec = {"model": model, "hardware": "h100", "devices": 1, "input_tokens": 1000,
            "output_tokens": 500}  # fmt: skip
    predict_spec({**spec, "output_tokens_cv": 1.0})  # 1000 + 1000 fits 3000
    with pytest.raises(
        SimEngineError, match="output_tokens_cv 2.0 implies outputs of at least 2500"
    ):
        predict_spec({**spec, "output_tokens_cv": 2.0})
    # Without a stated window the default widens to hold them.
    predict_spec({**spec, "model": LLAMA_8B, "output_tokens_cv": 2.0})


def test_max_batch_size_defaults_to_the_production_cap_and_queues_the_rest():
    # vLLM V1's max_num_seqs default: 1024 on GPUs with >= 70 GiB, 256 below.
    assert default_max_batch_size(80e9) == 1024 == default_max_batch_size(186e9)
    assert default_max_batch_size(48 * 2**30) == DEFAULT_MAX_BATCH_SIZE == 256
    spec = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 2000,
            "input_tokens": 200, "output_tokens": 200}  # fmt: skip
    r = predict_spec(spec)
    assert r["batch"] == 1024  # the KV cache holds more: the server's cap binds
    # 2000 clients over 1024 slots: each waits (2000/1024 - 1) request cycles for a slot.
    assert r["queue_seconds"] > 0
    assert r["ttft_seconds"] == pytest.approx(
        predict_spec({**spec, "concurrency": 1024})["ttft_seconds"] + r["queue_seconds"]
    )
    lifted = predict_spec({**spec, "max_batch_size": 2000})
    assert lifted["batch"] == 2000 and lifted["queue_seconds"] == 0.0
    assert lifted["throughput_tokens_per_second"] > r["throughput_tokens_per_second"]


def test_tp_kv_replication_counts_copies_over_the_tensor_parallel_group():
    assert tp_kv_replication(8, 8) == 1.0  # one KV head per GPU: no copy
    assert tp_kv_replication(4, 8) == 2.0  # 4 KV heads over 8 GPUs: each head twice
    assert tp_kv_replication(1, 8) == 8.0  # a latent shared by all heads (MLA): every GPU
    assert tp_kv_replication(6, 4) == pytest.approx(4 * 2 / 6)  # ceil(6/4) = 2 heads each
    assert tp_kv_replication(0, 8) == 1.0 and tp_kv_replication(1, 1) == 1.0


def test_fewer_kv_heads_than_gpus_shrink_the_batch_and_slow_the_step():
    # The same model with 8 or 2 KV heads at the same KV bytes per token (head_dim
    # scaled), on TP 8: with 2 heads each GPU holds 4x the cache, so the paged cache
    # holds a quarter of the streams and each step reads 4x the KV per GPU.
    base = {"name": "gqa", "layers": 32, "hidden": 4096, "heads": 32, "params_b": 8.0,
            "dtype": "fp8"}  # fmt: skip
    eight = {**base, "kv_heads": 8, "head_dim": 128}
    two = {**base, "kv_heads": 2, "head_dim": 128, "kv_bytes_per_token": 2 * 32 * 8 * 128}
    spec = {"hardware": "h100", "devices": 8, "tensor_parallel": 8, "concurrency": 100000,
            "max_batch_size": 100000, "input_tokens": 4000, "output_tokens": 4000}  # fmt: skip
    a = predict_spec({**spec, "model": eight})
    b = predict_spec({**spec, "model": two})
    assert b["batch"] == pytest.approx(a["batch"] / 4, rel=0.01)
    one = {**spec, "concurrency": 64}
    assert (
        predict_spec({**one, "model": two})["time_per_output_token_seconds"]
        > predict_spec({**one, "model": eight})["time_per_output_token_seconds"]
    )


def test_a_latent_kv_cache_is_held_whole_by_every_tensor_parallel_gpu():
    # A published KV size below K and V per head is a latent shared by all heads (MLA):
    # it does not split over TP, so TP 8 holds 1/8 the streams of an even split.
    mla = {"name": "mla", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32,
           "head_dim": 128, "params_b": 8.0, "dtype": "fp8", "kv_bytes_per_token": 32 * 576}  # fmt: skip
    assert model_from_spec(mla).kv_shards == 1
    assert model_from_spec({**mla, "kv_bytes_per_token": None}).kv_shards == 32
    spec = {"model": mla, "hardware": "h100", "concurrency": 100000, "max_batch_size": 100000,
            "input_tokens": 4000, "output_tokens": 4000}  # fmt: skip
    tp1 = predict_spec({**spec, "devices": 1, "tensor_parallel": 1})
    tp8 = predict_spec({**spec, "devices": 8, "tensor_parallel": 8})
    # Eight GPUs, eight copies: about the streams of one GPU (plus the weights' share
    # freed on each), not eight times them.
    assert tp1["batch"] < tp8["batch"] < 1.5 * tp1["batch"]


def test_pipeline_microbatches_and_bubble():
    assert pipeline_microbatch(1.0, 4) == 1.0  # one stream: one micro-batch, 3 stages idle
    assert pipeline_bubble(1.0, 4) == 0.75
    assert pipeline_microbatch(64.0, 4) == 16.0 and pipeline_bubble(64.0, 4) == 0.0
    assert pipeline_microbatch(64.0, 1) == 64.0


def test_pipeline_parallel_splits_devices_and_does_not_speed_up_one_stream():
    base = {"model": LLAMA_8B, "hardware": "h100", "concurrency": 1,
            "input_tokens": 1000, "output_tokens": 500}  # fmt: skip
    one = predict_spec({**base, "devices": 1})
    pp2 = predict_spec({**base, "tensor_parallel": 1, "pipeline_parallel": 2})
    tp2 = predict_spec({**base, "devices": 2, "tensor_parallel": 2})
    assert (pp2["devices"], pp2["tensor_parallel"], pp2["pipeline_stages"]) == (2, 1, 2)
    # A token crosses both stages in turn: no faster than one GPU (plus a hop);
    # tensor parallelism on the same two GPUs is faster.
    assert pp2["time_per_output_token_seconds"] >= one["time_per_output_token_seconds"]
    assert tp2["time_per_output_token_seconds"] < pp2["time_per_output_token_seconds"]
    # With as many streams as stages the bubble closes: per-stream speed at batch 2
    # is the single-stream speed (each micro-batch of one has the pipeline to itself).
    two = predict_spec({**base, "tensor_parallel": 1, "pipeline_parallel": 2, "concurrency": 2})
    assert two["time_per_output_token_seconds"] < 1.05 * pp2["time_per_output_token_seconds"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"devices": 4, "tensor_parallel": 2, "pipeline_parallel": 3}, "tensor_parallel x"),
        ({"pipeline_parallel": 2}, "needs devices or tensor_parallel"),
        ({"devices": 3, "pipeline_parallel": 2}, "multiple of pipeline_parallel"),
        ({"hardware": "cs-3", "pipeline_parallel": 2}, "GPUs only"),
        ({"hardware": "cs-3", "max_batch_size": 8}, "GPUs only"),
        ({"replicas": 0}, "replicas"),
        ({"max_batch_size": 0}, "max_batch_size"),
    ],
)
def test_workload_field_errors(fields, message):
    spec = {"model": LLAMA_8B, "hardware": "h100", **fields}
    with pytest.raises(SimEngineError, match=message):
        predict_spec(spec)


def test_replicas_multiply_throughput_not_per_stream_speed():
    spec = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 32,
            "input_tokens": 1000, "output_tokens": 500}  # fmt: skip
    one, four = predict_spec(spec), predict_spec({**spec, "replicas": 4})
    assert four["throughput_tokens_per_second"] == pytest.approx(
        4 * one["throughput_tokens_per_second"]
    )
    assert four["tokens_per_second"] == one["tokens_per_second"]


def test_a_4_bit_checkpoint_keeps_an_8_bit_cache_by_default():
    # Production default (ModelOpt NVFP4 checkpoints cache K/V in FP8; a 4-bit cache is
    # opt-in): kv_dtype omitted = the weights' dtype, never below 8 bits.
    base = {**LLAMA_8B, "dtype": "nvfp4"}
    fp4_weights = model_from_spec(base)
    assert fp4_weights.kv_value_bytes == 1.0
    assert fp4_weights.kv_bytes_per_token == 2 * 32 * 8 * 128 * 1.0
    assert model_from_spec({**base, "kv_dtype": "fp4"}).kv_value_bytes == 0.5  # stated: kept
    assert model_from_spec({**LLAMA_8B, "dtype": "bf16"}).kv_value_bytes == 2.0
    assert model_from_spec(LLAMA_8B).kv_value_bytes == 1.0  # fp8 weights, fp8 cache

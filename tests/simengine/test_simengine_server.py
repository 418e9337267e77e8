"""The server a spec names and its KV admission rule (issue 28, ninth round).

Each piece isolated: TensorRT-LLM admits a request only when its whole input + output
fits the KV cache (GUARANTEED_NO_EVICT, the default of its LLM API and of
``trtllm-bench``), so a KV-bound batch holds fewer streams than the paged servers'
(which count only the tokens held); the gap grows with the output; a batch the server's
cap limits is the same under both; the server sets the default cap (TensorRT-LLM 2048,
vLLM 1024 on large GPUs); unknown servers and rules are spec errors; the pre-issue-28
schema drops the fields.
"""

from __future__ import annotations

import pytest

from simengine import SimEngineError
from simengine.holdout import legacy_spec
from simengine.kv import (
    KV_PAGE_TOKENS,
    admission_context,
    default_max_batch_size,
    kv_admission,
    mean_context,
)
from simengine.spec import parse_spec, predict_spec

from .test_simengine_kv import LLAMA_8B, _kv_tokens
from .test_simengine_openloop import LLAMA_70B  # FP8

LLAMA_70B_BF16_KV = {**LLAMA_70B, "kv_dtype": "bf16"}
# 70B FP8 on 2 x H100 with a 16-bit cache: ~150 streams of 1000 + 500 tokens, far fewer
# than asked for.
KV_BOUND = {"model": LLAMA_70B_BF16_KV, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
            "concurrency": 4000, "max_batch_size": 4096, "input_tokens": 1000}  # fmt: skip


def test_admission_defaults_by_server_and_an_explicit_rule_wins():
    assert kv_admission(None) == kv_admission("vllm") == kv_admission("sglang") == "paged"
    assert kv_admission("tensorrt-llm") == "reserved"
    assert kv_admission("tensorrt-llm", "paged") == "paged"  # MLPerf's max_util
    assert kv_admission(None, "reserved") == "reserved"
    with pytest.raises(SimEngineError, match="server must be one of"):
        kv_admission("triton")
    with pytest.raises(SimEngineError, match="kv_admission must be one of"):
        kv_admission("vllm", "eager")


def test_a_reservation_counts_the_whole_output_a_paged_stream_half_of_it():
    assert admission_context("paged", 1000, 400) == mean_context(1000, 400) == 1200.0
    assert admission_context("reserved", 1000, 400) == 1400.0
    # With a spread, both are length-biased; the reservation is still twice the output
    # a paged stream holds on average.
    for cv in (0.5, 1.0, 1.5):
        paged = admission_context("paged", 1000, 400, cv) - 1000
        assert admission_context("reserved", 1000, 400, cv) - 1000 == pytest.approx(2 * paged)


def test_the_server_sets_the_default_batch_cap():
    assert default_max_batch_size(180e9, "tensorrt-llm") == 2048
    assert default_max_batch_size(48 * 2**30, "tensorrt-llm") == 2048
    assert default_max_batch_size(180e9, "vllm") == default_max_batch_size(180e9) == 1024
    assert default_max_batch_size(180e9, "sglang") == 1024


def test_a_reserved_kv_bound_batch_holds_the_streams_whose_whole_output_fits():
    for out in (250, 1000, 4000):
        paged = predict_spec({**KV_BOUND, "output_tokens": out, "server": "vllm"})
        reserved = predict_spec({**KV_BOUND, "output_tokens": out, "server": "tensorrt-llm"})
        kv_tokens = _kv_tokens(LLAMA_70B_BF16_KV, "h100", 2, 1000, out)
        half = KV_PAGE_TOKENS / 2
        assert paged["batch"] == pytest.approx(kv_tokens / (1000 + out / 2 + half))
        assert reserved["batch"] == pytest.approx(kv_tokens / (1000 + out + half))
        # The answer names the rule and the cap it set (the batch is the cap: 4,000 asked).
        assert (paged["kv_admission"], reserved["kv_admission"]) == ("paged", "reserved")
        assert reserved["batch_cap"] == reserved["batch"] < paged["batch_cap"]
        # Fewer streams, each step shorter, less throughput.
        assert reserved["time_per_output_token_seconds"] < paged["time_per_output_token_seconds"]
        assert reserved["throughput_tokens_per_second"] < paged["throughput_tokens_per_second"]


def test_the_gap_grows_with_the_output():
    ratios = []
    for out in (100, 1000, 8000):
        spec = {**KV_BOUND, "output_tokens": out}
        paged = predict_spec({**spec, "kv_admission": "paged"})["batch"]
        ratios.append(predict_spec({**spec, "kv_admission": "reserved"})["batch"] / paged)
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[0] > 0.9 and ratios[-1] < 0.65


def test_a_batch_the_cap_limits_is_the_same_under_both_rules():
    # 8B FP8 on one H100 at 64 sequences: the cache holds far more than 64 either way.
    spec = {"model": LLAMA_8B, "hardware": "h100", "concurrency": 64, "max_batch_size": 64,
            "input_tokens": 1000, "output_tokens": 1000}  # fmt: skip
    # Both rules under one server (vLLM's "auto" cache is 16-bit, TensorRT-LLM's the
    # checkpoint's: simengine.kv.server_kv_value_bytes, the eighteenth round).
    paged = predict_spec({**spec, "server": "tensorrt-llm", "kv_admission": "paged"})
    reserved = predict_spec({**spec, "server": "tensorrt-llm"})
    assert reserved["kv_admission"] == "reserved" and paged["kv_admission"] == "paged"
    assert paged["batch"] == reserved["batch"] == 64
    assert paged["throughput_tokens_per_second"] == reserved["throughput_tokens_per_second"]


def test_an_offline_run_gets_the_reserved_slots():
    spec = {**KV_BOUND, "output_tokens": 1000, "offline_requests": 2000}
    spec.pop("concurrency")
    paged = predict_spec({**spec, "kv_admission": "paged"})
    reserved = predict_spec({**spec, "kv_admission": "reserved"})
    assert reserved["batch"] < 0.8 * paged["batch"]
    assert reserved["run_seconds"] > paged["run_seconds"]


def test_unstated_server_keeps_the_generic_defaults():
    # The batch cap and the admission rule are vLLM's and SGLang's; what differs is that
    # a named server pads its step to its next captured CUDA graph (twenty-seventh round,
    # test_simengine_graph_sizes.py), which a spec naming no server does not.
    spec = {**KV_BOUND, "output_tokens": 1000}
    plain = predict_spec(spec)
    assert plain["cuda_graph_max_batch"] is None
    for server in ("vllm", "sglang"):
        named = predict_spec({**spec, "server": server})
        for key in ("batch", "batch_cap", "kv_admission", "kv_bytes_per_token"):
            assert plain[key] == named[key], (server, key)
        assert named["cuda_graph_max_batch"] is not None
        assert named["throughput_tokens_per_second"] <= plain["throughput_tokens_per_second"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"server": "triton"}, "server must be one of"),
        ({"server": 3}, "server must be one of"),
        ({"kv_admission": "eager"}, "kv_admission must be one of"),
    ],
)
def test_server_field_errors(fields, message):
    with pytest.raises(SimEngineError, match=message):
        parse_spec({**KV_BOUND, "output_tokens": 500, **fields})


@pytest.mark.parametrize("key, value", [("server", "vllm"), ("kv_admission", "paged")])
def test_wafers_have_no_server_field(key, value):
    spec = {"model": LLAMA_8B, "hardware": "cs-3", "concurrency": 1, key: value}
    with pytest.raises(SimEngineError, match=f"{key} applies to GPUs only"):
        parse_spec(spec)
    del spec[key]
    r = predict_spec(spec)
    assert r["kv_admission"] is None and r["batch_cap"] >= 1


def test_the_old_schema_drops_server_and_admission():
    spec = {**KV_BOUND, "output_tokens": 500, "server": "tensorrt-llm", "kv_admission": "paged"}
    old, factor = legacy_spec(spec)
    assert "server" not in old and "kv_admission" not in old and factor == 1.0

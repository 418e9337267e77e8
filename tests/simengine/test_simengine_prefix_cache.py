"""Prompt tokens served from the prefix cache (``cached_input_tokens``; issue 28,
twenty-fourth round).

Servers keep the KV of prompts they have served (vLLM's automatic prefix caching,
SGLang's radix cache, TensorRT-LLM's KV block reuse); a request whose leading tokens
match prefills only the rest. Each piece isolated:

* a request prefills only its uncached tokens, and their attention still reads the
  cached prefix (``prefill_parts`` of the new tokens after the cached ones);
* TTFT and the chunks riding the other streams' steps shrink as more is cached, so the
  throughput grows; the KV (what the cache holds, the decode step alone) does not move;
* a finite run's prompts carry only their uncached tokens;
* the field is checked like the others (a request computes at least its last token).
"""

from __future__ import annotations

import copy

import pytest

from simengine import DEFAULT_PARAMS, Deployment, perf
from simengine.errors import SimEngineError
from simengine.prefill import prefill_parts
from simengine.serving import serving_point
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_kv import LLAMA_70B_BF16

SPEC = {
    "hardware": "h100",
    "devices": 4,
    "tensor_parallel": 4,
    "concurrency": 32,
    "input_tokens": 4096,
    "output_tokens": 256,
    "server": "vllm",
    "model": LLAMA_70B_BF16,
}


def _with(**fields):
    spec = copy.deepcopy(SPEC)
    spec.update(fields)
    return spec


def test_a_cached_prefix_is_not_prefilled_but_is_attended_over():
    m = model_from_spec(LLAMA_70B_BF16, tokens=8192)
    s = perf._serve(m, Deployment("h100", 4, nodes_per_replica=4), DEFAULT_PARAMS,
                    batch=1.0, context=4096.0)  # fmt: skip
    whole, _ = prefill_parts(s, 4096, 0)
    rest, side_rest = prefill_parts(s, 1024, 3072)
    alone, side_alone = prefill_parts(s, 1024, 0)
    # Prefilling the last quarter costs about a quarter of the whole: its GEMMs are a
    # quarter, and its attention over the cached 3,072 tokens is more than the same
    # 1,024 tokens' attention over themselves.
    assert rest < 0.5 * whole
    assert rest > alone
    assert side_rest > side_alone


def test_ttft_falls_and_throughput_rises_as_more_of_the_prompt_is_cached():
    points = [predict_spec(_with(cached_input_tokens=c)) for c in (0, 1024, 2048, 4095)]
    ttfts = [p["ttft_seconds"] for p in points]
    tpots = [p["time_per_output_token_seconds"] for p in points]
    throughputs = [p["throughput_tokens_per_second"] for p in points]
    assert ttfts == sorted(ttfts, reverse=True) and ttfts[-1] < 0.2 * ttfts[0]
    # The other streams' prompts ride the decode steps in smaller chunks.
    assert tpots == sorted(tpots, reverse=True) and tpots[-1] < tpots[0]
    assert throughputs == sorted(throughputs)
    # What the cache holds is every input token, cached or not.
    assert len({p["batch_cap"] for p in points}) == 1


def test_nothing_cached_is_the_engine_as_before():
    assert predict_spec(_with(cached_input_tokens=0)) == predict_spec(_with())


def test_without_prompts_to_ride_the_decode_step_does_not_depend_on_the_cache():
    # One stream: no other stream's prompt rides its steps, so only TTFT moves.
    one = [predict_spec(_with(concurrency=1, cached_input_tokens=c)) for c in (0, 4000)]
    assert one[0]["time_per_output_token_seconds"] == pytest.approx(
        one[1]["time_per_output_token_seconds"]
    )
    assert one[1]["ttft_seconds"] < one[0]["ttft_seconds"]


def test_a_finite_run_carries_only_the_uncached_prompt_tokens():
    runs = [
        predict_spec(_with(concurrency=None, offline_requests=64, cached_input_tokens=c))
        for c in (0, 4000)
    ]
    assert runs[1]["run_seconds"] < runs[0]["run_seconds"]
    assert runs[1]["throughput_tokens_per_second"] > runs[0]["throughput_tokens_per_second"]


def test_the_serving_point_and_the_spec_agree():
    m = model_from_spec(LLAMA_70B_BF16, tokens=4096 + 256)
    d = Deployment("h100", 4, nodes_per_replica=4)
    point = serving_point(m, d, concurrency=32, input_tokens=4096, output_tokens=256,
                          cached_input_tokens=2048, server="vllm")  # fmt: skip
    spec = predict_spec(_with(cached_input_tokens=2048))
    assert point["throughput_tokens_per_second"] == pytest.approx(
        spec["throughput_tokens_per_second"]
    )


@pytest.mark.parametrize("bad", [-1, 4096, 5000, 1.5, True, "10"])
def test_a_cache_hit_is_a_whole_number_below_the_prompt(bad):
    with pytest.raises(SimEngineError, match="cached_input_tokens"):
        predict_spec(_with(cached_input_tokens=bad))
    m = model_from_spec(LLAMA_70B_BF16, tokens=8192)
    with pytest.raises(SimEngineError, match="cached_input_tokens"):
        serving_point(m, Deployment("h100", 4, nodes_per_replica=4), input_tokens=4096,
                      output_tokens=256, cached_input_tokens=bad)  # fmt: skip

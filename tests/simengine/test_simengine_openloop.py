"""Open-loop load (issue 28): Poisson arrivals at ``rate_per_second`` (MLPerf's server
scenario). The batch is what the rate sustains (Little's law at the service time of
that batch), TTFT includes queueing, and a rate at or above capacity is an error that
names the capacity."""

from __future__ import annotations

import pytest

from simengine import SimEngineError
from simengine.spec import predict_spec

LLAMA_70B = {
    "name": "llama-3.3-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
    "head_dim": 128, "params_b": 70.6, "dtype": "fp8",
}  # fmt: skip
BASE = {"model": LLAMA_70B, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
        "input_tokens": 1000, "output_tokens": 500}  # fmt: skip
LLAMA_8B_FP8 = {
    "name": "llama-3.1-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
    "head_dim": 128, "params_b": 8.03, "dtype": "fp8",
}  # fmt: skip
WAFER = {"model": {**LLAMA_70B, "dtype": "bf16"}, "hardware": "cs-3",
         "input_tokens": 1000, "output_tokens": 500}  # fmt: skip


def _capacity(spec: dict) -> float:
    return predict_spec({**spec, "rate_per_second": 1e-3})["capacity_requests_per_second"]


@pytest.mark.parametrize("spec", [BASE, WAFER], ids=["gpu", "wafer"])
def test_ttft_rises_with_rate_and_diverges_near_capacity(spec):
    cap = _capacity(spec)
    ttfts = [
        predict_spec({**spec, "rate_per_second": f * cap})["ttft_seconds"]
        for f in (0.1, 0.5, 0.9, 0.99, 0.999)
    ]
    assert all(a < b for a, b in zip(ttfts, ttfts[1:], strict=False)), ttfts
    assert ttfts[-1] > 10 * ttfts[0]


@pytest.mark.parametrize("spec", [BASE, WAFER], ids=["gpu", "wafer"])
def test_low_rate_approaches_the_closed_loop_single_stream(spec):
    closed = predict_spec({**spec, "concurrency": 1})
    open_ = predict_spec({**spec, "rate_per_second": 1e-4 * _capacity(spec)})
    assert open_["ttft_seconds"] == pytest.approx(closed["ttft_seconds"], rel=0.01)
    assert open_["tokens_per_second"] == pytest.approx(closed["tokens_per_second"], rel=0.01)


def test_above_capacity_is_an_error_naming_the_capacity():
    cap = _capacity(BASE)
    with pytest.raises(SimEngineError, match=rf"at most {cap:.4g} requests/s"):
        predict_spec({**BASE, "rate_per_second": 1.01 * cap})
    with pytest.raises(SimEngineError, match=rf"at most {2 * cap:.4g} requests/s"):
        predict_spec({**BASE, "replicas": 2, "rate_per_second": 2.02 * cap})


def test_batch_follows_littles_law_and_throughput_is_the_rate():
    cap = _capacity(BASE)
    rate = 0.6 * cap
    r = predict_spec({**BASE, "rate_per_second": rate})
    service = (r["ttft_seconds"] - r["queue_seconds"]) + (500 - 1) * r[
        "time_per_output_token_seconds"
    ]
    assert r["batch"] == pytest.approx(rate * service, rel=1e-6)
    assert r["throughput_tokens_per_second"] == pytest.approx(rate * 500)
    busier = predict_spec({**BASE, "rate_per_second": 0.9 * cap})
    assert busier["batch"] > r["batch"]
    assert busier["time_per_output_token_seconds"] > r["time_per_output_token_seconds"]


def test_rate_is_split_evenly_over_replicas():
    cap = _capacity(BASE)
    three = {**BASE, "replicas": 3}
    assert _capacity(three) == pytest.approx(3 * cap)
    one = predict_spec({**BASE, "rate_per_second": 0.5 * cap})
    split = predict_spec({**three, "rate_per_second": 1.5 * cap})
    assert split["ttft_seconds"] == pytest.approx(one["ttft_seconds"])
    assert split["throughput_tokens_per_second"] == pytest.approx(
        3 * one["throughput_tokens_per_second"]
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rate_per_second": 1.0, "concurrency": 4}, "not both"),
        ({"rate_per_second": 0}, "rate_per_second must be a number > 0"),
        ({"rate_per_second": "fast"}, "rate_per_second must be a number > 0"),
    ],
)
def test_open_loop_field_errors(fields, message):
    with pytest.raises(SimEngineError, match=message):
        predict_spec({**BASE, **fields})


def test_an_open_loops_first_token_waits_for_the_prompts_ahead_once():
    # Issue 28, thirty-second round. Chunked prefill serves waiting prompts first come,
    # first served: the prompts ahead of a request are its M/D/1 prefill queue, and its
    # own chunk steps then carry its chunks and the batch's decodes, not the others'
    # prompts (those ride its decode steps: TPOT's prefill_riding). Before, its chunk
    # steps also carried the mean field's riding prompts, counting the queue twice.
    spec = {"model": LLAMA_8B_FP8, "hardware": "h100", "devices": 1, "input_tokens": 4000,
            "output_tokens": 200}  # fmt: skip
    chunks = 2  # 4,000 tokens in pieces of the generic 2,048
    cap = _capacity(spec)
    idle = predict_spec({**spec, "rate_per_second": 1e-4 * cap})
    assert idle["batch"] < 1.0  # timed at one stream: nothing rides
    prefill = (
        idle["ttft_seconds"]
        - idle["queue_seconds"]
        - chunks * idle["time_per_output_token_seconds"]
    )
    for f in (0.5, 0.9):
        r = predict_spec({**spec, "rate_per_second": f * cap})
        parts = r["time_per_output_token_parts"]
        assert parts["prefill_riding"] > 0.0  # the others' prompts ride the decode steps
        step = r["time_per_output_token_seconds"] - parts["prefill_riding"] - parts["transport"]
        assert r["ttft_seconds"] - r["queue_seconds"] == pytest.approx(prefill + chunks * step)

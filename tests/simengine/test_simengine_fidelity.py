"""Issue 15: load-dependent GPU batching, TTFT that means TTFT, per-replica queues."""

from __future__ import annotations

import numpy as np
import pytest

from simengine import (
    DEFAULT_PARAMS,
    GDPVAL_TASK,
    Deployment,
    TaskProfile,
    predict,
    simulate_queue,
    wait_estimate,
)
from simengine.queueing import erlang_c, mmc_p90_wait, total_wait_quantile
from simengine.spec import predict_spec

LLAMA_70B_FP8 = {
    "name": "llama-3.3-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
    "head_dim": 128, "params_b": 70.6, "dtype": "fp8",
}  # fmt: skip
H100_TP2 = {"model": LLAMA_70B_FP8, "hardware": "h100", "devices": 2, "tensor_parallel": 2}
STANDARD = Deployment("h200", 4096, "standard")
SHORT = TaskProfile(input_tokens=1_000, output_tokens=200)


def test_per_stream_speed_falls_and_throughput_rises_with_concurrency():
    points = [
        predict_spec({**H100_TP2, "concurrency": c, "input_tokens": 2000, "output_tokens": 500})
        for c in (1, 4, 16, 64)
    ]
    speeds = [p["tokens_per_second"] for p in points]
    throughput = [p["throughput_tokens_per_second"] for p in points]
    assert all(b < a for a, b in zip(speeds, speeds[1:], strict=False)), speeds
    assert all(b > a for a, b in zip(throughput, throughput[1:], strict=False)), throughput


def test_gpu_tier_speed_depends_on_load(sol):
    calm = predict(sol, STANDARD, GDPVAL_TASK, load=0.1, breakdown=False)
    busy = predict(sol, STANDARD, GDPVAL_TASK, load=0.95, breakdown=False)
    assert calm.batch < busy.batch
    assert calm.tokens_per_second > 1.3 * busy.tokens_per_second


def test_ttft_grows_with_prompt_length_as_prefill_compute_says():
    def ttft(tokens: int) -> float:
        spec = {**H100_TP2, "input_tokens": tokens, "output_tokens": 100}
        return predict_spec(spec)["ttft_seconds"]

    # Compute-bound prefill: about linear in the prompt (plus the causal attention term).
    ratio = ttft(16_000) / ttft(2_000)
    assert 7.0 < ratio < 10.0
    assert ttft(500) < 0.1  # a short prompt on a 70B model: tens of milliseconds


def test_wafer_ttft_of_a_1000_token_prompt_is_well_under_a_second(sol, spark):
    for model, dep in (
        (sol, Deployment("wse-3", 64, "ultrafast")),
        (spark, Deployment("wse-3", 8)),
    ):
        assert predict(model, dep, SHORT).ttft_seconds < 0.5
    r = predict_spec({"model": {**LLAMA_70B_FP8, "dtype": "bf16"}, "hardware": "cs-3"})
    assert r["ttft_seconds"] < 0.5


def test_ttft_holds_nothing_of_the_agents_per_turn_term(sol):
    more = DEFAULT_PARAMS.with_values({"agent:turn_overhead": 30.0})
    dep = Deployment("wse-3", 64, "ultrafast")
    base = predict(sol, dep, GDPVAL_TASK)
    heavy = predict(sol, dep, GDPVAL_TASK, params=more)
    assert heavy.ttft_seconds == pytest.approx(base.ttft_seconds)
    assert heavy.generation_seconds > base.generation_seconds + 29 * 30 * 0.9
    # A single request has no agent turn term at all.
    assert predict(sol, dep, SHORT).agent_seconds == 0.0


def test_a_pool_at_90_percent_load_shows_a_wait(sol, spark):
    for model, dep in (
        (sol, STANDARD),
        (sol, Deployment("wse-3", 64, "ultrafast")),
        (spark, Deployment("wse-3", 8)),
    ):
        pred = predict(model, dep, GDPVAL_TASK if model is sol else SHORT, load=0.9)
        assert pred.queue_seconds > 0, dep
        assert not pred.queue_saturated


def test_total_wait_quantile_is_the_p90_of_the_sum_not_a_sum_of_p90s():
    c, rho, mu = 8, 0.8, 1.0
    prob = erlang_c(c, rho * c)
    cond = 1.0 / (c * mu - rho * c * mu)
    assert total_wait_quantile(prob, cond, 1) == pytest.approx(mmc_p90_wait(c, rho * c, mu)[0])
    rng = np.random.default_rng(1)
    for turns in (5, 30):
        waits = (rng.random((200_000, turns)) < prob) * rng.exponential(cond, (200_000, turns))
        simulated = np.quantile(waits.sum(axis=1), 0.9)
        assert total_wait_quantile(prob, cond, turns) == pytest.approx(simulated, rel=0.05)
        assert total_wait_quantile(prob, cond, turns) < turns * mmc_p90_wait(c, rho * c, mu)[0]


@pytest.mark.parametrize("rho", [0.5, 0.7, 0.84])
def test_random_routing_to_replicas_des_agrees_with_per_replica_closed_form(rho):
    # Jobs routed to one of R replicas at random: each replica is an M/M/c with 1/R of
    # the arrivals. The event simulation and the closed form agree within 10 %.
    replicas, servers, mu, n = 4, 8, 1.0, 400_000
    rng = np.random.default_rng(7)
    lam = rho * replicas * servers * mu
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    pool = rng.integers(0, replicas, n)
    sim = simulate_queue(arrival, service, [servers] * replicas, pool=pool)
    closed = wait_estimate(servers, lam / replicas, mu)
    skip = n // 10  # warm-up
    assert sim.wait[skip:].mean() == pytest.approx(closed.mean_wait, rel=0.10)

"""The host's work per decode step (simengine/host.py; issue 28, eighth round).

Each piece isolated:

* a step takes the longer of the GPU's step and the host's per-request work for it, so a
  small-active model at a large batch stops gaining throughput once the host binds:
  tokens/s per scheduler level off at 1 / (seconds per request);
* the host is the hardware's: a GB200 (Grace) host binds earlier than a B200's (x86);
* attention data parallelism runs one scheduler per rank, each over its own requests;
* a large model's step is longer than the host's work at any batch the KV cache holds,
  so nothing changes for it;
* the summed and scheduled forms of a step (``StepLine.weighted_sum``, the finite
  run's per-batch-size timing) agree with the step evaluated point by point.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simengine import offline, perf, serving
from simengine.host import host_param, host_step_seconds
from simengine.params import DEFAULT_PARAMS
from simengine.spec import model_from_spec, predict_spec
from simengine.step import Points, StepLine

from .test_simengine_kv import LLAMA_8B

# A small-active mixture of experts (a 30B / 3B shape): its GPU step is short against
# the per-request host work of a large batch.
SMALL_MOE = {"name": "moe-30b-a3b", "layers": 48, "hidden": 2048, "heads": 32,
             "kv_heads": 4, "head_dim": 128, "params_b": 30.0, "active_params_b": 3.0,
             "experts": 128, "experts_per_token": 8, "shared_experts": 0,
             "dtype": "nvfp4", "kv_dtype": "fp8"}  # fmt: skip
NO_HOST = DEFAULT_PARAMS.with_values({host_param("grace"): 0.0, host_param("x86"): 0.0})


def _spec(hardware: str, batch: int, **extra) -> dict:
    return {"model": SMALL_MOE, "hardware": hardware, "devices": 1, "concurrency": batch,
            "max_batch_size": batch, "input_tokens": 200, "output_tokens": 200,
            **extra}  # fmt: skip


def _tokens_per_second(spec: dict, params=DEFAULT_PARAMS) -> float:
    return predict_spec(spec, params)["throughput_tokens_per_second"]


def test_host_step_is_the_requests_over_the_schedulers():
    assert host_step_seconds(2e-5, 1000) == pytest.approx(0.02)
    assert host_step_seconds(2e-5, 1000, schedulers=4) == pytest.approx(0.005)
    assert host_step_seconds(2e-5, 1000, schedulers=0) == pytest.approx(0.02)
    line = StepLine(0.01, 0.0, 0.0, 0.0, 0.0, floor=0.02)
    assert line.at(5.0) == 0.02 and line._replace(mem0=0.03).at(5.0) == 0.03
    assert line.at(np.array([1.0, 2.0])).tolist() == [0.02, 0.02]


def test_the_host_binds_a_small_active_moe_at_a_large_batch():
    # Without the host term throughput keeps growing with the batch; with it, once the
    # host binds, the step is batch x seconds per request: tokens/s level off at its
    # inverse (the GPU step and the prefill are below it).
    per_request = DEFAULT_PARAMS.get(host_param("grace"))
    with_host = [_tokens_per_second(_spec("gb200-nvl72", b)) for b in (64, 1024, 2048)]
    without = [_tokens_per_second(_spec("gb200-nvl72", b), NO_HOST) for b in (64, 1024, 2048)]
    assert with_host[0] == pytest.approx(without[0], rel=1e-9)  # GPU-bound at 64
    assert without[2] > 1.05 * without[1]
    assert with_host[2] < without[2] and with_host[1] < without[1]
    assert with_host[2] == pytest.approx(with_host[1], rel=0.05)
    assert with_host[2] == pytest.approx(1.0 / per_request, rel=0.01)
    tpot = predict_spec(_spec("gb200-nvl72", 2048))["time_per_output_token_seconds"]
    assert tpot == pytest.approx(2048 * per_request, rel=1e-9)


def test_a_grace_host_binds_before_an_x86_host():
    assert DEFAULT_PARAMS.get(host_param("grace")) > 2 * DEFAULT_PARAMS.get(host_param("x86"))
    # B200 and GB200 have the same HBM bandwidth; at a batch where the GB200's Grace host
    # binds, the B200's x86 host does not (its step is the GPU's).
    b200 = _tokens_per_second(_spec("b200", 384))
    assert b200 == pytest.approx(_tokens_per_second(_spec("b200", 384), NO_HOST), rel=1e-9)
    gb200 = _tokens_per_second(_spec("gb200-nvl72", 384))
    assert gb200 < 0.9 * _tokens_per_second(_spec("gb200-nvl72", 384), NO_HOST)
    assert gb200 < b200


def test_attention_data_parallel_ranks_each_schedule_their_own_requests():
    # Four GPUs, 4 x 1024 streams: as one tensor-parallel scheduler the host walks all
    # 4,096 requests each step; under attention data parallelism each rank walks its 1,024.
    base = {"model": SMALL_MOE, "hardware": "gb200-nvl72", "devices": 4,
            "tensor_parallel": 4, "expert_parallel": 4, "concurrency": 4096,
            "input_tokens": 200, "output_tokens": 200}  # fmt: skip
    tp = predict_spec({**base, "max_batch_size": 4096})
    dp = predict_spec({**base, "max_batch_size": 1024, "attention_data_parallel": True})
    per_request = DEFAULT_PARAMS.get(host_param("grace"))
    assert tp["batch"] == dp["batch"] == 4096
    assert tp["time_per_output_token_seconds"] == pytest.approx(4096 * per_request, rel=1e-9)
    assert dp["time_per_output_token_seconds"] < 0.5 * 4096 * per_request


def test_a_large_model_is_never_host_bound():
    # An 8B dense model on one H100 (x86) at the largest batch its KV cache holds: the
    # GPU step is longer than the host's work, so the host term changes nothing.
    spec = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 4096,
            "max_batch_size": 4096, "input_tokens": 1000, "output_tokens": 1000}  # fmt: skip
    got = predict_spec(spec)
    assert got["batch"] > 300
    assert got == predict_spec(spec, NO_HOST)


@pytest.mark.parametrize("seed", range(5))
def test_weighted_sum_with_a_host_floor_equals_the_sum_point_by_point(seed):
    # Floors below every point's GPU step, above all of them, and crossing in between.
    rng = np.random.default_rng(seed)
    for _ in range(200):
        x = np.sort(rng.uniform(0, 1e5, rng.integers(1, 60)))
        w = rng.uniform(0, 3, x.size) * (rng.random(x.size) < 0.8)
        m0, f0 = rng.uniform(1e-4, 1e-2, 2)
        m1 = rng.uniform(1e-9, 1e-7)
        f1 = rng.choice([m1, rng.uniform(1e-9, 1e-7), 0.0])
        fixed = rng.uniform(0, 1e-3)
        line = StepLine(m0, m1, f0, f1, fixed)
        mid = float(line.at(x[x.size // 2]))
        floor = rng.choice([0.0, 1e-6, mid, rng.uniform(0.0, 2 * mid), 1.0])
        line = line._replace(floor=float(floor))
        direct = math.fsum((w * line.at(x)).tolist())
        got = line.weighted_sum(Points.of(x, w))
        assert got == pytest.approx(direct, rel=1e-9, abs=1e-15)


def test_a_finite_run_scheduled_then_timed_matches_the_step_event_by_event():
    # A host-bound finite run: the per-batch-size timing (step_many) gives the run the
    # step point by point gives.
    model = model_from_spec(SMALL_MOE)
    deployment = perf.Deployment(device="gb200-nvl72", nodes=1)
    s = perf._serve(model, deployment, DEFAULT_PARAMS.with_values({"tier:standard:batch": 1024.0}),
                    context=300.0)  # fmt: skip
    outputs = offline.output_lengths(200, 0.0, 1500)

    def step(b, c):
        # step_many's form: the line at context 1, scaled by the context.
        line = perf._token_line(s, b, 1.0)
        return line._replace(mem0=line.mem0 * c, flop0=line.flop0 * c, mem1=0.0,
                             flop1=0.0).at(1.0)  # fmt: skip

    def step_one(b, c):
        return perf._token_line(s, b, c).at(c)

    one = offline.simulate(step_one, outputs, 200, 1024, 0.0)
    floors = [perf._token_line(s, b, 300.0).floor for b in (1024.0, 200.0)]
    assert floors[0] > perf._token_line(s, 1024.0, 300.0)._replace(floor=0.0).at(300.0)
    assert floors[1] < floors[0]
    run = serving.offline_run(s, 1500, 200, 200, 0.0, None, 1024, 0.0, 0.0)
    assert run.seconds == pytest.approx(one.seconds, rel=1e-9)
    assert step(1024.0, 300.0) == pytest.approx(step_one(1024.0, 300.0), rel=1e-9)


def test_a_host_bound_finite_run_hides_the_prefills_in_its_steps():
    # Ten waves of ten 50-token requests: each wave is 50 steps carrying ten prefills.
    # GPU-bound (no host): 50 x 1 ms + 10 x 1 ms a wave. Host-bound (5 ms a step): the
    # prefills ride in steps the host holds anyway, 50 x 5 ms a wave.
    outputs = np.full(100, 50.0)

    def step(b, c):
        return 1e-3

    def host(b):
        return np.full(len(b), 5e-3)

    gpu = offline.simulate(step, outputs, 100, 10, prefill_busy=1e-3)
    bound = offline.simulate(step, outputs, 100, 10, prefill_busy=1e-3, host_many=host)
    assert gpu.seconds == pytest.approx(10 * (50e-3 + 10e-3))
    assert bound.seconds == pytest.approx(10 * 50 * 5e-3)
    assert bound.step_seconds == pytest.approx(5e-3 - 10e-3 / 50)
    # A host lighter than the GPU changes nothing.
    light = offline.simulate(step, outputs, 100, 10, prefill_busy=1e-3,
                             host_many=lambda b: np.full(len(b), 0.5e-3))  # fmt: skip
    assert light.seconds == pytest.approx(gpu.seconds, rel=1e-12)
    assert light.completion_quantiles == pytest.approx(gpu.completion_quantiles, rel=1e-12)

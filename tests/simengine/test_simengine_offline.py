"""A finite Offline run (simengine/offline.py; issue 28, fifth round).

Each piece isolated: the output lengths have the stated mean and spread and respect the
cap; the run's event loop matches the closed form for fixed lengths and a fixed step;
the drain at the end makes a finite run slower than the steady state, less so as the run
grows, and more so as the outputs spread; the spec fields reach the engine and bad
combinations are errors.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from simengine import SimEngineError
from simengine.offline import output_lengths, simulate
from simengine.spec import predict_spec

from .test_simengine_kv import LLAMA_8B

SPEC = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "max_batch_size": 256,
        "input_tokens": 500, "output_tokens": 1000}  # fmt: skip


def test_output_lengths_have_the_stated_mean_and_spread():
    x = output_lengths(2000, 1.0, 20000)
    assert x.mean() == pytest.approx(2000, rel=0.01)
    assert x.std() / x.mean() == pytest.approx(1.0, rel=0.03)
    assert (x >= 1).all() and np.array_equal(x, np.rint(x))
    # Deterministic, and in a shuffled order (not sorted).
    assert np.array_equal(x, output_lengths(2000, 1.0, 20000))
    assert not np.array_equal(x, np.sort(x))
    assert (output_lengths(700, 0.0, 50) == 700).all()


def test_output_lengths_respect_the_cap():
    x = output_lengths(3886, 1.114, 4388, cap=20000)
    assert x.max() == 20000 and (x == 20000).sum() > 10
    assert x.mean() < 3886  # the cap takes the tail's excess
    with pytest.raises(SimEngineError):
        output_lengths(100, 0.5, 0)


def test_fixed_lengths_and_a_fixed_step_run_in_whole_waves():
    # 10 requests of 100 tokens, 4 slots, 1 s per step, 0.5 s of prefill each:
    # waves of 4, 4, 2 -> 300 steps, plus 10 prefills.
    run = simulate(lambda b, c: 1.0, np.full(10, 100.0), 50, 4, prefill_busy=0.5)
    assert run.seconds == pytest.approx(300 + 10 * 0.5)
    assert run.output_tokens == 1000
    assert run.mean_batch == pytest.approx(1000 / 300)
    assert run.drain_seconds == pytest.approx(100.0)  # the last wave, after its prefills


def test_completion_times_are_the_waves_ends():
    # 10 requests of 100 tokens, 4 slots, 1 s per step: 4 finish at 100 s, 4 at 200 s,
    # 2 at 300 s (the median, 90th and 99th percentiles of those ten times).
    run = simulate(lambda b, c: 1.0, np.full(10, 100.0), 50, 4)
    assert run.completion_quantiles == pytest.approx((200.0, 300.0, 300.0))


def test_completion_percentiles_reach_the_prediction():
    spread = predict_spec({**SPEC, "offline_requests": 2048, "output_tokens_cv": 1.0,
                           "max_output_tokens": 8000})  # fmt: skip
    p50, p90, p99 = (spread[f"completion_p{q}_seconds"] for q in (50, 90, 99))
    assert 0 < p50 < p90 < p99 <= spread["run_seconds"]
    # A long tail: the last percent of the requests take a good share of the run.
    assert spread["run_seconds"] - p99 > 0.05 * spread["run_seconds"]
    steady = predict_spec({**SPEC, "concurrency": 64})
    assert steady["completion_p50_seconds"] is None


def _reference_run(step, outputs, input_tokens, slots, busy):
    # The run event by event, one completion at a time (the definition simulate's
    # schedule-then-time form must reproduce): (seconds, completion times, mean wait,
    # drain).
    heap, k, t, sum_start, nxt, waited, last, finished = [], 0, 0.0, 0, 0, 0.0, 0.0, []

    def admit():
        nonlocal nxt, sum_start, t, waited, last
        heapq.heappush(heap, (k + int(outputs[nxt]), k))
        sum_start += k
        nxt += 1
        t += busy
        waited += t
        last = t

    while nxt < len(outputs) and len(heap) < slots:
        admit()
    while heap:
        finish, active = heap[0][0], len(heap)
        dk = finish - k
        t += dk * step(float(active), input_tokens + (k + dk / 2.0) - sum_start / active)
        k = finish
        while heap and heap[0][0] == k:
            sum_start -= heapq.heappop(heap)[1]
            finished.append(t)
            if nxt < len(outputs):
                admit()
    return t, np.array(finished), waited / len(outputs), t - last


@pytest.mark.parametrize(("n", "slots", "cv", "busy"),
                         [(50, 8, 0.0, 0.0), (300, 16, 1.0, 0.05), (1000, 64, 0.6, 0.002),
                          (7, 16, 1.2, 0.3)])  # fmt: skip
def test_the_schedule_and_its_timing_match_the_run_event_by_event(n, slots, cv, busy):
    outputs = output_lengths(400, cv, n, cap=3000)

    def step(b, c):
        return 1e-3 + 2e-5 * b + 1e-8 * b * c

    run = simulate(step, outputs, 200, slots, prefill_busy=busy)
    seconds, finished, wait, drain = _reference_run(step, outputs, 200, slots, busy)
    assert run.seconds == pytest.approx(seconds, rel=1e-12)
    assert run.completion_quantiles == pytest.approx(
        tuple(np.quantile(finished, (0.5, 0.9, 0.99))), rel=1e-12
    )
    assert run.mean_wait == pytest.approx(wait, rel=1e-12)
    assert run.drain_seconds == pytest.approx(drain, rel=1e-9, abs=1e-12)
    # The same with the step given for arrays of batches and contexts.
    many = simulate(step, outputs, 200, slots, prefill_busy=busy,
                    step_many=lambda b, c: 1e-3 + 2e-5 * b + 1e-8 * b * c)  # fmt: skip
    assert many.seconds == pytest.approx(run.seconds, rel=1e-12)


def test_step_sees_the_streams_mean_context():
    seen = []

    def step(b, c):
        seen.append((b, c))
        return 1.0

    simulate(step, np.array([10.0, 30.0]), 100, 2)
    # First interval: both streams, steps 0-10, midpoint 5 -> context 105; then one
    # stream from step 10 to 30 (started at 0), midpoint 20 -> 120.
    assert seen == [(2.0, 105.0), (1.0, 120.0)]


def test_a_finite_run_drains_slower_than_the_steady_state_and_less_as_it_grows():
    steady = predict_spec({**SPEC, "concurrency": 256})["throughput_tokens_per_second"]
    thr = [
        predict_spec({**SPEC, "offline_requests": n})["throughput_tokens_per_second"]
        for n in (300, 1100, 8300)  # a partial last wave each
    ]
    assert thr == sorted(thr) and thr[-1] < steady
    assert thr[0] < 0.9 * steady  # 256 + 44: the second wave runs at 44 streams
    # Whole waves of fixed lengths are the steady state's steps plus the prefills;
    # thousands of requests come within a few percent of it.
    assert thr[-1] == pytest.approx(steady, rel=0.03)


def test_spread_outputs_drain_longer():
    fixed = predict_spec({**SPEC, "offline_requests": 2048})
    spread = predict_spec({**SPEC, "offline_requests": 2048, "output_tokens_cv": 1.0,
                           "max_output_tokens": 8000})  # fmt: skip
    assert spread["drain_seconds"] > 2 * fixed["drain_seconds"]
    assert spread["throughput_tokens_per_second"] < fixed["throughput_tokens_per_second"]
    assert spread["run_seconds"] > fixed["run_seconds"]
    # A steady-state prediction has no run.
    assert predict_spec({**SPEC, "concurrency": 64})["run_seconds"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"offline_requests": 0}, "offline_requests"),
        ({"offline_requests": 10, "rate_per_second": 1.0}, "not both"),
        ({"max_output_tokens": 2000}, "applies to an offline run"),
        ({"offline_requests": 10, "max_output_tokens": 999}, "max_output_tokens"),
        (
            {
                "offline_requests": 10,
                "output_tokens_cv": 2.0,
                "model": {**LLAMA_8B, "context_window": 4000},
            },
            "context_window",
        ),  # fmt: skip
    ],
)
def test_bad_offline_specs_are_errors(extra, message):
    with pytest.raises(SimEngineError, match=message):
        predict_spec({**SPEC, **extra})

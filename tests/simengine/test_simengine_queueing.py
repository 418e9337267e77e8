"""Queues: closed-form check values, saturation, DES exactness and agreement."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from simengine import JobStream, SimEngineError, simulate_queue, synthetic_jobs, wait_estimate
from simengine.queueing import _fcfs_heap


def _simpy_reference():
    path = Path(__file__).resolve().parents[2] / "bench" / "simpy_reference.py"
    spec = importlib.util.spec_from_file_location("simpy_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.simulate_simpy


def test_erlang_c_check_values_from_the_notes():
    est = wait_estimate(4, 3.5, 1.0)
    assert est.prob_wait == pytest.approx(0.7379, abs=5e-5)
    assert est.mean_wait == pytest.approx(1.476, abs=5e-4)
    assert not est.saturated
    assert est.utilisation == pytest.approx(0.875)


def test_priority_class_check_values_from_the_notes():
    est = wait_estimate(4, [1.0, 1.5, 1.0], 1.0)
    waits = [c.mean_wait for c in est.classes]
    assert waits == pytest.approx([0.246, 0.656, 3.935], abs=5e-4)


def test_p90_matches_the_mmc_tail():
    est = wait_estimate(4, 3.5, 1.0)
    # P(W > t) = C exp(-(c mu - lambda) t) at t = P90 must be 0.1.
    assert est.prob_wait * math.exp(-(4 - 3.5) * est.p90_wait) == pytest.approx(0.1)


def test_allen_cunneen_scales_waits_by_variability():
    base = wait_estimate(4, 3.0, 1.0)
    deterministic_service = wait_estimate(4, 3.0, 1.0, cv_service=0.0)
    assert deterministic_service.mean_wait == pytest.approx(base.mean_wait / 2)


@pytest.mark.parametrize("rate", [4.0, 5.0, 400.0])
def test_saturated_queue_is_flagged_with_infinite_waits(rate):
    est = wait_estimate(4, rate, 1.0)
    assert est.saturated
    assert est.mean_wait == math.inf and est.p90_wait == math.inf


def test_high_priority_class_stays_finite_when_lower_classes_saturate():
    est = wait_estimate(4, [1.0, 4.0], 1.0)
    assert est.saturated
    assert math.isfinite(est.classes[0].mean_wait)
    assert est.classes[1].saturated and est.classes[1].mean_wait == math.inf


def test_waits_grow_without_bound_as_load_nears_capacity():
    loads = [0.5, 0.8, 0.9, 0.99, 0.999, 0.9999]
    waits = [wait_estimate(8, rho * 8, 1.0).mean_wait for rho in loads]
    p90s = [wait_estimate(8, rho * 8, 1.0).p90_wait for rho in loads]
    assert all(b > a for a, b in zip(waits, waits[1:], strict=False))
    assert all(b > a for a, b in zip(p90s[1:], p90s[2:], strict=False))
    assert waits[-1] > 1000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"servers": 0, "arrival_rate": 1.0, "service_rate": 1.0},
        {"servers": 2, "arrival_rate": -1.0, "service_rate": 1.0},
        {"servers": 2, "arrival_rate": 1.0, "service_rate": 0.0},
        {"servers": 2, "arrival_rate": float("nan"), "service_rate": 1.0},
    ],
)
def test_wait_estimate_rejects_invalid_input(kwargs):
    with pytest.raises(SimEngineError):
        wait_estimate(**kwargs)


@pytest.mark.parametrize("servers", [1, 4, 16])
@pytest.mark.parametrize("rho", [0.5, 0.7, 0.85])
def test_simulation_agrees_with_closed_form_below_85_percent_load(servers, rho):
    # Waits are rare with many servers at low load (1-2 % of jobs), so the simulated
    # mean is noisier there (~8 % sd at 10^6 jobs): use more jobs for that case.
    jobs = 4_000_000 if servers * (1 - rho) >= 8 else 1_000_000
    arrival, service, _, _ = synthetic_jobs(jobs, [JobStream(rho * servers, 1.0)], seed=7)
    sim = simulate_queue(arrival, service, servers)
    est = wait_estimate(servers, rho * servers, 1.0)
    assert sim.mean_wait() == pytest.approx(est.mean_wait, rel=0.10)
    if est.p90_wait > 0:
        assert sim.quantile_wait(0.9) == pytest.approx(est.p90_wait, rel=0.10)
    else:  # fewer than 10 % of jobs wait: the simulated P90 is (almost) zero too
        assert sim.quantile_wait(0.9) < 0.05 * 1.0


def test_priority_simulation_agrees_with_closed_form_per_class():
    rates = [0.8 * 4 / 3] * 3
    streams = [JobStream(r, 1.0, pool=0, priority=cls) for cls, r in enumerate(rates)]
    arrival, service, pool, prio = synthetic_jobs(1_000_000, streams, seed=3)
    sim = simulate_queue(arrival, service, 4, priority=prio, pool=pool)
    est = wait_estimate(4, rates, 1.0)
    for cls, expected in enumerate(est.classes):
        assert sim.mean_wait(prio == cls) == pytest.approx(expected.mean_wait, rel=0.10)


def test_lindley_path_equals_the_event_loop_exactly():
    arrival, service, _, _ = synthetic_jobs(50_000, [JobStream(0.9, 1.0)], seed=1)
    vectorised = simulate_queue(arrival, service, 1).start
    loop = np.array(_fcfs_heap(arrival.tolist(), service.tolist(), 1))
    assert np.max(np.abs(vectorised - loop)) < 1e-9


def test_simulation_matches_simpy_job_by_job_on_the_same_seed():
    streams = [
        JobStream(2.0, 1.0, pool=0, priority=0),
        JobStream(2.0, 1.0, pool=0, priority=1),
        JobStream(1.0, 1.0, pool=0, priority=2),
        JobStream(0.7, 1.0, pool=1, priority=0),
        JobStream(2.5, 2.0, pool=2, priority=0),
    ]
    arrival, service, pool, prio = synthetic_jobs(20_000, streams, seed=11)
    servers = (6, 1, 6)
    engine = simulate_queue(arrival, service, servers, priority=prio, pool=pool)
    reference = _simpy_reference()(arrival, service, servers, prio, pool)
    assert np.max(np.abs(engine.start - reference)) < 1e-9


def test_unsorted_input_keeps_the_callers_job_order():
    arrival, service, pool, prio = synthetic_jobs(
        5_000, [JobStream(1.5, 1.0, 0, 0), JobStream(1.5, 1.0, 0, 1)], seed=5
    )
    perm = np.random.default_rng(0).permutation(arrival.size)
    sorted_run = simulate_queue(arrival, service, 4, priority=prio)
    shuffled = simulate_queue(arrival[perm], service[perm], 4, priority=prio[perm])
    assert np.array_equal(shuffled.wait, sorted_run.wait[perm])


def test_higher_priority_waits_less_on_a_shared_pool():
    streams = [JobStream(1.2, 1.0, 0, cls) for cls in range(3)]
    arrival, service, pool, prio = synthetic_jobs(200_000, streams, seed=2)
    sim = simulate_queue(arrival, service, 4, priority=prio)
    waits = [sim.mean_wait(prio == cls) for cls in range(3)]
    assert waits[0] < waits[1] < waits[2]


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (([0.0, 1.0], [1.0], 1), {}),
        (([0.0, 1.0], [1.0, -1.0], 1), {}),
        (([0.0, 1.0], [1.0, 1.0], 0), {}),
        (([0.0, 1.0], [1.0, 1.0], 1), {"pool": [0, 1]}),
    ],
)
def test_simulate_queue_rejects_invalid_input(args, kwargs):
    with pytest.raises(SimEngineError):
        simulate_queue(*args, **kwargs)


@pytest.mark.parametrize(
    ("servers", "rho"),
    [(1, 0.5), (4, 0.875), (64, 0.8), (64, 0.99), (24064, 0.5), (24064, 0.995), (24064, 0.9999)],
)
def test_the_fast_p90_agrees_with_the_full_estimate(servers, rho):
    from simengine.queueing import mmc_p90_wait

    mu = 0.25
    full = wait_estimate(servers, rho * servers * mu, mu)
    fast, saturated = mmc_p90_wait(servers, rho * servers * mu, mu)
    assert saturated is False
    assert fast == pytest.approx(full.p90_wait, rel=1e-9, abs=1e-9)


def test_the_queue_memos_answer_as_the_formulas_bit_for_bit():
    # erlang_c and total_wait_quantile are memoised (bounded, typed LRUs): a hit gives
    # the value the uncached formula computes, bit for bit, and ints, floats and numpy
    # scalars keep their own entries.
    import random

    from simengine.queueing import QUEUE_MEMO_SIZE, erlang_c, total_wait_quantile

    rng = random.Random(5)
    for _ in range(300):
        c = rng.choice([1, 2, 8, 64, 65, 500, 20_000])
        a = rng.uniform(0.0, 1.05) * c
        for _ in range(2):  # a miss, then a hit
            assert erlang_c(c, a).hex() == erlang_c.__wrapped__(c, a).hex()
        p, m, n = rng.random(), rng.uniform(0.01, 50.0), rng.choice([1, 2, 7, 30])
        for _ in range(2):
            got = total_wait_quantile(p, m, n)
            assert got.hex() == total_wait_quantile.__wrapped__(p, m, n).hex()
    for f in (erlang_c, total_wait_quantile):
        assert f.cache_info().maxsize == QUEUE_MEMO_SIZE
        assert f.cache_parameters()["typed"] is True
    erlang_c.cache_clear()
    erlang_c(4, 2.0)
    erlang_c(4, np.float64(2.0))
    assert erlang_c.cache_info().currsize == 2

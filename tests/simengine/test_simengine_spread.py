"""simengine.spread: the promise is a real quantile of what the worker draws."""

import math
import random

import pytest

import simengine
from simengine import GDPVAL_TASK, Deployment, completion_draw, predict
from simengine.spread import completion_quantile


def share_within(pred, turns, n=20000, seed=7):
    rng = random.Random(seed)
    promise = completion_quantile(pred, turns)
    hits = 0
    for _ in range(n):
        wait, run = completion_draw(pred, turns, rng.random() or 0.5, rng.random() or 0.5)
        hits += wait + run <= promise
    return hits / n


@pytest.mark.parametrize("load", [None, 0.5, 0.9, 0.97])
def test_the_promised_p90_is_exceeded_by_one_draw_in_ten(sol, load):
    dep = Deployment(device="h200", nodes=64, transport="reworked", tier="standard")
    pred = predict(sol, dep, GDPVAL_TASK, load=load, breakdown=False)
    share = share_within(pred, GDPVAL_TASK.turns)
    assert 0.885 < share < 0.915, (load, share)


def test_the_promise_is_not_a_sum_of_quantiles(sol):
    dep = Deployment(device="h200", nodes=64, transport="reworked", tier="standard")
    pred = predict(sol, dep, GDPVAL_TASK, load=0.9, breakdown=False)
    run = simengine.run_median_seconds(pred)
    promise = completion_quantile(pred, GDPVAL_TASK.turns)
    summed = pred.queue_seconds + run * math.exp(simengine.RUN_SPREAD * 1.2815515655446004)
    assert run < promise < summed


def test_without_a_wait_the_promise_is_the_run_spread_alone(sol):
    dep = Deployment(device="h200", nodes=64, transport="reworked", tier="flex")
    pred = predict(sol, dep, GDPVAL_TASK, breakdown=False)
    assert pred.wait_probability == 0 and pred.queue_seconds == 0
    model_run = pred.transport_seconds + pred.generation_seconds
    expected = pred.tool_seconds + model_run * math.exp(simengine.RUN_SPREAD * 1.2815515655446004)
    assert completion_quantile(pred, GDPVAL_TASK.turns) == pytest.approx(expected, rel=1e-9)


def test_draws_need_uniforms_inside_the_unit_interval(sol):
    pred = predict(
        sol, Deployment(device="h200", nodes=64, transport="reworked", tier="flex"), GDPVAL_TASK
    )
    with pytest.raises(ValueError):
        completion_draw(pred, 1, 0.0, 0.5)


def test_the_promise_is_calibrated_over_random_waits_and_runs():
    # Draws of wait + run (the worker's inverse transforms) against the promised P90,
    # over waits from rare to certain and runs from a second to a quarter hour.
    rng = random.Random(3)
    for _ in range(12):
        run, p = rng.uniform(1, 1000), rng.uniform(0.001, 0.99)
        mean, turns = rng.choice([0.1, 1, 10, 100]) * rng.uniform(0.5, 2), rng.choice([1, 4, 30])
        pred = simengine.Prediction(
            "m", "h200", "standard", "reworked", "s", 1.0, 0.1, run, 0.0, 0.0, 1.0,
            run + 1.0, 0.0, None, 8, 1, 64, 64, 0.5, False, (), p, mean,
        )  # fmt: skip
        share = share_within(pred, turns, n=8000, seed=rng.randrange(1 << 30))
        assert 0.88 < share < 0.92, (run, p, mean, turns, share)

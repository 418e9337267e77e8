"""The service profile vectorised over turns equals a plain per-turn loop (issue 16).

The reference below is the engine's former per-turn loop, written with the scalar forms
of the same formulas (prefill_parts, _token_seconds, _decode_span_seconds, _chunks);
predict() builds a numpy turn table and sums the per-token time over it in O(log turns)
per decode batch. Both must agree to ~1e-12 relative on random tasks, models and
deployments (GPU and wafer, prompt caching on and off, 1..200 turns, loads or none).
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from simengine import (
    DEFAULT_PARAMS,
    REFERENCE_MODELS,
    Deployment,
    SimEngineError,
    TaskProfile,
    load_catalog_models,
    perf,
    predict,
)
from simengine.prefill import interference, prefill_parts
from simengine.step import Points, StepLine

from .conftest import CATALOG

REL = 1e-12


def _plain_split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def reference(model, deployment, task, load, params):
    """(generation, producing, first turn's server TTFT, per-turn rows) turn by turn."""
    base = perf._serve(model, deployment, params)
    batch = None
    if load is not None and base.batch_cap is not None:
        batch = float(max(1, round(load * base.batch_cap)))
    context_mean = task.input_tokens + (task.output_tokens + task.tool_result_tokens) / 2.0
    s = perf._serve(model, deployment, params, batch=batch, context=context_mean)
    outputs = _plain_split(task.output_tokens, task.turns)
    tool = [0] + _plain_split(task.tool_result_tokens, task.turns - 1) if task.turns > 1 else [0]
    overhead = s.transport("ttft_overhead")
    agent = params.get("agent:turn_overhead") if task.turns > 1 else 0.0
    turns, context = [], 0
    for k in range(task.turns):
        new_input = task.input_tokens if k == 0 else tool[k]
        cached, new = (context, new_input) if task.prompt_caching else (0, context + new_input)
        context += new_input
        turns.append((new, cached, context, *prefill_parts(s, new, cached)))
        context += outputs[k]
    # The other streams' prompts ride every step of a turn: its chunk steps and its
    # decode steps, (chunks + output - 1) a turn on average.
    steps = sum(perf._chunks(s, t[0]) + outputs[k] - 1 for k, t in enumerate(turns))
    extra = interference(
        s,
        s.batch,
        sum(t[4] for t in turns) / task.turns,
        sum(t[0] for t in turns) / task.turns,
        steps / task.turns,
    )
    rows, producing = [], 0.0
    for k, (new, cached, ctx, prefill, _) in enumerate(turns):
        first = perf._token_seconds(s, ctx) + extra
        early = (perf._chunks(s, new) - 1) * (s.token_line.at(ctx) + extra)
        ttft = overhead + prefill + first + early
        decode = perf._decode_span_seconds(s, ctx + 1, outputs[k] - 1) + (outputs[k] - 1) * extra
        producing += first + decode
        rows.append((new, cached, outputs[k], ttft, decode, agent))
    generation = sum(t + d + a for _, _, _, t, d, a in rows)
    return generation, producing, rows[0][3], rows


MODELS = [*REFERENCE_MODELS.values(), *load_catalog_models(CATALOG).values()]


def _random_case(rng: random.Random):
    model = rng.choice(MODELS)
    budget = min(model.context_window, 60_000) // 3  # the task fits the window
    device = rng.choice(["h100", "h200", "b200", "wse-3"])
    deployment = Deployment(
        device,
        rng.choice([8, 64, 4096]),
        rng.choice(["flex", "standard", "priority", "ultrafast"]),
        transport=rng.choice(["reworked", "legacy"]),
        speculative=rng.random() < 0.3,
    )
    turns = rng.choice([1, 2, 3, 7, 30, 120, 200])
    task = TaskProfile(
        input_tokens=rng.randint(1, budget),
        output_tokens=max(turns, rng.randint(1, budget)),
        turns=turns,
        tool_result_tokens=rng.choice([0, rng.randint(1, budget)]),
        prompt_caching=rng.random() < 0.6,
    )
    load = rng.choice([None, 0.0, rng.uniform(0.0, 0.97)])
    params = rng.choice(
        [DEFAULT_PARAMS, DEFAULT_PARAMS.with_values({"gpu:prefill_chunk_tokens": 300.0})]
    )
    return model, deployment, task, load, params


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


def test_vectorised_profile_equals_the_per_turn_loop():
    rng = random.Random(16)
    checked = 0
    for _ in range(400):
        model, deployment, task, load, params = _random_case(rng)
        try:
            pred = predict(model, deployment, task, load=load, params=params)
        except SimEngineError:
            continue
        generation, producing, ttft0, rows = reference(model, deployment, task, load, params)
        assert _close(pred.generation_seconds, generation)
        assert _close(pred.tokens_per_second, task.output_tokens / producing)
        assert _close(pred.ttft_seconds, pred.transport_seconds / task.turns + ttft0)
        assert len(pred.turns) == len(rows)
        for got, want in zip(pred.turns, rows, strict=True):
            assert (got.new_tokens, got.cached_tokens, got.output_tokens) == want[:3]
            assert _close(got.ttft, want[3]) and _close(got.decode, want[4])
            assert got.agent == want[5]
        # the router's path (no breakdown) gives the same totals
        fast = predict(model, deployment, task, load=load, params=params, breakdown=False)
        assert fast.total_seconds == pred.total_seconds
        checked += 1
    assert checked >= 150  # most random cases run (the rest do not fit their pool)


@pytest.mark.parametrize("seed", range(5))
def test_weighted_sum_equals_the_sum_point_by_point(seed):
    # Both slope orders, crossings inside, before and after the points, equal slopes.
    rng = np.random.default_rng(seed)
    for _ in range(200):
        x = rng.uniform(0, 1e5, rng.integers(1, 60))
        w = rng.uniform(0, 3, x.size) * (rng.random(x.size) < 0.8)
        m0, f0 = rng.uniform(1e-4, 1e-2, 2)
        m1 = rng.uniform(1e-9, 1e-7)
        f1 = rng.choice([m1, rng.uniform(1e-9, 1e-7)])
        line = StepLine(m0, m1, f0, f1, rng.uniform(0, 1e-3))
        direct = math.fsum((w * line.at(x)).tolist())
        assert _close(line.weighted_sum(Points.of(x, w)), direct)


def _without_turns(pred) -> dict:
    data = pred.to_dict()
    del data["turns"]
    return data


def test_the_per_batch_memo_answers_as_the_full_profile():
    # The router's warm path reads a (model, deployment, task, batch) memo of small
    # totals; a hit, a miss and the full profile (breakdown) give the same prediction,
    # field by field, for equal objects that are not the same objects.
    rng = random.Random(61)
    perf._default_totals.cache_clear()
    checked = 0
    for _ in range(150):
        model, deployment, task, load, _ = _random_case(rng)
        try:
            full = predict(model, deployment, task, load=load)
        except SimEngineError:
            continue
        misses = perf._default_totals.cache_info().misses
        cold = predict(model, deployment, task, load=load, breakdown=False)
        assert perf._default_totals.cache_info().misses == misses + 1
        twin = tuple(dataclasses.replace(x) for x in (model, deployment, task))
        assert twin[2] is not task
        hits = perf._default_totals.cache_info().hits
        warm = predict(*twin, load=load, breakdown=False)
        assert perf._default_totals.cache_info().hits == hits + 1
        assert _without_turns(cold) == _without_turns(full) == _without_turns(warm)
        # another load on the same (model, deployment, task): another batch, its own entry
        other = rng.uniform(0.0, 0.97)
        assert _without_turns(predict(*twin, load=other, breakdown=False)) == _without_turns(
            predict(model, deployment, task, load=other)
        )
        checked += 1
    assert checked >= 50
    assert perf._default_totals.cache_info().maxsize == 262_144


def test_cache_keys_hash_once_by_their_fields():
    # ModelSpec, Deployment and TaskProfile keep their hash after the first call; it is
    # the fields' hash (equal objects hash alike), invisible to vars() and not pickled.
    import pickle

    for obj in (MODELS[0], Deployment("h200", 64, "flex"), TaskProfile(100, 20, turns=2)):
        fields = tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))
        assert hash(obj) == hash(fields) == hash(dataclasses.replace(obj))
        assert "_field_hash" not in vars(obj)
        data = pickle.dumps(obj)
        assert b"_field_hash" not in data and pickle.loads(data) == obj
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj._field_hash = 0
    assert Deployment("h200", 64, "flex") != Deployment("h200", 64, "standard")


def test_the_warm_path_answers_as_the_general_one_with_tier_mixes_and_errors():
    # predict(breakdown=False) with the default parameters takes its own short path
    # (the deployment's head and the per-batch memo); the same Prediction as the full
    # profile, priority classes included, and the same errors in the same order.
    rng = random.Random(67)
    checked = 0
    for _ in range(120):
        model, deployment, task, load, _ = _random_case(rng)
        mix = rng.choice([None, {deployment.tier: 1.0, "flex": 0.5, "priority": 0.3}])
        try:
            full = predict(model, deployment, task, load=load, tier_mix=mix)
        except SimEngineError as exc:
            with pytest.raises(SimEngineError) as fast:
                predict(model, deployment, task, load=load, tier_mix=mix, breakdown=False)
            assert str(fast.value) == str(exc)
            continue
        fast = predict(model, deployment, task, load=load, tier_mix=mix, breakdown=False)
        assert _without_turns(fast) == _without_turns(full)
        assert fast.turns == ()
        checked += 1
    assert checked >= 40
    model = MODELS[0]
    too_long = TaskProfile(model.context_window + 1, 10)
    grows = TaskProfile(model.context_window - 5, 10)
    for task, start in ((too_long, "input_tokens"), (grows, "the task's context grows")):
        for breakdown in (True, False):
            with pytest.raises(SimEngineError, match=f"^{start}"):
                predict(model, Deployment("h200", 64), task, breakdown=breakdown)


# A finite run reads the step line at every batch size it goes through, all at once
# (simengine.serving.offline_run): perf.gpu_token_line over an array of batches must
# give, element by element, the line perf._token_line gives at each batch alone.
_LLAMA70 = {"name": "llama-3.1-70b", "layers": 80, "hidden": 8192, "heads": 64,
            "kv_heads": 8, "head_dim": 128, "params_b": 70.6}  # fmt: skip
_DSR1 = {"name": "deepseek-r1", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
         "head_dim": 128, "params_b": 671.0, "active_params_b": 37.0, "experts": 256,
         "experts_per_token": 8, "shared_experts": 1, "kv_bytes_per_token": 70272,
         "dtype": "fp8"}  # fmt: skip
_GPTOSS = {"name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
           "head_dim": 64, "params_b": 117.0, "active_params_b": 5.1, "experts": 128,
           "experts_per_token": 4, "dtype": "mxfp4", "sliding_window": 128,
           "sliding_window_layers": 18}  # fmt: skip
_RUN = {"concurrency": 1, "input_tokens": 1000, "output_tokens": 1000}


# Deployments with each batch-dependent term: the host's floor (x86, Grace), expert
# parallelism with and without attention DP, pipeline micro-batches, speculative decoding
# (drafting), a sliding window.
_DEPLOYMENTS = {
    "dense-tp2-x86-host": {"model": {**_LLAMA70, "dtype": "fp8"}, "hardware": "h100",
                           "devices": 2, "tensor_parallel": 2},
    "moe-dep8": {"model": _DSR1, "hardware": "b200", "devices": 8, "tensor_parallel": 8,
                 "expert_parallel": 8, "attention_data_parallel": True},
    "moe-wide-ep-grace-host": {"model": _DSR1, "hardware": "gb200-nvl72", "devices": 16,
                               "tensor_parallel": 16, "expert_parallel": 16},
    "dense-pipeline": {"model": {**_LLAMA70, "dtype": "bf16"}, "hardware": "h100",
                       "devices": 8, "tensor_parallel": 4, "pipeline_parallel": 2},
    "moe-window-speculative": {"model": _GPTOSS, "hardware": "b200", "devices": 1,
                               "speculative": {"method": "eagle3"}},
    "dense-speculative": {"model": {**_LLAMA70, "dtype": "fp8"}, "hardware": "h200",
                          "devices": 4, "tensor_parallel": 4, "speculative": {"method": "mtp"}},
}  # fmt: skip


@pytest.mark.parametrize("spec", list(_DEPLOYMENTS.values()), ids=list(_DEPLOYMENTS))
@pytest.mark.parametrize("context", [300.0, 5000.0])
def test_the_step_line_over_an_array_of_batches_is_the_line_at_each(spec, context):
    from simengine.spec import parse_spec

    model, deployment, run = parse_spec({**_RUN, **spec})
    # As serving_point serves it: the spec's speculative decoding on the deployment.
    deployment = dataclasses.replace(deployment, speculative=run["speculative"])
    s = perf._serve(model, deployment, DEFAULT_PARAMS, batch=64.0, context=context)
    assert (s.knobs.speculation is not None) == ("speculative" in spec)
    batches = np.array([1.0, 2.0, 3.0, 7.0, 64.0, 129.0, 700.0, 2048.0])
    lines = perf.gpu_token_line(s, batches, context)
    fields = StepLine._fields
    for i, b in enumerate(batches.tolist()):
        one = perf._token_line(s, b, context)
        for name in fields:
            got = np.broadcast_to(getattr(lines, name), batches.shape)[i]
            want = getattr(one, name)
            assert math.isclose(got, want, rel_tol=REL, abs_tol=1e-300), (name, b, got, want)

"""Attention-DP ranks take their own pieces of the prompts (issue 28, thirtieth round;
simengine.kv.prompt_piece, simengine.prefill.carried, simengine.prefill.prefill_parts).

Under attention data parallelism every rank schedules its own steps within its own token
budget (TensorRT-LLM's max_num_tokens, vLLM's max_num_batched_tokens and SGLang's
chunked-prefill size hold per DP rank; TensorRT-LLM tech blog 10 draws a context on its
rank while the others decode). Two consequences, each isolated here:

* the most of a prompt one rank works on in a step is one budget: a step's prompt tokens
  beyond one budget are several pieces on several ranks, not one rank's longer piece
  (before this round the engine put the whole step's prompt tokens on one rank, and an
  unbalanced replica's throughput fell as its concurrency grew, then rose again);
* a prompt's attention and non-expert GEMMs run on the one GPU that holds it, so its own
  time to first token pays them at one GPU's rate (before, they were spread over the
  group, and throughput fell from one stream to two on long prompts).

A property check over a fixed sample of deployments holds the behaviour both broke:
a closed loop's throughput never falls as its concurrency grows.
"""

from __future__ import annotations

import random

import pytest

from simengine import DEFAULT_PARAMS, Deployment, SimEngineError, kv, perf
from simengine.parallel import attention_dp_idle
from simengine.prefill import carried, prefill_parts, prefill_seconds, rank_local_seconds
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_dataparallel import DEEPSEEK

QWEN3_30B = {
    "name": "qwen3-30b-a3b", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4,
    "params_b": 30.5, "active_params_b": 3.3, "experts": 128, "experts_per_token": 8,
}  # fmt: skip
GPT_OSS = {
    "name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
    "head_dim": 64, "params_b": 117.0, "active_params_b": 5.1, "experts": 128,
    "experts_per_token": 4, "dtype": "mxfp4", "attention_dtype": "bf16",
}  # fmt: skip
# Long prompts, short answers: prompts dominate the GPUs' time.
LONG_PROMPTS = {
    "model": QWEN3_30B, "hardware": "h100", "devices": 8, "tensor_parallel": 8,
    "expert_parallel": 8, "attention_data_parallel": True, "input_tokens": 16000,
    "output_tokens": 64,
}  # fmt: skip
LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _throughputs(spec):
    return [predict_spec({**spec, "concurrency": c})["throughput_tokens_per_second"]
            for c in LADDER]  # fmt: skip


def test_a_ranks_piece_is_one_budget_or_the_whole_shorter_prompt():
    assert kv.prompt_piece(16000.0, 2048.0) == 2048.0
    assert kv.prompt_piece(1000.0, 2048.0) == 1000.0
    assert kv.prompt_piece(1000.0, None) == 1000.0  # no chunking: the whole prompt
    assert kv.prompt_piece(0.25, 2048.0) == 1.0  # at least one token
    # The step's chunk is at least one piece, more when more prompt tokens ride a step.
    assert kv.prompt_chunk(0.0, 16000.0, 2048.0) == 2048.0
    assert kv.prompt_chunk(9000.0, 16000.0, 2048.0) == 9000.0


def _served(**deployment):
    m = model_from_spec(DEEPSEEK, tokens=32768)
    d = Deployment("h200", 8, nodes_per_replica=8, expert_parallel=8, **deployment)
    return perf._serve(m, d, DEFAULT_PARAMS, batch=256.0, context=8000.0)


def test_prompt_tokens_beyond_one_budget_are_pieces_on_several_ranks():
    held = _served(attention_data_parallel=True)
    even = _served(attention_data_parallel=True, attention_dp_balance=True)
    budget = held.knobs.chunk_tokens
    prompt = 16000.0
    rate = 4 * budget / prompt  # four budgets of prompt tokens per step
    side = prefill_parts(held, prompt, 0.0)[1]
    wait = carried(held, 256.0, rate, prompt, side) - carried(even, 256.0, rate, prompt, side)
    # Four ranks each take a budget; the step waits for one budget on the busiest rank,
    # which the other four ranks idle through.
    assert attention_dp_idle(4.0, 8) == pytest.approx(4.0)
    assert wait == pytest.approx(4.0 * rank_local_seconds(held, budget), rel=1e-9)
    # Not the old reading: all four budgets on one rank while seven wait.
    assert wait < 7.0 * rank_local_seconds(held, 4 * budget) / 4


def test_unbalanced_replica_throughput_never_falls_as_concurrency_grows():
    held = _throughputs(LONG_PROMPTS)
    assert all(b >= a for a, b in zip(held, held[1:], strict=False)), held
    # At high load every rank prefills every step: the wait vanishes and the unbalanced
    # replica comes within a few per cent of the balanced one.
    even = _throughputs({**LONG_PROMPTS, "attention_dp_balance": True})
    assert held[-1] == pytest.approx(even[-1], rel=0.03)
    assert held[3] < even[3]  # a few prompts at a time: the others wait for them


def test_a_lone_prompt_waits_for_its_own_rank():
    s = _served(attention_data_parallel=True)
    tp = _served()
    new, cached = 4000.0, 1000.0
    # The prompt's rank-local work at one GPU's rate instead of the group's: (8 - 1)
    # times that work at the group's rate more, on a compute-bound prefill, less the
    # all-reduces attention TP pays and attention DP does not (its all-to-alls are
    # cheaper here).
    gap = prefill_seconds(s, new, cached) - prefill_seconds(tp, new, cached)
    local = rank_local_seconds(s, new, cached)
    assert local > rank_local_seconds(s, new, 0.0)  # attention over the cached prefix
    assert 0.85 * 7 * local < gap < 7 * local
    # What a decode step cannot absorb of a riding prompt (its attention and collectives)
    # stays at the group's rate: the other ranks' wait for it is carried's.
    alone, side = prefill_parts(s, new, cached)
    assert side < 7 * local < alone


def test_attention_dp_costs_a_long_prompts_first_token_and_balancing_does_not_hide_it():
    one = {**LONG_PROMPTS, "model": GPT_OSS, "devices": 4, "tensor_parallel": 4,
           "expert_parallel": 4, "output_tokens": 16, "concurrency": 1}  # fmt: skip
    dp = predict_spec(one)
    tp = predict_spec({**one, "attention_data_parallel": False})
    assert dp["ttft_seconds"] > 1.3 * tp["ttft_seconds"]
    assert predict_spec({**one, "attention_dp_balance": True})["ttft_seconds"] == dp["ttft_seconds"]
    ladder = _throughputs({k: v for k, v in one.items() if k != "concurrency"})
    assert all(b >= a for a, b in zip(ladder, ladder[1:], strict=False)), ladder


MODELS = {
    "llama-8b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "params_b": 8.0},
    "llama-70b": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "params_b": 70.6},
    "qwen3-30b": QWEN3_30B,
    "gpt-oss": GPT_OSS,
    "deepseek": DEEPSEEK,
}


def _sample(n: int, seed: int):
    rnd = random.Random(seed)
    for _ in range(n):
        name = rnd.choice(sorted(MODELS))
        tp = rnd.choice([1, 2, 4, 8])
        spec = {
            "model": {**MODELS[name], "name": name},
            "hardware": rnd.choice(["h100", "h200", "b200", "gb200-nvl72"]),
            "devices": tp, "tensor_parallel": tp,
            "input_tokens": rnd.choice([128, 1000, 4000, 16000]),
            "output_tokens": rnd.choice([16, 64, 500, 2000]),
        }  # fmt: skip
        if "experts" in MODELS[name] and tp > 1 and rnd.random() < 0.6:
            spec["expert_parallel"] = tp
            spec["attention_data_parallel"] = rnd.random() < 0.6
        if rnd.random() < 0.2:
            spec["output_tokens_cv"] = 0.8
        if rnd.random() < 0.2:
            spec["cached_input_tokens"] = spec["input_tokens"] // 2
        yield spec


@pytest.mark.parametrize("seed", [1, 2])
def test_closed_loop_throughput_never_falls_as_concurrency_grows(seed):
    # No server named: every batch runs its own CUDA graph (a named server's largest
    # captured graph is a real cliff, test_simengine_graph_sizes.py).
    checked = 0
    for spec in _sample(40, seed):
        try:
            ladder = _throughputs(spec)
        except SimEngineError:  # a deployment the model does not fit: not this check's
            continue
        checked += 1
        steps = zip(LADDER, ladder, LADDER[1:], ladder[1:], strict=False)
        for c0, a, c1, b in steps:
            assert b >= a * 0.98, (spec, c0, a, c1, b)
    assert checked >= 25

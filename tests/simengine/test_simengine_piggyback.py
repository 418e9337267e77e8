"""Chunked prefill piggybacks on the decode steps (simengine.prefill.carried; issue 28,
tenth round).

Each piece isolated, against the roofline terms the engine already has
(the deployment's ``moe.GemmLine``, ``prefill_parts``):

* the deployment's GEMM line is the weights the step's tokens touch or their FLOPs;
* a memory-bound decode step does a small prompt chunk's GEMM FLOPs in the time it
  spends reading the weights: the other streams' prompts then cost only their attention
  and collectives, well under the prompt's prefill on its own;
* a compute-bound step has no such slack: the prompts cost their whole prefill, the
  engine's former additive rule;
* a mixture of experts' chunk also reads the experts the batch had not touched;
* prompts too few to fill every step ride whole (or in the chunk budget) on some steps
  only: each carrying step is the larger GEMM;
* a pipeline's stages each carry their share of the prompts on a micro-batch's step;
* the finite run's flat per-prompt cost is the same rule at a fixed cost, and its
  per-interval form (``offline.simulate(carry_many=...)``) equals the flat one there.
"""

from __future__ import annotations

import numpy as np
import pytest

from simengine import DEFAULT_PARAMS, Deployment, offline, perf
from simengine.kv import prompt_chunk
from simengine.moe import (
    expert_padding_rows,
    gemm_line,
    imbalance_flops,
    padding_flops_per_row,
    step_active_params,
    step_weight_bytes,
)
from simengine.prefill import carried, interference, prefill_parts
from simengine.spec import model_from_spec

from .test_simengine_host import SMALL_MOE
from .test_simengine_kv import LLAMA_8B, LLAMA_70B_BF16


def _served(model: dict, device: str, devices: int, batch: float, **deployment):
    m = model_from_spec(model, tokens=4096)
    d = Deployment(device, devices, nodes_per_replica=devices, **deployment)
    return perf._serve(m, d, DEFAULT_PARAMS, batch=batch, context=1000.0)


def _gemm(s, tokens):
    # The replica's weight GEMMs for a step of ``tokens`` tokens, as the decode line has them.
    return s.knobs.gemm.at(tokens)


def _weights_only(s, tokens):
    return s.knobs.gemm._replace(per_token=0.0).at(tokens)


def test_the_gemm_line_is_the_weights_touched_or_the_flops():
    # GemmLine (built once per deployment) against the byte and FLOP counts it stands for:
    # step_weight_bytes (every expert the tokens touch, at the expert-parallel share) and
    # 2 x the active parameters a token multiplies, for a dense model and an MoE split
    # over more GPUs than its tensor-parallel group, one step or an array of them; under
    # expert parallelism the FLOPs are the busiest rank's (its excess routed tokens:
    # simengine.moe.imbalance_flops, issue 28's fourteenth round), and an MoE's FLOPs
    # include the rows its experts' GEMM tiles pad (simengine.moe.expert_padding_rows,
    # issue 28's twenty-ninth round; 0 for the dense model).
    for model, tp, ep in ((LLAMA_8B, 1, 1), (SMALL_MOE, 2, 4)):
        m = model_from_spec(model, tokens=4096)
        line = gemm_line(m, tp, ep, 1e9, 2e12, 1e15)
        tokens = np.array([1.0, 7.0, 64.0, 300.0, 5000.0])
        read = (step_weight_bytes(m, tokens, tp, ep) + 1e9) / 2e12
        padded = 0.0
        if m.is_moe:
            padded = padding_flops_per_row(m, tp, ep) * expert_padding_rows(
                tokens, *m.expert_layout
            )
        flops = (
            2 * step_active_params(m, tp, ep) * tokens + imbalance_flops(m, tokens, tp, ep) + padded
        ) / 1e15
        assert (ep > 1) == bool(np.all(imbalance_flops(m, tokens, tp, ep) > 0))
        assert np.allclose(line.at(tokens), np.maximum(read, flops), rtol=1e-12, atol=0)
        one = (step_weight_bytes(m, 64.0, tp, ep) + 1e9) / 2e12
        assert line.at(64.0) == pytest.approx(max(one, flops[2]), rel=1e-12)
    # An MoE's read grows with the tokens until every expert is touched; a dense one's not.
    moe = gemm_line(model_from_spec(SMALL_MOE, tokens=4096), 1, 1, 0.0, 1e12, 1e30)
    dense = gemm_line(model_from_spec(LLAMA_8B, tokens=4096), 1, 1, 0.0, 1e12, 1e30)
    assert moe.at(1.0) < moe.at(10.0) < moe.at(1000.0)
    assert dense.at(1.0) == dense.at(1000.0)


def test_a_memory_bound_step_hides_a_small_chunks_gemms_under_its_weight_read():
    # Llama 70B in BF16 on two H100s at 16 streams: the step reads 141 GB of weights while
    # its 16 tokens' FLOPs take a fraction of that; 15 others' 100-token prompts every 100
    # tokens are 15 prompt tokens a step, taken whole (100 tokens) on 15 % of the steps.
    s = _served(LLAMA_70B_BF16, "h100", 2, 16.0)
    assert _gemm(s, 16.0 + 100.0) == pytest.approx(_weights_only(s, 16.0), rel=1e-12)
    prefill, side = prefill_parts(s, 100, 0)
    rate = 15 / 100
    extra = interference(s, 16.0, side, 100, 100)
    assert extra == pytest.approx(rate * side, rel=1e-12)  # only attention and collectives
    assert extra < 0.5 * rate * prefill  # the former additive rule charged the whole prefill
    assert side < prefill


def test_a_compute_bound_step_pays_the_whole_prefill():
    # Llama 8B FP8 on one H100 at 2,048 streams: the step's FLOPs outlast its weight read,
    # and so do a 1,000-token prompt's: piggybacking hides nothing, the prompts cost their
    # prefill as before (t_flop + collectives; the same active parameters for a dense model).
    s = _served(LLAMA_8B, "h100", 1, 2048.0)
    assert _gemm(s, 2048.0) > 2 * _weights_only(s, 2048.0)
    prefill, side = prefill_parts(s, 1000, 0)
    extra = interference(s, 2048.0, side, 1000, 1000)
    assert extra == pytest.approx(2047 / 1000 * prefill, rel=1e-9)


def test_prompts_too_few_for_every_step_ride_whole_on_some_steps():
    # One prompt every ten steps: the steps that carry it take it whole (a 500-token chunk),
    # a tenth of them; each costs gemm(b + 500) - gemm(b).
    s = _served(LLAMA_8B, "h100", 1, 64.0)
    assert prompt_chunk(50.0, 500.0, 2048.0) == 500.0
    assert prompt_chunk(5000.0, 8000.0, 2048.0) == 5000.0  # more than the budget: every step
    assert prompt_chunk(50.0, 8000.0, 2048.0) == 2048.0  # a long prompt: budget-sized chunks
    side = prefill_parts(s, 500, 0)[1]
    cost = carried(s, 64.0, 0.1, 500.0, side)
    grow = _gemm(s, 64.0 + 500.0) - _gemm(s, 64.0)
    assert grow > 0
    assert cost == pytest.approx(0.1 * grow + 0.1 * side, rel=1e-12)


def test_an_moe_chunk_reads_the_experts_the_batch_left_untouched():
    # A 30B / 3B mixture of experts at 4 streams touches few of its 128 experts; a prompt
    # chunk touches the rest, so the carrying step reads more weights even though its FLOPs
    # are far below the read: the chunk costs more than its attention and collectives.
    s = _served(SMALL_MOE, "b200", 1, 4.0)
    assert _weights_only(s, 4.0) < 0.5 * _weights_only(s, 4.0 + 1000.0)
    side = prefill_parts(s, 1000, 0)[1]
    extra = interference(s, 4.0, side, 1000, 100)
    assert extra > 3 / 100 * side * 1.5
    assert extra == pytest.approx(
        3 / 100 * (_gemm(s, 1004.0) - _gemm(s, 4.0)) + 3 / 100 * side, rel=1e-12
    )


def test_a_pipeline_stage_carries_its_share_on_a_micro_batch_step():
    # Two stages of one H100 each: each stage carries half of every prompt's tokens and of
    # its attention and collectives, on the step of a micro-batch of half the streams.
    s = _served(LLAMA_70B_BF16, "h100", 4, 64.0, pipeline_parallel=2)
    assert s.place.pipeline_stages == 2
    side = prefill_parts(s, 2000, 0)[1]
    rate = 63 / 200
    prompt = rate * 2000 / 2  # prompt tokens per micro-batch step
    chunk = prompt_chunk(prompt, 2000, s.knobs.chunk_tokens)
    want = prompt / chunk * (_gemm(s, 32.0 + chunk) - _gemm(s, 32.0)) + rate * side / 2
    assert interference(s, 64.0, side, 2000, 200) == pytest.approx(want, rel=1e-12)


def test_the_finite_runs_per_interval_carry_equals_a_flat_cost_when_it_is_one():
    outputs = np.array([30.0, 50.0, 70.0, 90.0, 110.0, 40.0, 60.0, 80.0])

    def step(batch, context):
        return 0.01 + 0.001 * batch

    flat = offline.simulate(step, outputs, 100, 3, prefill_busy=0.05)
    per = offline.simulate(step, outputs, 100, 3,
                           carry_many=lambda active, prompts, steps: 0.05 * prompts)  # fmt: skip
    assert per == flat
    # A cost that falls with the interval's steps (a longer interval hides more) makes
    # the run shorter than the flat one, and never shorter than its decode steps alone.
    hidden = offline.simulate(
        step, outputs, 100, 3,
        carry_many=lambda active, prompts, steps: np.maximum(0.0, 0.05 * prompts - 0.001 * steps),
    )  # fmt: skip
    bare = offline.simulate(step, outputs, 100, 3)
    assert bare.seconds < hidden.seconds < flat.seconds


def former_rule(model: dict, hardware: str, devices: int, got: dict, inp: int, out: int):
    """(the other prompts' cost per token now, under the former additive rule - their whole
    prefill, (B - 1) x prefill / output - and the time per output token that rule gives)
    for a prediction ``got`` of ``devices`` x ``hardware``, from the engine's own parts."""
    b = got["batch"]
    s = _served(model, hardware, devices, b)
    prefill, side = prefill_parts(s, inp, 0)
    now = interference(s, b, side, inp, out)
    former = (b - 1) * prefill / out
    return now, former, got["time_per_output_token_seconds"] - now + former


def test_piggybacking_raises_a_memory_bound_replicas_throughput():
    # The same 70B BF16 deployment at 16 streams and 2,000-token prompts: the engine's
    # throughput against the former additive rule (prefill x (B - 1) / output added to
    # every token), recomputed here from the same parts.
    from simengine.spec import predict_spec

    spec = {"model": LLAMA_70B_BF16, "hardware": "h100", "devices": 2, "concurrency": 16,
            "input_tokens": 2000, "output_tokens": 200}  # fmt: skip
    got = predict_spec(spec)
    b = got["batch"]  # what the KV cache holds beside 141 GB of weights
    assert 1 < b < 16
    extra, _, additive = former_rule(LLAMA_70B_BF16, "h100", 2, got, 2000, 200)
    side = prefill_parts(_served(LLAMA_70B_BF16, "h100", 2, b), 2000, 0)[1]
    assert got["time_per_output_token_seconds"] < additive
    assert extra >= (b - 1) / 200 * side

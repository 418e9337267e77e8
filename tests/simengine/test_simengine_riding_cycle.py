"""The other streams' prompts ride every step of a stream's cycle (issue 28, thirty-first
round; simengine.prefill.interference, simengine.serving, simengine.perf).

Under chunked prefill every step of a running request's cycle can carry the other
streams' prompt chunks: the steps carrying its own prompt's chunks (the last of them
yields its first token) as much as its decode steps. Over one cycle of chunks + output
- 1 steps each of the B - 1 other streams starts one prompt, so the engine spreads those
B - 1 prompts over all of them:

* each prompt is counted once a cycle. Before this round a closed loop spread them over
  the output's decode steps only, at (B - 1) / output a step, so a request's cycle
  carried (B - 1)(output - 1) / output prompts: none at one output token, where 64
  streams of 4,000-token prompts on one H100 gave 3.0 M prompt tokens/s, fifty times
  what the GPU prefills;
* a prompt's chunk steps are as long as its decode steps. Before, a loaded prompt's TTFT
  counted its chunk steps without the riding prompts (predict --spec) or with one step's
  worth of them (the router's path), so the two paths disagreed on a long prompt's TTFT.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from simengine import DEFAULT_PARAMS, Deployment, perf
from simengine.perf import TaskProfile
from simengine.prefill import interference, prefill_parts, prefill_seconds
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_adp_pieces import GPT_OSS
from .test_simengine_adp_pieces import QWEN3_30B as QWEN3_30B_BF16
from .test_simengine_kv import LLAMA_8B, LLAMA_70B_BF16

# Llama 3.3 70B in FP8; Qwen3-30B-A3B in FP8 (one H100 holds it with room for 16
# streams of 16,000 tokens).
LLAMA_70B = {**LLAMA_70B_BF16, "dtype": "fp8"}
QWEN3_30B = {**QWEN3_30B_BF16, "dtype": "fp8"}
ONE_H100 = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "tensor_parallel": 1}


def _prompt_rate(spec: dict) -> float:
    # Prompt tokens a second the prediction serves (output tokens/s x input / output).
    got = predict_spec(spec)
    return got["throughput_tokens_per_second"] * spec["input_tokens"] / spec["output_tokens"]


def test_a_closed_loop_of_one_token_answers_is_bound_by_the_prompts_it_prefills():
    # 4,000-token prompts, one output token each: every request is its prompt. However many
    # streams share the GPU, it cannot take in prompt tokens faster than it prefills them.
    spec = {**ONE_H100, "input_tokens": 4000, "output_tokens": 1}
    model = model_from_spec(LLAMA_8B)
    s = perf._serve(model, Deployment("h100", 1, nodes_per_replica=1), DEFAULT_PARAMS)
    ceiling = 4000 / prefill_seconds(s, 4000, 0)
    one = _prompt_rate({**spec, "concurrency": 1})
    rates = [_prompt_rate({**spec, "concurrency": c}) for c in (4, 16, 64)]
    assert one < ceiling
    for r in rates:
        assert r <= 1.05 * ceiling, (r, ceiling)  # was 3.0 M tok/s at 64 streams
    assert rates == sorted(rates)  # more streams never serve less
    # The finite run of the same requests (every prompt queued at once) agrees.
    offline = _prompt_rate({**spec, "offline_requests": 2000, "concurrency": 64})
    assert rates[-1] == pytest.approx(offline, rel=0.05)


def test_the_prompts_queue_for_a_prefill_bound_gpu():
    # The same prefill-bound load: a prompt's first token waits for the prompts the others
    # start, so TTFT grows with the streams (the GPU serves them one cycle at a time).
    spec = {**ONE_H100, "input_tokens": 4000, "output_tokens": 1}
    ttft = [predict_spec({**spec, "concurrency": c})["ttft_seconds"] for c in (1, 4, 16, 64)]
    assert ttft == sorted(ttft)
    assert ttft[-1] > 20 * ttft[0]


@pytest.mark.parametrize("model", [LLAMA_8B, LLAMA_70B, QWEN3_30B])
def test_a_prompts_chunk_steps_are_as_long_as_its_decode_steps(model):
    # A 16,000-token prompt rides eight steps of a 2,048-token budget; under load each of
    # them also carries the other streams' riding prompts, as a decode step does.
    devices = 1 if model is not LLAMA_70B else 2
    spec = {"model": model, "hardware": "h100", "devices": devices,
            "tensor_parallel": devices, "input_tokens": 16000, "output_tokens": 64,
            "concurrency": 16}  # fmt: skip
    got = predict_spec(spec)
    assert got["queue_seconds"] == 0.0 and got["batch"] > 1
    s = perf._serve(
        model_from_spec(model), Deployment("h100", devices, nodes_per_replica=devices),
        DEFAULT_PARAMS,
    )  # fmt: skip
    chunks = perf._chunks(s, 16000)
    assert chunks == 8
    prefill = prefill_seconds(s, 16000, 0)
    tpot = got["time_per_output_token_seconds"]
    assert got["ttft_seconds"] - prefill == pytest.approx(chunks * tpot, rel=1e-9)


def test_the_riding_prompts_spread_over_the_whole_cycle():
    # B - 1 prompts a cycle of chunks + output - 1 steps: at one output token the cycle is
    # the prompt's own chunk steps, and they carry every other prompt.
    s = perf._serve(
        model_from_spec(LLAMA_8B), Deployment("h100", 1, nodes_per_replica=1), DEFAULT_PARAMS
    )
    side = prefill_parts(s, 4000, 0)[1]
    per_step = [interference(s, 16.0, side, 4000, steps) for steps in (2, 9, 65)]
    assert per_step == sorted(per_step, reverse=True)
    # Spread over more steps, a step carries less; the cycle carries about as much.
    cycles = [x * n for x, n in zip(per_step, (2, 9, 65), strict=True)]
    assert max(cycles) / min(cycles) < 1.3


@pytest.mark.parametrize(
    ("model", "devices", "inp", "out", "batch"),
    [
        (LLAMA_8B, 1, 16000, 64, 16.0),
        (LLAMA_8B, 1, 1000, 200, 64.0),
        (LLAMA_70B, 2, 9000, 2, 8.0),
        (QWEN3_30B, 1, 6000, 500, 32.0),
    ],
)
def test_the_routers_path_and_predict_spec_agree_on_a_loaded_prompts_first_token(
    model, devices, inp, out, batch
):
    # Both paths take the same prefill and the same chunk steps, each carrying the other
    # streams' riding prompts, and the same decode steps after. The router's first
    # steps are timed at the prompt's own context, predict --spec's at the stream's mean
    # context: they differ by the attention over half the output (0.1 % at most here),
    # so the comparison sits at the same batch and a 0.5 % tolerance. The whole
    # request's time (first token and decode) agrees as well.
    m = model_from_spec(model)
    d = Deployment("h100", devices, nodes_per_replica=devices)
    # The tier's batch cap at the batch asked for (as predict --spec sets it).
    s = perf._serve(m, d, DEFAULT_PARAMS.with_values({f"tier:{d.tier}:batch": batch}))
    prof = perf._service_profile(s, TaskProfile(inp, out), batch, False)
    _, overhead, per_token = s.transport_costs
    router = prof.first_ttft - overhead - per_token
    request = prof.generation - overhead - per_token * out
    spec = {"model": model, "hardware": "h100", "devices": devices,
            "tensor_parallel": devices, "input_tokens": inp, "output_tokens": out,
            "concurrency": int(batch), "max_batch_size": int(batch)}  # fmt: skip
    got = predict_spec(spec)
    assert got["batch"] == batch and prof.batch == batch
    assert router == pytest.approx(got["ttft_seconds"], rel=0.005)
    held = got["ttft_seconds"] + (out - 1) * got["time_per_output_token_seconds"]
    assert request == pytest.approx(held, rel=0.005)


def test_a_closed_loops_throughput_never_falls_and_its_prompts_fit_the_gpu():
    # A fixed sample of deployments and request shapes, short answers included: as the
    # streams grow, the throughput never falls, and the prompt tokens served never pass
    # what the finite run of the same requests (every prompt queued at once) serves.
    rng = random.Random(31)
    models = [(LLAMA_8B, ("h100", "b200"), 1), (LLAMA_70B, ("h100", "h200"), 2),
              (QWEN3_30B, ("h100", "b200"), 1)]  # fmt: skip
    checked = 0
    for _ in range(12):
        model, hardware, devices = rng.choice(models)
        spec = {"model": model, "hardware": rng.choice(hardware), "devices": devices,
                "tensor_parallel": devices, "input_tokens": rng.choice((500, 3000, 12000)),
                "output_tokens": rng.choice((1, 4, 32, 300))}  # fmt: skip
        rates = [_prompt_rate({**spec, "concurrency": c}) for c in (1, 2, 8, 32, 128)]
        for a, b in zip(rates, rates[1:], strict=False):
            assert b >= a * (1 - 1e-9), (spec, rates)
        offline = _prompt_rate({**spec, "offline_requests": 3000, "concurrency": 128})
        assert rates[-1] <= 1.1 * offline, (spec, rates[-1], offline)
        checked += 1
    assert checked == 12


def _unchunked(s):
    return dataclasses.replace(s, knobs=dataclasses.replace(s.knobs, chunk_tokens=None))


def test_a_lone_prompt_runs_in_budget_sized_pieces():
    # A chunked-prefill server prefills even a lone 16,000-token prompt in 2,048-token
    # pieces, one a step: each pads its own experts' tiles and reads the experts it
    # touches. An MoE pays for it (gpt-oss-120b's 128 experts: 64 rows each a piece, not
    # 500); a dense model's compute-bound prefill barely moves.
    moe = perf._serve(model_from_spec(GPT_OSS), Deployment("h100", 2, nodes_per_replica=2),
                      DEFAULT_PARAMS)  # fmt: skip
    dense = perf._serve(
        model_from_spec(LLAMA_8B), Deployment("h100", 1, nodes_per_replica=1), DEFAULT_PARAMS
    )
    assert perf._chunks(moe, 16000) == 8
    assert prefill_seconds(moe, 16000, 0) > 1.15 * prefill_seconds(_unchunked(moe), 16000, 0)
    assert prefill_seconds(dense, 16000, 0) == pytest.approx(
        prefill_seconds(_unchunked(dense), 16000, 0), rel=0.01
    )
    # A prompt within one budget is one piece, as before.
    assert prefill_seconds(moe, 2000, 0) == prefill_seconds(_unchunked(moe), 2000, 0)


@pytest.mark.parametrize("model", [LLAMA_8B, QWEN3_30B, GPT_OSS])
def test_a_riding_prompt_never_costs_more_than_it_does_alone(model):
    # Riding a decode step, a prompt's pieces share the step's weight read, so the cycle
    # pays at most what the same prompt takes alone; before the pieces above, a long MoE
    # prompt cost 24 % more riding than alone, and two streams served less than one.
    devices = 2 if model is GPT_OSS else 1
    s = perf._serve(model_from_spec(model),
                    Deployment("h100", devices, nodes_per_replica=devices), DEFAULT_PARAMS)  # fmt: skip
    for tokens in (500, 4000, 16000):
        alone, side = prefill_parts(s, tokens, 0)
        steps = perf._chunks(s, tokens) + 15
        for batch in (2.0, 8.0, 64.0):
            per_prompt = interference(s, batch, side, tokens, steps) * steps / (batch - 1)
            assert per_prompt <= alone * (1 + 1e-9), (tokens, batch, per_prompt, alone)


@pytest.mark.parametrize(
    ("model", "devices", "inp", "out"),
    [(LLAMA_8B, 1, 4000, 1), (LLAMA_8B, 1, 16000, 64), (GPT_OSS, 2, 4000, 16),
     (GPT_OSS, 2, 16000, 64), (QWEN3_30B, 1, 4000, 1)],
)  # fmt: skip
def test_an_open_loops_capacity_is_what_the_full_closed_loop_serves(model, devices, inp, out):
    # Both load models serve the same requests on the same slots: an open loop's capacity
    # (every slot busy, or the GPU busy with the prompts) is the closed loop's throughput
    # with every slot filled. A prompt riding a full batch of an MoE's decode steps shares
    # their experts' read, so it holds the GPU for less than alone: before, the open
    # loop's capacity took the lone prompt's time (gpt-oss-120b, 4,000 in / 16 out: 10
    # requests/s against the closed loop's 13.6).
    spec = {"model": model, "hardware": "h100", "devices": devices,
            "tensor_parallel": devices, "input_tokens": inp, "output_tokens": out}  # fmt: skip
    closed = predict_spec({**spec, "concurrency": 4096})
    opened = predict_spec({**spec, "rate_per_second": 0.01})
    served = opened["capacity_requests_per_second"] * out
    assert served == pytest.approx(closed["throughput_tokens_per_second"], rel=0.02)

"""The prompt tokens a server schedules in one step (issue 28, thirty-second round).

A chunked-prefill server takes at most a budget of prompt tokens a step (vLLM's
``--max-num-batched-tokens``, SGLang's ``--chunked-prefill-size``, TensorRT-LLM's
``max_num_tokens``); a longer prompt is prefilled in pieces of it. The engine had one
budget for every server (2,048, param ``gpu:prefill_chunk_tokens``). A spec now states
it (``prefill_chunk_tokens``) or takes the named server's default at the software date on
the GPU (:func:`simengine.host.server_prefill_budget`, sources in :mod:`simengine.host`).
"""

from __future__ import annotations

import pytest

from simengine import perf
from simengine.errors import SimEngineError
from simengine.hardware import HARDWARE
from simengine.host import server_prefill_budget
from simengine.params import DEFAULT_PARAMS
from simengine.prefill import prefill_seconds
from simengine.served import Deployment
from simengine.spec import model_from_spec, parse_spec, predict_spec

from .test_simengine_adp_pieces import GPT_OSS
from .test_simengine_kv import LLAMA_8B


def _budget(server, software, device, dp_ranks=1):
    return server_prefill_budget(server, software, device, HARDWARE[device].memory_bytes, dp_ranks)


@pytest.mark.parametrize(
    ("software", "device", "expected"),
    [
        ("2024-06", "h100", None),  # before PR #10544: not modelled
        ("2024-12", "h100", 2048),  # PR #10544
        ("2025-02", "h100", 8192),  # PR #12369: H100 and H200 by name
        ("2025-02", "h200", 8192),
        ("2025-02", "b200", 2048),  # not named by #12369
        ("2025-05", "b200", 8192),  # PR #17073: by memory
        ("2026-03-11", "b200", 8192),
        ("2026-09", "h100", 16384),  # PR #51726
        (None, "gb200-nvl72", 16384),  # no date: today's server
    ],
)
def test_vllm_budget_by_date_and_gpu(software, device, expected):
    assert _budget("vllm", software, device) == expected


def test_sglang_budget_by_memory_date_and_dp_attention():
    assert _budget("sglang", "2024-06", "h200") is None  # before PR #1022: not modelled
    assert _budget("sglang", "2025-03", "h200") == 8192
    assert _budget("sglang", "2025-03", "b200") == 8192  # before PR #6718
    assert _budget("sglang", "2025-06", "b200") == 16384  # 160 GiB and above
    assert _budget("sglang", "2025-06", "h200") == 8192
    # DP attention: each rank schedules chunked_prefill_size // dp_size.
    assert _budget("sglang", "2025-06", "b200", dp_ranks=8) == 2048


def test_tensorrt_llm_and_no_server():
    assert _budget("tensorrt-llm", "2025-03", "h200") == 8192
    assert _budget("tensorrt-llm", None, "b200", dp_ranks=4) == 8192  # per rank
    assert _budget(None, "2026-01", "h100") is None


BASE = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "input_tokens": 1000,
        "output_tokens": 100, "software": "2026-03"}  # fmt: skip


def test_spec_states_it_or_takes_the_servers_default():
    assert predict_spec(BASE)["prefill_chunk_tokens"] == 2048  # the generic budget
    assert predict_spec({**BASE, "server": "vllm"})["prefill_chunk_tokens"] == 8192
    assert predict_spec({**BASE, "server": "tensorrt-llm"})["prefill_chunk_tokens"] == 8192
    stated = {**BASE, "server": "vllm", "prefill_chunk_tokens": 1536}
    assert predict_spec(stated)["prefill_chunk_tokens"] == 1536
    _, deployment, _ = parse_spec(stated)
    assert deployment.prefill_chunk_tokens == 1536
    wafer = {"model": LLAMA_8B, "hardware": "cs-3", "input_tokens": 1000, "output_tokens": 100}
    assert predict_spec(wafer)["prefill_chunk_tokens"] is None


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "8192"])
def test_a_bad_budget_is_a_clear_error(bad):
    with pytest.raises(SimEngineError, match="prefill_chunk_tokens"):
        parse_spec({**BASE, "prefill_chunk_tokens": bad})


def test_a_wafer_has_no_budget():
    wafer = {"model": LLAMA_8B, "hardware": "cs-3", "input_tokens": 1000, "output_tokens": 100}
    with pytest.raises(SimEngineError, match="GPUs only"):
        parse_spec({**wafer, "prefill_chunk_tokens": 4096})
    with pytest.raises(SimEngineError, match="GPUs only"):
        Deployment("wse-3", 1, prefill_chunk_tokens=4096)


def _served(model, budget, devices=2):
    deployment = Deployment("h100", devices, nodes_per_replica=devices,
                            prefill_chunk_tokens=budget)  # fmt: skip
    return perf._serve(model_from_spec(model), deployment, DEFAULT_PARAMS)


def test_a_long_moe_prompt_is_cheaper_in_fewer_pieces():
    # gpt-oss-120b on 2x H100, one 16,000-token prompt: each piece pads its experts'
    # tiles and reads the experts it touches, so 2 pieces of 8,192 cost less than 8 of
    # 2,048; a prompt within both budgets costs the same under either.
    small, large = _served(GPT_OSS, 2048), _served(GPT_OSS, 8192)
    assert perf._chunks(small, 16000) == 8
    assert perf._chunks(large, 16000) == 2
    assert prefill_seconds(large, 16000, 0) < 0.95 * prefill_seconds(small, 16000, 0)
    assert prefill_seconds(large, 2000, 0) == prefill_seconds(small, 2000, 0)
    # The stated budget is the one the engine runs, not the generic parameter.
    assert small.knobs.chunk_tokens == 2048 and large.knobs.chunk_tokens == 8192
    assert _served(GPT_OSS, None).knobs.chunk_tokens == DEFAULT_PARAMS.get(
        "gpu:prefill_chunk_tokens"
    )


def test_a_loaded_long_prompt_waits_fewer_chunk_steps_with_a_larger_budget():
    # Under load a prompt's first token waits one decode step per piece (its chunks
    # ride the other streams' steps): 16,000 tokens take 8 such steps at 2,048 and 2 at
    # 8,192, so its TTFT falls with the budget while the whole request's work is alike.
    spec = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 16,
            "input_tokens": 16000, "output_tokens": 64}  # fmt: skip
    small = predict_spec({**spec, "prefill_chunk_tokens": 2048})
    large = predict_spec({**spec, "prefill_chunk_tokens": 8192})
    assert large["ttft_seconds"] < small["ttft_seconds"]
    assert large["throughput_tokens_per_second"] == pytest.approx(
        small["throughput_tokens_per_second"], rel=0.1
    )

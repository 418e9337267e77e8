"""Expert load imbalance under expert parallelism (issue 28, fourteenth round).

The term isolated: routers send more tokens to a layer's hot experts, so under expert
parallelism the GPU holding them does more of the routed-expert GEMM FLOPs (and carries
more of the all-to-all) than the mean, and every MoE layer waits for it
(``simengine.moe.rank_load_factor``). The law's one constant comes from TensorRT-LLM's
measurement on DeepSeek-R1 (tech blog 4, Table 1): it gives the measured busiest rank
at that setting and, unfitted, the measured busiest expert; a balancer (EPLB) leaves
the measured residual. In a step it adds FLOPs only: a memory-bound step is unchanged,
a compute-bound one grows by the routed share times the excess, and tensor-parallel
experts (every GPU a slice of every expert) are never imbalanced.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from simengine import Deployment
from simengine.errors import SimEngineError
from simengine.hardware import HARDWARE
from simengine.moe import (
    EXPERT_LOAD_CV,
    WIDE_EP,
    expert_padding_rows,
    gemm_line,
    imbalance_flops,
    moe_collectives_seconds,
    rank_load_factor,
    routed_flops_per_token,
)
from simengine.spec import model_from_spec, predict_spec

from .test_simengine_dataparallel import DEEPSEEK  # DeepSeek-V3/R1's shape, FP8, MLA

# TensorRT-LLM tech blog 4, Table 1 (DeepSeek-R1, EP32, 8 experts a rank, 1,024 routed
# tokens a rank on average: 4,096 tokens of 8 routed experts of 256).
BLOG_TOKENS, BLOG_EXPERTS, BLOG_K = 4096.0, 256, 8


def test_the_law_gives_the_measured_busiest_rank_and_predicts_the_busiest_expert():
    rank = rank_load_factor(BLOG_TOKENS, BLOG_EXPERTS, BLOG_K, 32) - 1.0
    assert rank == pytest.approx(1.564, rel=0.01)  # the figure EXPERT_LOAD_CV comes from
    # One expert a "rank": the busiest of 256 experts, not used to set the constant.
    expert = rank_load_factor(BLOG_TOKENS, BLOG_EXPERTS, BLOG_K, 256) - 1.0
    assert expert == pytest.approx(10.948, rel=0.06)
    # With the balancer: the table's 0.109 (EP32, 9 slots a rank) and 0.115 (EP36).
    for ranks in (32, 36):
        balanced = rank_load_factor(BLOG_TOKENS, BLOG_EXPERTS, BLOG_K, ranks, True) - 1.0
        assert 0.08 < balanced < 0.15


def test_the_factor_grows_with_ranks_falls_with_tokens_and_stays_in_range():
    assert rank_load_factor(1000.0, 256, 8, 1) == 1.0
    by_ranks = [rank_load_factor(2048.0, 256, 8, p) for p in (2, 4, 8, 16, 32, 64)]
    assert all(a < b for a, b in zip(by_ranks, by_ranks[1:], strict=False))
    # Fewer tokens: more Poisson noise on top of the popularity skew; many tokens: the
    # skew alone (cv^2 / (E/P) under the law).
    by_tokens = [rank_load_factor(float(t), 256, 8, 8) for t in (16, 64, 256, 1024, 8192)]
    assert all(a > b for a, b in zip(by_tokens, by_tokens[1:], strict=False))
    skew_only = rank_load_factor(1e12, 256, 8, 8)
    assert by_tokens[-1] == pytest.approx(skew_only, rel=0.01)
    # Without popularity skew the busiest rank tends to the mean as the tokens grow.
    assert rank_load_factor(1e9, 256, 8, 8, cv=0.0) == pytest.approx(1.0, abs=1e-3)
    # A balancer always helps; more experts a rank spread the skew.
    assert rank_load_factor(2048.0, 256, 8, 16, True) < rank_load_factor(2048.0, 256, 8, 16)
    assert rank_load_factor(2048.0, 256, 8, 8) < rank_load_factor(2048.0, 64, 8, 8)
    # Never under 1 nor over the ranks (all tokens on one GPU), arrays as numbers.
    tokens = np.array([1.0, 3.0, 64.0, 4096.0])
    arr = rank_load_factor(tokens, 256, 8, 32)
    assert np.all(arr >= 1.0) and np.all(arr <= 32.0)
    assert arr.tolist() == pytest.approx([rank_load_factor(float(t), 256, 8, 32) for t in tokens])
    assert EXPERT_LOAD_CV > 1.0  # hot experts: popularity spread wider than its mean


def test_a_step_waits_for_the_busiest_rank_only_where_flops_bind():
    model = model_from_spec(DEEPSEEK)
    mem_rate, flop_rate = 8 * 4.8e12, 8 * 1.0e15
    tp_line = gemm_line(model, 8, 1, 0.0, mem_rate, flop_rate)
    ep_line = gemm_line(model, 8, 8, 0.0, mem_rate, flop_rate)
    even = ep_line._replace(routed=0.0)
    assert tp_line.routed == 0.0 and ep_line.routed > 0.0  # TP slices every expert evenly
    # Batch 1: the step reads weights; the busiest rank's extra FLOPs hide under it.
    assert ep_line.at(1.0) == even.at(1.0)
    # A compute-bound step grows by the routed FLOPs' excess, exactly. (Its FLOPs also
    # count the rows the experts' GEMM tiles pad, the same with or without the excess:
    # simengine.moe.expert_padding_rows, issue 28's twenty-ninth round.)
    tokens = 65536.0
    padded = even.pad_row * expert_padding_rows(tokens, 256, 8)
    assert padded > 0.0
    assert even.at(tokens) == pytest.approx(even.per_token * tokens + padded)
    excess = rank_load_factor(tokens, 256, 8, 8) - 1.0
    assert ep_line.at(tokens) - even.at(tokens) == pytest.approx(ep_line.routed * tokens * excess)
    assert ep_line.routed == pytest.approx(routed_flops_per_token(model, 8, 8) / flop_rate)
    assert imbalance_flops(model, tokens, 8, 8) == pytest.approx(
        routed_flops_per_token(model, 8, 8) * tokens * excess
    )
    assert imbalance_flops(model, tokens, 8, 1) == 0.0


def test_the_busiest_rank_carries_more_of_the_all_to_all():
    model, hw = model_from_spec(DEEPSEEK), HARDWARE["b200"]
    args = (model, hw, 8192.0, 1, 8, 10e-6, 2.0)
    unbalanced = moe_collectives_seconds(*args)
    balanced = moe_collectives_seconds(*args, True)
    assert unbalanced > balanced > moe_collectives_seconds(model, hw, 8192.0, 1, 1, 10e-6, 2.0)


def _ep_spec(devices, balancer=None, concurrency=4096):
    # One NVLink domain: an HGX B200 for 8 GPUs, a GB200 NVL72 beyond.
    spec = {
        "model": DEEPSEEK, "hardware": "b200" if devices <= 8 else "gb200-nvl72",
        "devices": devices,
        "tensor_parallel": devices, "expert_parallel": devices,
        "attention_data_parallel": True, "concurrency": concurrency,
        "input_tokens": 1000, "output_tokens": 1000, "transport": "none",
    }  # fmt: skip
    if balancer is not None:
        spec["expert_load_balancer"] = balancer
    return spec


def test_spec_field_and_production_default():
    tput = "throughput_tokens_per_second"
    on = predict_spec(_ep_spec(8, True))[tput]
    off = predict_spec(_ep_spec(8, False))[tput]
    assert on > off  # the balancer takes the busiest rank's excess away
    # Default: no balancer within one 8-GPU group, a balancer beyond it (wide EP).
    assert predict_spec(_ep_spec(8))[tput] == off
    assert predict_spec(_ep_spec(16))[tput] == predict_spec(_ep_spec(16, True))[tput]
    assert Deployment("b200", 8, expert_parallel=8).experts_balanced is False
    wide = Deployment("gb200-nvl72", 16, expert_parallel=WIDE_EP + 8)
    assert wide.experts_balanced is True
    stated = Deployment("gb200-nvl72", 16, expert_parallel=16, expert_load_balancer=False)
    assert stated.experts_balanced is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expert_load_balancer": "yes"}, "expert_load_balancer must be true, false or null"),
        ({"expert_load_balancer": True, "expert_parallel": 1, "tensor_parallel": 8,
          "attention_data_parallel": False}, "expert_load_balancer needs expert_parallel > 1"),
    ],
)  # fmt: skip
def test_bad_balancer_settings_are_errors(change, message):
    spec = {**copy.deepcopy(_ep_spec(8)), **change}
    with pytest.raises(SimEngineError, match=message):
        predict_spec(spec)
    with pytest.raises(SimEngineError):
        Deployment("b200", 8, expert_parallel=1, expert_load_balancer=True)

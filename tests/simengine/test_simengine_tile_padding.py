"""Tile padding of the grouped expert GEMMs (issue 28, twenty-ninth round).

The term isolated: a grouped GEMM computes each touched expert's routed rows in whole
tiles, the tile sized by the kernel to 1.3x the experts' mean rows rounded up to a power
of two, between 8 and 64 rows (FlashInfer / TensorRT-LLM trtllm-gen,
calculate_tile_tokens_dim), so each touched expert computes half a tile beyond its rows
on average. The padded rows cost FLOPs, not weight reads: a step of many small experts
with a few dozen rows each pays for them, a memory-bound step and a dense model do not,
and a prefill chunk's hundreds of rows an expert amortise them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simengine.moe import (
    EXPERT_TILE_MIN_ROWS,
    EXPERT_TILE_ROWS,
    TILE_LOAD_FACTOR,
    expert_padding_rows,
    gemm_line,
    padding_flops_per_row,
    touched_fraction,
)
from simengine.spec import model_from_spec

from .test_simengine_dataparallel import DEEPSEEK
from .test_simengine_openloop import LLAMA_70B

DEEPSEEK_LIKE = DEEPSEEK  # 256 routed experts, 8 a token
DENSE = LLAMA_70B


def _by_hand(tokens, experts, k):
    share = k / experts
    touched = touched_fraction(share, tokens)
    rows = tokens * share / touched
    tile = TILE_LOAD_FACTOR * math.sqrt(2) * rows
    tile = min(max(tile, EXPERT_TILE_MIN_ROWS), EXPERT_TILE_ROWS)
    return experts * touched * tile / 2


@pytest.mark.parametrize("tokens", [1, 16, 256, 4096, 65536])
def test_half_a_sized_tile_per_touched_expert(tokens):
    assert expert_padding_rows(tokens, 256, 8) == pytest.approx(_by_hand(tokens, 256, 8))
    # Numbers and arrays give the same rows.
    arr = expert_padding_rows(np.array([float(tokens)]), 256, 8)
    assert arr[0] == pytest.approx(expert_padding_rows(tokens, 256, 8), rel=1e-12)


def test_no_tokens_no_padding():
    # A prompt whose every token is cached multiplies nothing.
    assert expert_padding_rows(0.0, 256, 8) == 0.0
    assert expert_padding_rows(np.array([0.0, 100.0]), 256, 8)[0] == 0.0
    assert _line(DEEPSEEK_LIKE, 1e12, 1e15).padding(0.0) == 0.0


def test_the_tile_caps_so_long_experts_waste_half_of_64_rows():
    # 65,536 tokens x 8 / 256 = 2,048 rows an expert: every expert touched, 32 rows each.
    assert expert_padding_rows(65536, 256, 8) == pytest.approx(256 * EXPERT_TILE_ROWS / 2)


def test_padding_weighs_on_few_rows_an_expert_and_fades_with_more():
    share = [expert_padding_rows(t, 256, 8) / (t * 8) for t in (64, 256, 1024, 8192, 65536)]
    assert all(a >= b for a, b in zip(share[:-1], share[1:], strict=True))
    assert share[0] > 0.5 and share[-1] < 0.02
    # Few large experts (8, 2 a token) get many rows each at the same batch: less waste.
    assert expert_padding_rows(1024, 8, 2) / (1024 * 2) < share[2]


def _line(spec, mem_rate, flop_rate):
    return gemm_line(model_from_spec(spec), 1, 1, 0.0, mem_rate, flop_rate, flop_rate)


def test_the_padded_rows_cost_flops_where_flops_bind():
    m = model_from_spec(DEEPSEEK_LIKE)
    line = _line(DEEPSEEK_LIKE, 1e30, 1e15)  # reads are free: the FLOPs bind
    for tokens in (0.5, 2.0, 9.0, 64.0, 512.0, 4096.0, 70000.0):  # every tile regime
        # A step computes at least one token's rows (as it reads at least one token's
        # experts: touched_fraction).
        pad = padding_flops_per_row(m) / 1e15 * expert_padding_rows(max(tokens, 1.0), 256, 8)
        assert line.at(tokens) == pytest.approx(line.per_token * tokens + pad, rel=1e-12)
        # The router's scalar path (GemmLine.padding inlined) and the array path agree.
        assert line.at(np.array([tokens]))[0] == pytest.approx(line.at(tokens), rel=1e-12)
        assert pad > 0
    # A memory-bound step (the weights' read binds) does not see them.
    slow_read = _line(DEEPSEEK_LIKE, 1e9, 1e15)
    assert slow_read.at(64.0) == pytest.approx(slow_read.read(64.0), rel=1e-12)
    # A dense model has no experts, no padding.
    dense = _line(DENSE, 1e30, 1e15)
    assert dense.pad_row == 0.0 and dense.at(512.0) == pytest.approx(dense.per_token * 512.0)


@pytest.mark.parametrize("tokens", [0.5, 1.0, 3.0, 40.0, 300.0, 2000.0, 70000.0])
def test_the_gemm_lines_padding_is_the_padded_rows_at_its_row_cost(tokens):
    # GemmLine.padding (the router's scalar path, which skips the touched share while the
    # tile grows with the rows) against expert_padding_rows, for numbers and arrays.
    line = _line(DEEPSEEK_LIKE, 1e12, 1e15)
    rows = expert_padding_rows(tokens, 256, 8)
    assert line.padding(tokens) == pytest.approx(line.pad_row * rows, rel=1e-12)
    arr = line.padding(np.array([tokens]))
    assert arr[0] == pytest.approx(line.pad_row * rows, rel=1e-12)
    assert _line(DENSE, 1e12, 1e15).padding(tokens) == 0.0


def test_a_zero_dimensional_array_pads_as_its_number():
    line = _line(DEEPSEEK_LIKE, 1e12, 1e15)
    assert float(line.padding(np.array(300.0))) == pytest.approx(line.padding(300.0))


@pytest.mark.parametrize("size", [3, 40])
def test_short_and_long_arrays_pad_as_their_elements_do(size):
    # GemmLine.padding takes a short array element by element and a long one as arrays:
    # the same seconds.
    line = _line(DEEPSEEK_LIKE, 1e12, 1e15)
    for tokens in (np.linspace(0.0, 3000.0, size), np.linspace(2000.0, 9000.0, size)):
        expected = [line.pad_row * expert_padding_rows(float(t), 256, 8) for t in tokens]
        assert np.allclose(line.padding(tokens), expected, rtol=1e-12, atol=0)

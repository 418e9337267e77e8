"""Attention's own shape and precision (issue 28, third disclosed round).

Each term isolated:

* the attention width is query heads x head dimension, not the hidden size: with
  grouped-query attention the two differ (Qwen3-30B-A3B: 32 x 128 = 4096 against 2048),
  and both decode and prefill attention FLOPs follow the width;
* a latent cache shared by all heads (MLA, decoded with absorbed up-projections) has
  every query head attend over the whole latent: 4 x heads x latent FLOPs per context
  token and layer, enough to make MLA decode attention compute-bound where a GQA model's
  is bound by its KV read;
* attention multiplies at the 16-bit tensor-core rate whatever the weights' dtype (an
  FP4 model's attention is not four times faster than a BF16 one's).
"""

from __future__ import annotations

import dataclasses

import pytest

from simengine import SimEngineError
from simengine.hardware import HARDWARE
from simengine.spec import model_from_spec, predict_spec
from simengine.step import ATTENTION_MATH_BYTES, decode_step_line

from .test_simengine_dataparallel import DEEPSEEK  # DeepSeek-V3/R1's shape, FP8, MLA

QWEN3_30B = {
    "name": "qwen3-30b-a3b", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4,
    "head_dim": 128, "params_b": 30.5, "active_params_b": 3.3, "experts": 128,
    "experts_per_token": 8, "dtype": "fp8",
}  # fmt: skip


def _line(model, device="b200", batch=512.0, tp=1):
    return decode_step_line(
        model, HARDWARE[device], batch=batch, other_context_tokens=2000.0, tensor_parallel=tp,
        pipeline_stages=1, eta_mem=1.0, eta_flop=1.0, allreduce_base=0.0,
        activation_bytes=2.0,
    )  # fmt: skip


def test_attention_width_is_heads_times_head_dim():
    m = model_from_spec(QWEN3_30B)
    assert m.attention_width == 32 * 128 == 2 * m.hidden_size
    assert m.decode_attention_flops == 4.0 * 48 * 32 * 128
    # Not stated (catalog models): the hidden size, as before.
    bare = model_from_spec({k: v for k, v in QWEN3_30B.items() if k != "heads"})
    assert bare.attention_width == bare.hidden_size
    assert bare.decode_attention_flops == 4.0 * 48 * 2048


def test_decode_attention_flops_follow_the_width():
    wide, narrow = model_from_spec(QWEN3_30B), model_from_spec({**QWEN3_30B, "heads": 16})
    hw = HARDWARE["b200"]
    lw, ln = _line(wide), _line(narrow)
    assert lw.flop1 == pytest.approx(2 * ln.flop1)
    assert lw.flop1 == pytest.approx(wide.decode_attention_flops / hw.peak_flops(2.0))
    # The KV read does not depend on the query heads.
    assert lw.mem1 == pytest.approx(ln.mem1)


def test_mla_decode_attends_over_the_whole_latent_and_is_compute_bound():
    m = model_from_spec(DEEPSEEK)
    latent = 35136 / (61 * 1.0)  # 512 + 64 values per token and layer, FP8
    assert latent == pytest.approx(576)
    assert m.decode_attention_flops == pytest.approx(4.0 * 61 * 128 * latent)
    # All 128 heads on one GPU (as under attention data parallelism): per context token
    # the MLA kernels multiply longer than they read, 512 FLOPs per byte against the
    # H200's 206: compute-bound.
    line = _line(m, "h200")
    assert line.flop1 > 2 * line.mem1
    # A GQA cache of the same model (8 KV heads, no latent) is bound by its KV read.
    gqa = model_from_spec({**DEEPSEEK, "kv_heads": 8, "kv_bytes_per_token": None})
    gline = _line(gqa, "h200")
    assert gline.mem1 > gline.flop1
    # Tensor parallel over 8 GPUs: each reads the whole latent for its 16 heads. Until
    # issue 28's twenty-fifth round the copies made MLA memory-bound again here; the
    # decode kernel pads 16 heads to its 64-row tile on Hopper (test_simengine_latent_
    # padding), so each GPU computes 64 heads' FLOPs over the latent it reads and stays
    # compute-bound: 4x its own heads' FLOPs, the same KV read.
    tp8 = _line(m, "h200", tp=8)
    assert tp8.flop1 > tp8.mem1
    assert tp8.flop1 == pytest.approx(4 * line.flop1 / 8)


def test_attention_runs_at_the_16_bit_rate_whatever_the_weights():
    hw = HARDWARE["b200"]
    fp4 = model_from_spec({**QWEN3_30B, "dtype": "nvfp4", "kv_dtype": "fp8"})
    bf16 = model_from_spec({**QWEN3_30B, "dtype": "bf16", "kv_dtype": "fp8"})
    assert _line(fp4).flop1 == pytest.approx(_line(bf16).flop1)
    assert hw.peak_flops(ATTENTION_MATH_BYTES) == hw.peak_flops_16bit
    # The weight GEMMs do run faster in FP4 (at a batch large enough to be compute-bound).
    assert _line(fp4, batch=8192).fixed < _line(bf16, batch=8192).fixed


def test_prefill_attention_follows_the_width():
    # A long prompt on one B200: twice the attention width costs more TTFT, by the
    # attention's share only (the weight GEMMs are the same).
    spec = {"hardware": "b200", "devices": 1, "concurrency": 1, "input_tokens": 32000,
            "output_tokens": 10}  # fmt: skip
    wide = predict_spec({**spec, "model": QWEN3_30B})["ttft_seconds"]
    narrow = predict_spec({**spec, "model": {**QWEN3_30B, "heads": 16}})["ttft_seconds"]
    assert wide > 1.3 * narrow


def test_multi_query_attention_is_not_a_latent_cache():
    # One KV head (MQA) also splits one way over TP, but each head still attends over a
    # head_dim-wide K and V: 4 x layers x heads x head_dim, not the latent formula.
    mqa = model_from_spec({**QWEN3_30B, "kv_heads": 1})
    assert mqa.kv_shards == 1 and not mqa.latent_cache
    assert mqa.decode_attention_flops == 4.0 * 48 * 32 * 128
    assert model_from_spec(DEEPSEEK).latent_cache


@pytest.mark.parametrize(
    "field, value", [("heads", -1), ("head_dim", 1.5), ("kv_value_bytes", float("nan"))]
)
def test_attention_shape_fields_are_validated(field, value):
    with pytest.raises(SimEngineError, match=field):
        dataclasses.replace(model_from_spec(QWEN3_30B), **{field: value})

"""Speculative decoding (issue 28): tokens per step by acceptance, cost by batch and method."""

from __future__ import annotations

import pytest

from simengine import SimEngineError
from simengine.spec import parse_spec, predict_spec
from simengine.speculative import (
    METHODS,
    Speculation,
    drafter_shape,
    expected_tokens,
    method_default,
    production_default,
    resolve,
)

LLAMA_70B = {
    "name": "llama-3.3-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
    "head_dim": 128, "params_b": 70.6, "dtype": "fp8",
}  # fmt: skip


def _tpot(speculative, concurrency=1, hardware="h100", devices=4, **extra):
    spec = {
        "model": extra.pop("model", LLAMA_70B), "hardware": hardware, "devices": devices,
        "concurrency": concurrency, "input_tokens": 1000, "output_tokens": 500,
        "speculative": speculative, **extra,
    }  # fmt: skip
    if hardware == "cs-3":
        spec.pop("devices")
    return predict_spec(spec)["time_per_output_token_seconds"]


def _gain(speculative, concurrency=1, **kw):
    return _tpot(False, concurrency, **kw) / _tpot(speculative, concurrency, **kw)


def test_expected_tokens_is_leviathans_formula():
    assert expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.875, 1) == pytest.approx(1.875)  # DeepSeek-V3 MTP
    # Rises with acceptance and with draft length, never beyond k + 1.
    assert expected_tokens(0.5, 4) < expected_tokens(0.7, 4) < expected_tokens(0.9, 4) < 5
    assert expected_tokens(0.7, 2) < expected_tokens(0.7, 4) < expected_tokens(0.7, 8)


def test_every_method_has_a_source_and_resolves_to_its_defaults():
    for name, m in METHODS.items():
        assert m.source
        assert method_default(name) == Speculation(name, m.draft_tokens, m.acceptance)
    assert resolve({"method": "mtp"}, "gpu") == Speculation("mtp", 1, 0.875)
    assert resolve({"method": "eagle3", "acceptance": 0.6}, "gpu").draft_tokens == 6
    assert resolve(True, "wafer").method == "draft"
    assert resolve(False, "wafer") is None


def test_drafter_costs_by_method():
    assert drafter_shape(method_default("ngram"), 80).passes == 0
    medusa = drafter_shape(method_default("medusa"), 80)
    assert medusa.passes == 1 and medusa.params_fraction < 1 / 80
    eagle = drafter_shape(method_default("eagle"), 80)
    assert eagle.passes == 5 and eagle.depth_fraction == pytest.approx(1 / 80)
    draft = drafter_shape(method_default("draft"), 80)
    assert draft.passes == 4 and draft.params_fraction == pytest.approx(0.06)
    assert draft.depth_fraction > draft.params_fraction  # small models are relatively deep


def test_production_defaults_cs3_on_from_2024_10_gpus_off():
    assert production_default("gpu", None) is None
    assert production_default("wafer", None).method == "draft"
    assert production_default("wafer", "2024.08") is None
    assert production_default("wafer", "2024-08-27") is None
    assert production_default("wafer", "2024-10") is not None
    base = {"model": LLAMA_70B, "hardware": "cs-3"}
    assert parse_spec(base)[2]["speculative"] == method_default("draft")
    assert parse_spec({**base, "software": "2024.08"})[2]["speculative"] is False
    assert parse_spec({**base, "hardware": "h100"})[2]["speculative"] is False


def test_spec_speculative_object_is_validated():
    base = {"model": LLAMA_70B, "hardware": "h100", "devices": 4}
    for bad, msg in (
        ({"method": "lookahead"}, "speculative.method must be one of"),
        ({"method": "eagle", "draft_tokens": 0}, "draft_tokens must be an integer >= 1"),
        ({"method": "eagle", "acceptance": 1.5}, r"acceptance must be in \(0, 1\]"),
        ({"method": "eagle", "beam": 2}, "unknown field speculative.'beam'"),
        ("yes", "speculative must be true, false or an object"),
    ):
        with pytest.raises(SimEngineError, match=msg):
            parse_spec({**base, "speculative": bad})


def test_gain_rises_with_acceptance():
    gains = [_gain({"method": "eagle", "acceptance": a}) for a in (0.4, 0.6, 0.8, 0.95)]
    assert gains == sorted(gains)
    assert gains[-1] > 1.5 * gains[0]


def test_gain_falls_with_batch_size():
    # A small (compressed) KV cache so that KV memory does not cap the batch first.
    spec = {"method": "eagle3"}
    small_kv = {"model": {**LLAMA_70B, "kv_bytes_per_token": 16384}}
    gains = [_gain(spec, c, **small_kv) for c in (1, 8, 64, 1024)]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 1.5
    assert gains[-1] < 1.0  # compute-bound verify steps of k + 1 tokens cost more than they give


@pytest.mark.parametrize("method", ["medusa", "eagle", "eagle3", "mtp", "draft"])
def test_reasonable_methods_never_slow_batch_one(method):
    assert _gain({"method": method}) > 1.0


def test_draft_tokens_have_an_optimum():
    # Longer drafts add tokens with diminishing returns (a^k) but each draft pass costs
    # the same: the gain peaks at a finite draft length.
    gains = {k: _gain({"method": "draft", "draft_tokens": k, "acceptance": 0.7}) for k in
             (1, 2, 3, 4, 6, 8, 12, 16)}  # fmt: skip
    best = max(gains, key=gains.get)
    assert 1 < best < 16
    assert gains[16] < gains[best]


def test_wafer_gain_is_the_production_default_and_depends_on_the_drafter():
    on = _gain(True, hardware="cs-3", software="2024.10")
    assert on > 1.0
    # A one-layer drafter (EAGLE) is cheaper on a latency-bound wafer than a draft model.
    assert _gain({"method": "eagle"}, hardware="cs-3", software="2024.10") > on
    # Omitted = on for cs-3 (production), off for GPUs.
    cs3 = {"model": LLAMA_70B, "hardware": "cs-3", "software": "2024.10"}
    assert predict_spec(cs3)["time_per_output_token_seconds"] == pytest.approx(
        _tpot(True, hardware="cs-3", software="2024.10")
    )
    assert _tpot(None if False else False) == pytest.approx(
        predict_spec({"model": LLAMA_70B, "hardware": "h100", "devices": 4})[
            "time_per_output_token_seconds"
        ]
    )

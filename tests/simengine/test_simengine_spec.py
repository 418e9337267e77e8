"""`python -m simengine predict --spec`: any architecture, strict fields, one-line errors;
KV bytes per token from the architecture, checked against the catalog."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from simengine import SimEngineError
from simengine.model import architecture_kv_bytes, kv_bytes_per_token, model_spec_from_mapping
from simengine.spec import predict_spec

from .conftest import CATALOG, ROOT

LLAMA_70B = {
    "name": "llama-3.3-70b",
    "layers": 80,
    "hidden": 8192,
    "heads": 64,
    "kv_heads": 8,
    "head_dim": 128,
    "params_b": 70.6,
    "active_params_b": 70.6,
    "dtype": "fp8",
}
SPEC = {
    "model": LLAMA_70B,
    "hardware": "h100",
    "devices": 2,
    "tensor_parallel": 2,
    "concurrency": 1,
    "input_tokens": 1000,
    "output_tokens": 500,
    "speculative": False,
}
KEYS = (
    "ttft_seconds",
    "time_per_output_token_seconds",
    "tokens_per_second",
    "throughput_tokens_per_second",
    "kv_bytes_per_token",
)


def test_kv_bytes_from_architecture_llama_70b_bf16_is_320_kib():
    assert kv_bytes_per_token(80, 8, 128, 2) == 327_680


def test_predict_spec_gives_the_five_figures():
    r = predict_spec(SPEC)
    for key in KEYS:
        assert r[key] > 0, key
    assert r["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 1  # fp8 cache
    assert r["tokens_per_second"] == pytest.approx(1 / r["time_per_output_token_seconds"])
    assert r["devices"] == 2 and r["tensor_parallel"] == 2


def test_omitted_fields_take_documented_defaults():
    minimal = {"model": {"layers": 80, "hidden": 8192, "params_b": 70.6}, "hardware": "h200"}
    r = predict_spec(minimal)
    # heads = hidden / 128, kv_heads = heads, bf16: 2 x 80 x 64 x 128 x 2.
    assert r["kv_bytes_per_token"] == 2 * 80 * 64 * 128 * 2
    assert r["devices"] >= 1
    explicit = {**minimal, "concurrency": 1, "input_tokens": 1000, "output_tokens": 500}
    assert predict_spec(explicit)["ttft_seconds"] == pytest.approx(r["ttft_seconds"])


def test_wafer_spec_places_layers_over_wafers():
    spec = {"model": {**LLAMA_70B, "dtype": "bf16"}, "hardware": "cs-3"}
    r = predict_spec(spec)
    assert r["devices"] >= 2 and r["pipeline_stages"] == r["devices"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "unknown field 'colour'"),
        # ``experts`` is a model field since issue 28; a misspelt one is still an error.
        ({"model": {**LLAMA_70B, "expert_count": 8}}, "unknown field model.'expert_count'"),
        ({"hardware": "a100"}, "hardware must be one of"),
        ({"concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"concurrency": 1.5}, "concurrency must be an integer"),
        ({"speculative": "yes"}, "speculative must be true, false or an object"),
        ({"model": {**LLAMA_70B, "dtype": "fp6"}}, "model.dtype must be one of"),
        ({"model": {**LLAMA_70B, "kv_heads": 128}}, "kv_heads (128) must be <= model.heads"),
        ({"model": {**LLAMA_70B, "active_params_b": 100}}, "exceeds params_b"),
        (
            {"model": {k: v for k, v in LLAMA_70B.items() if k != "layers"}},
            "model.layers is required",
        ),
        ({"devices": 3}, "multiple of tensor_parallel"),
        ({"model": {**LLAMA_70B, "dtype": "bf16"}, "devices": 1, "tensor_parallel": 1}, "needs"),
        ({"hardware": "cs-3", "devices": 1, "tensor_parallel": 2}, "GPUs only"),
        ({"model": "llama"}, "model. must be a JSON object"),
    ],
)
def test_bad_spec_is_a_one_line_error(change, message):
    with pytest.raises(SimEngineError) as err:
        predict_spec({**SPEC, **change})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cli_prints_figures_and_json_and_one_line_errors(tmp_path):
    good = tmp_path / "spec.json"
    good.write_text(json.dumps(SPEC))
    cmd = [sys.executable, "-m", "simengine", "predict", "--spec"]
    out = subprocess.run([*cmd, str(good), "--json"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert all(k in data for k in KEYS)
    table = subprocess.run([*cmd, str(good)], cwd=ROOT, capture_output=True, text=True)
    assert "time_per_output_token_seconds" in table.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**SPEC, "gpu": "h100"}))
    out = subprocess.run([*cmd, str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "unknown field 'gpu'" in out.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    out = subprocess.run([*cmd, str(broken)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "not valid JSON" in out.stderr


def test_every_catalog_kv_value_matches_its_architecture():
    with open(CATALOG, "rb") as fh:
        models = tomllib.load(fh)["models"]
    for m in models:
        arch = m["architecture"]
        derived = architecture_kv_bytes(m["slug"], arch)
        assert derived == pytest.approx(arch["kv_bytes_per_token"], rel=1e-9), m["slug"]
        if not arch.get("kv_compressed"):
            assert derived == kv_bytes_per_token(
                arch["layers"], arch["kv_heads"], arch["head_dim"], arch["bytes_per_param"]
            )


def test_a_typed_kv_value_that_disagrees_with_the_architecture_is_refused():
    arch = {
        "total_params": 7e10, "layers": 80, "hidden_size": 8192, "bytes_per_param": 2.0,
        "kv_heads": 8, "head_dim": 128, "kv_bytes_per_token": 100_000, "context_window": 8192,
    }  # fmt: skip
    with pytest.raises(SimEngineError, match="disagrees with the architecture"):
        model_spec_from_mapping("x", arch)
    del arch["kv_heads"], arch["head_dim"]
    arch["kv_compressed"] = True
    assert model_spec_from_mapping("x", arch).kv_bytes_per_token == 100_000

"""Where a stream's time per output token goes (issue 28, eighteenth round).

``predict`` returns ``time_per_output_token_parts``: the line the prediction reads,
cut into its terms (GPUs: attention, weight GEMMs, collectives, kernel launches, the
drafter's passes, the host beyond the GPU step, the prompt chunks riding the step, the
transport; wafers: weights, KV, the pipeline's pass, speculation, the transport), and
``time_per_output_token_bounds``: which side of each roofline binds. Each piece
isolated: the parts sum to the time per output token in every steady state; each part
is the term it names (zero where that term is absent, growing where it grows); the
bounds flip where the physics says they do; a finite run, whose steps change as it
fills and drains, has none.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simengine.perf import GPU_TOKEN_PARTS, WAFER_TOKEN_PARTS
from simengine.spec import predict_spec

from .conftest import ROOT
from .test_simengine_host import _spec
from .test_simengine_latent import DSR1
from .test_simengine_openloop import BASE, LLAMA_70B, WAFER

MOE_EP = {"model": {**DSR1, "kv_latent": 576, "kv_dtype": "fp8"}, "hardware": "b200",
          "devices": 8, "tensor_parallel": 8, "expert_parallel": 8,
          "attention_data_parallel": True, "concurrency": 256, "input_tokens": 1000,
          "output_tokens": 1000}  # fmt: skip
SPECS = {
    "gpu-closed": {**BASE, "concurrency": 32},
    "gpu-open": {**BASE, "rate_per_second": 0.5},
    "gpu-open-light": {**BASE, "rate_per_second": 0.01},  # under one stream in flight
    "gpu-speculative": {**BASE, "concurrency": 4, "speculative": {"method": "eagle3"}},
    "gpu-transport": {**BASE, "concurrency": 32, "transport": "legacy"},
    "gpu-disaggregated": {**BASE, "concurrency": 32, "disaggregated_prefill": True},
    "gpu-pipeline": {**BASE, "devices": 4, "pipeline_parallel": 2, "concurrency": 32},
    "moe-expert-parallel": MOE_EP,
    "host-bound": _spec("gb200-nvl72", 2048),
    "wafer": {**WAFER, "concurrency": 1},
    "wafer-open": {**WAFER, "rate_per_second": 0.5},
}


def _parts(spec: dict) -> tuple[dict, dict, dict]:
    r = predict_spec(spec)
    return r, r["time_per_output_token_parts"], r["time_per_output_token_bounds"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_parts_sum_to_the_time_per_output_token(name):
    r, parts, _ = _parts(SPECS[name])
    wafer = SPECS[name]["hardware"] == "cs-3"
    assert tuple(parts) == (WAFER_TOKEN_PARTS if wafer else GPU_TOKEN_PARTS)
    assert all(v >= 0 for v in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(r["time_per_output_token_seconds"], rel=1e-9)


def test_each_part_is_the_term_it_names():
    _, closed, _ = _parts(SPECS["gpu-closed"])
    assert closed["collectives"] > 0  # TP2 all-reduces
    assert closed["drafting"] == closed["transport"] == closed["host_beyond_gpu"] == 0
    assert closed["prefill_riding"] > 0  # the other streams' prompts ride the steps
    assert _parts(SPECS["gpu-disaggregated"])[1]["prefill_riding"] == 0
    assert _parts(SPECS["gpu-transport"])[1]["transport"] > 0
    assert _parts(SPECS["gpu-speculative"])[1]["drafting"] > 0
    # One GPU, no speculation: no collectives and no drafting.
    one = {"model": LLAMA_70B, "hardware": "b200", "devices": 1, "concurrency": 8,
           "input_tokens": 1000, "output_tokens": 500}  # fmt: skip
    _, alone, _ = _parts(one)
    assert alone["collectives"] == alone["drafting"] == 0
    # The attention part grows with the context; the weight GEMMs' does not.
    _, longer, _ = _parts({**one, "input_tokens": 8000})
    assert longer["attention"] > 4 * alone["attention"]
    assert longer["weight_gemms"] == pytest.approx(alone["weight_gemms"], rel=1e-9)
    # Expert parallelism's all-to-alls are collectives: attending data-parallel, the spec
    # has no all-reduce, so they are the whole part. (Until issue 28's twenty-eighth
    # round this compared them with the TP2 spec's all-reduces; its quantized dispatch,
    # test_simengine_dispatch_bytes.py, took them just below those: 1.21 against 1.31 ms.)
    ep = _parts(SPECS["moe-expert-parallel"])[1]["collectives"]
    assert ep > 0
    # Its FP8 experts take FP8 inputs, so the dispatch is FP8; with 16-bit activations
    # (W8A16) it is 16-bit and the part grows.
    assert _parts({**SPECS["moe-expert-parallel"], "model": {**DSR1, "kv_latent": 576,
                   "kv_dtype": "fp8", "activation_dtype": "bf16"}})[1]["collectives"] > ep  # fmt: skip


def test_the_bounds_flip_where_the_physics_says():
    one = {"model": LLAMA_70B, "hardware": "b200", "devices": 1, "input_tokens": 1000,
           "output_tokens": 500}  # fmt: skip
    # One stream reads every weight for one token; a large batch multiplies them by many.
    assert _parts({**one, "concurrency": 1})[2]["weight_gemms"] == "read"
    big = {**one, "concurrency": 512, "max_batch_size": 512, "disaggregated_prefill": True,
           "input_tokens": 100, "output_tokens": 100}  # fmt: skip
    assert _parts(big)[2]["weight_gemms"] == "flops"
    # Grouped-query attention reads its KV; a latent cache's every head attends over the
    # whole latent, which turns decode attention compute-bound where each GPU holds only
    # its own streams' latents (attention data parallelism). Tensor parallelism copies
    # them to every GPU, which made the reads bind again until issue 28's twenty-fifth
    # round; the decode kernel computes its whole 128-row tile for a GPU's 16 heads
    # (simengine.parallel.latent_decode_padding), so it stays compute-bound.
    assert _parts(SPECS["gpu-closed"])[2]["attention"] == "kv_read"
    assert _parts(MOE_EP)[2]["attention"] == "flops"
    assert _parts({**MOE_EP, "attention_data_parallel": False})[2]["attention"] == "flops"
    # A small-active MoE at a large batch on a Grace host waits on the host.
    _, parts, bounds = _parts(SPECS["host-bound"])
    assert bounds["step"] == "host" and parts["host_beyond_gpu"] > 0
    assert _parts(_spec("gb200-nvl72", 64))[2]["step"] == "gpu"
    assert _parts(SPECS["wafer"])[2] == {"step": "pipeline"}


def test_a_finite_run_has_no_single_step_to_cut():
    r = predict_spec({**BASE, "offline_requests": 200})
    assert r["time_per_output_token_parts"] is None
    assert r["time_per_output_token_bounds"] is None


def test_the_cli_prints_the_parts_and_charts_them(tmp_path):
    # The table lists the non-zero parts in ms with their bounds; --plot writes a chart
    # (a PNG) at 1, 2, 4, ... streams up to the spec's; a finite run is a one-line error.
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPECS["gpu-closed"]))
    png = tmp_path / "parts.png"
    cmd = [sys.executable, "-m", "simengine", "predict", "--spec", str(spec)]
    out = subprocess.run([*cmd, "--plot", str(png)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "time per output token by part (ms; step bound: gpu)" in out.stdout
    assert "weight_gemms" in out.stdout and "(read)" in out.stdout
    assert "drafting" not in out.stdout  # zero: not printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finite = tmp_path / "finite.json"
    finite.write_text(json.dumps({**BASE, "offline_requests": 100}))
    out = subprocess.run([sys.executable, "-m", "simengine", "predict", "--spec", str(finite),
                          "--plot", str(tmp_path / "no.png")],
                         cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2 and "no single step to chart" in out.stderr
    assert not (tmp_path / "no.png").exists()


def test_the_chart_sweeps_the_streams_up_to_the_specs():
    from simengine.spec import _parts_sweep

    def labels(spec):
        return [label for label, _ in _parts_sweep(spec, predict_spec(spec))]

    assert labels({**BASE, "concurrency": 8}) == [
        "1 stream", "2 streams", "4 streams", "8 streams (the spec)"]  # fmt: skip
    assert labels({**BASE, "concurrency": 1}) == ["1 stream (the spec)"]
    assert labels({**BASE, "rate_per_second": 0.5}) == ["the spec's load"]
    rows = _parts_sweep({**BASE, "concurrency": 8}, predict_spec({**BASE, "concurrency": 8}))
    assert rows[0][1] == predict_spec({**BASE, "concurrency": 1})["time_per_output_token_parts"]

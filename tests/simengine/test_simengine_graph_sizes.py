"""The batch sizes a server captures its decode CUDA graphs at (simengine/host.py; issue
28, twenty-seventh round).

Each piece isolated:

* the servers' rules and defaults: SGLang's largest size 160 until September 2025, then
  by the GPU's memory and the TP group; vLLM's 512; TensorRT-LLM's padded rule up to the
  server's batch cap; no server stated: every batch its own graph;
* a step pads its batch to the next captured size: where the weight GEMMs are bound by
  their FLOPs the step pays for the padded rows, nothing where they are bound by the
  weights' read, and a batch on a captured size pays nothing;
* above the largest size the step runs eager: it costs what ``cuda_graphs`` false costs
  at the same batch, and a finite run whose batch crosses the largest size lands between
  the two;
* under attention data parallelism each rank pads its own share;
* the spec states a list or the largest size (GPUs only, one of the two), and the
  prediction says the largest size that ran.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from simengine.errors import SimEngineError
from simengine.holdout import legacy_spec
from simengine.host import graph_batch, graph_sizes_up_to, server_graph_sizes
from simengine.spec import predict_spec

from .conftest import ROOT
from .test_simengine_host import SMALL_MOE
from .test_simengine_kv import LLAMA_8B

H200, B200 = 141e9, 180e9


@pytest.mark.parametrize(
    ("server", "software", "memory", "tp", "largest"),
    [
        ("sglang", "2025-03-18", H200, 8, 160),  # before PR #10372: 160 on every large GPU
        ("sglang", "2025-08", B200, 1, 160),
        ("sglang", "2025-09", H200, 1, 256),  # after: by memory and TP
        ("sglang", "2025-10", H200, 4, 512),
        ("sglang", "2026-01", B200, 1, 512),
        ("sglang", None, H200, 2, 256),  # undated: today's rule
        ("vllm", "2025-06", H200, 1, 512),
        ("vllm", "2026-03", B200, 8, 512),
        ("tensorrt-llm", "2025-09", H200, 8, 2048),  # the server's batch cap
    ],
)
def test_each_servers_largest_captured_size(server, software, memory, tp, largest):
    sizes = server_graph_sizes(server, software, memory, tp, 2048)
    assert sizes[-1] == largest
    assert list(sizes) == sorted(set(sizes)) and sizes[0] == 1


def test_no_server_stated_captures_every_batch():
    assert server_graph_sizes(None, "2026-01", B200, 1, 2048) is None


def test_the_servers_rules_fill_in_below_the_largest():
    assert graph_sizes_up_to("sglang", 160) == (1, 2, 4, 8, 12, *range(16, 161, 8))
    sg = graph_sizes_up_to("sglang", 1024)
    assert {264, 272, 496, 512, 544, 1024} & set(sg) == {272, 496, 512, 544, 1024}
    vllm = graph_sizes_up_to("vllm", 512)
    assert vllm[:5] == (1, 2, 4, 8, 16) and 248 in vllm and 256 in vllm and 272 in vllm
    assert 264 not in vllm and vllm[-1] == 512
    # TensorRT-LLM's padded rule: every 8 to 128, then powers of two, then the cap.
    assert graph_sizes_up_to("tensorrt-llm", 2048)[-5:] == (128, 256, 512, 1024, 2048)
    assert graph_sizes_up_to("tensorrt-llm", 896)[-4:] == (128, 256, 512, 896)
    assert graph_sizes_up_to("tensorrt-llm", 100)[-1] == 100


def test_a_batch_pads_to_the_next_size_or_runs_eager_above_the_largest():
    sizes = (1, 2, 4, 8, 16, 256, 512)
    assert graph_batch(sizes, 5) == (8.0, False)
    assert graph_batch(sizes, 256) == (256.0, False)
    assert graph_batch(sizes, 256.4) == (512.0, False)
    assert graph_batch(sizes, 600) == (600, True)
    assert graph_batch(None, 600) == (600, False)
    padded, eager = graph_batch(sizes, np.array([3.0, 16.0, 17.0, 513.0]))
    assert padded.tolist() == [4.0, 16.0, 256.0, 513.0]
    assert eager.tolist() == [False, False, False, True]


def _spec(batch: int, **extra) -> dict:
    # Llama 3.1 8B at FP8 on one H100, every stream holding a short context: the weight
    # GEMMs are FLOP-bound from a few hundred streams.
    return {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": batch,
            "max_batch_size": 4096, "input_tokens": 100, "output_tokens": 100,
            "software": "2026-01", **extra}  # fmt: skip


def test_padding_costs_the_padded_rows_only_where_the_gemms_are_flop_bound():
    def tpot(batch, **extra):
        return predict_spec(_spec(batch, **extra))["time_per_output_token_seconds"]

    # A FLOP-bound step at 600 streams run in a 1024 graph pays for 424 dummy rows.
    exact, padded = tpot(600), tpot(600, cuda_graph_batch_sizes=[512, 1024])
    assert padded > 1.2 * exact
    parts = predict_spec(_spec(600, cuda_graph_batch_sizes=[512, 1024]))
    assert parts["time_per_output_token_bounds"]["weight_gemms"] == "flops"
    # On a captured size: nothing.
    assert tpot(512, cuda_graph_batch_sizes=[512, 1024]) == pytest.approx(tpot(512))
    # A weight-read-bound step (4 streams padded to 8) reads the same weights.
    assert tpot(4, cuda_graph_batch_sizes=[8]) == pytest.approx(tpot(4), rel=1e-3)


def test_above_the_largest_size_a_step_costs_what_no_graphs_cost():
    capped = predict_spec(_spec(300, cuda_graph_max_batch=256, server="sglang"))
    eager = predict_spec(_spec(300, cuda_graphs=False, server="sglang"))
    graphed = predict_spec(_spec(300, cuda_graph_max_batch=512, server="sglang"))
    assert capped["time_per_output_token_seconds"] == pytest.approx(
        eager["time_per_output_token_seconds"]
    )
    assert capped["time_per_output_token_seconds"] > graphed["time_per_output_token_seconds"]
    assert capped["time_per_output_token_parts"]["kernel_launches"] > (
        3 * graphed["time_per_output_token_parts"]["kernel_launches"]
    )


def test_a_finite_run_crossing_the_largest_size_lands_between_graphs_and_eager():
    run = {**_spec(1), "offline_requests": 600, "server": "sglang", "input_tokens": 200,
           "output_tokens": 400, "output_tokens_cv": 1.0, "max_output_tokens": 4000}  # fmt: skip
    run.pop("concurrency")

    def throughput(**extra):
        return predict_spec({**run, **extra})["throughput_tokens_per_second"]

    every = throughput(cuda_graph_max_batch=4096)
    none = throughput(cuda_graphs=False)
    some = throughput(cuda_graph_max_batch=160)
    assert none < some < every


def test_each_attention_dp_rank_pads_its_own_share():
    base = {"model": SMALL_MOE, "hardware": "h200", "devices": 4, "tensor_parallel": 4,
            "expert_parallel": 4, "attention_data_parallel": True, "concurrency": 400,
            "max_batch_size": 512, "input_tokens": 100, "output_tokens": 100,
            "server": "tensorrt-llm", "software": "2026-01"}  # fmt: skip
    # 100 streams a rank: a 100-size graph fits them exactly, a [64, 128] list pads.
    exact = predict_spec({**base, "cuda_graph_batch_sizes": [100]})
    padded = predict_spec({**base, "cuda_graph_batch_sizes": [64, 128]})
    over = predict_spec({**base, "cuda_graph_batch_sizes": [64]})
    assert exact["time_per_output_token_seconds"] <= padded["time_per_output_token_seconds"]
    assert (
        over["time_per_output_token_parts"]["kernel_launches"]
        > (exact["time_per_output_token_parts"]["kernel_launches"])
    )
    assert exact["cuda_graph_max_batch"] == 100


def test_the_prediction_says_the_largest_size_that_ran():
    assert predict_spec(_spec(8))["cuda_graph_max_batch"] is None  # no server stated
    assert predict_spec(_spec(8, server="vllm"))["cuda_graph_max_batch"] == 512
    assert (
        predict_spec(_spec(8, server="sglang", software="2025-03"))["cuda_graph_max_batch"] == 160
    )
    assert predict_spec(_spec(8, server="tensorrt-llm"))["cuda_graph_max_batch"] == 4096
    assert predict_spec(_spec(8, cuda_graph_batch_sizes=[1, 8, 64]))["cuda_graph_max_batch"] == 64
    # Without graphs there are no sizes.
    assert predict_spec(_spec(8, server="vllm", cuda_graphs=False))["cuda_graph_max_batch"] is None
    wafer = {"model": LLAMA_8B, "hardware": "cs-3", "concurrency": 1}
    assert predict_spec(wafer)["cuda_graph_max_batch"] is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cuda_graph_batch_sizes": [8, 4]}, "ascending"),
        ({"cuda_graph_batch_sizes": [4, 4]}, "distinct"),
        ({"cuda_graph_batch_sizes": []}, "cuda_graph_batch_sizes must be"),
        ({"cuda_graph_batch_sizes": [0, 8]}, "positive"),
        ({"cuda_graph_batch_sizes": [1.5]}, "positive integers"),
        ({"cuda_graph_batch_sizes": 8}, "a list"),
        ({"cuda_graph_max_batch": 0}, "cuda_graph_max_batch must be an integer >= 1"),
        ({"cuda_graph_max_batch": True}, "cuda_graph_max_batch must be an integer"),
        ({"cuda_graph_max_batch": 64, "cuda_graph_batch_sizes": [64]}, "not both"),
    ],
)
def test_bad_graph_fields_are_errors_naming_the_field(fields, message):
    with pytest.raises(SimEngineError, match=message):
        predict_spec(_spec(8, **fields))


@pytest.mark.parametrize("field", ["cuda_graph_batch_sizes", "cuda_graph_max_batch"])
def test_graph_sizes_apply_to_gpus_only(field):
    value = [8] if field == "cuda_graph_batch_sizes" else 8
    with pytest.raises(SimEngineError, match=f"{field} applies to GPUs only"):
        predict_spec({"model": LLAMA_8B, "hardware": "cs-3", field: value})


def test_the_legacy_schema_drops_both_fields():
    spec = {**_spec(8), "cuda_graph_batch_sizes": [8]}
    old, _ = legacy_spec(spec)
    assert "cuda_graph_batch_sizes" not in old
    old, _ = legacy_spec({**_spec(8), "cuda_graph_max_batch": 8})
    assert "cuda_graph_max_batch" not in old


def test_the_cli_prints_the_largest_captured_size(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(200, server="sglang", software="2025-03")))
    cmd = [sys.executable, "-m", "simengine", "predict", "--spec", str(spec)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^cuda_graph_max_batch +160$", out.stdout, re.M)
    # Every step of 200 streams runs eager: the launches are milliseconds.
    launches = re.search(r"^ +kernel_launches +([\d.]+)", out.stdout, re.M)
    assert launches and float(launches.group(1)) > 2.0
    spec.write_text(json.dumps(_spec(8)))  # no server: no sizes, nothing printed
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "cuda_graph_max_batch" not in out.stdout

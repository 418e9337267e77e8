"""The TensorRT-LLM DeepSeek-R1 best-practice guide's four runs, predicted (issue 28).

Usage: .venv/bin/python bench/dsr1_guide_cells.py

TensorRT-LLM's "How to get best performance on DeepSeek-R1 in TensorRT-LLM"
(docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md, 2025-03; the
reproduction of NVIDIA's GTC 2025 DeepSeek-R1 figures) gives each run's trtllm-bench
command, options and "Expected Result". simengine/data/gpu_points.toml's header leaves
this guide out of the calibration because it reproduces scenarios of the own hold-out
(nv-dsr1-b200-c1-tpsuser, nv-dsr1-b200-max), so these runs are neither calibration points
nor hold-out figures: nothing is fitted to them and no hold-out spec was amended after
them. They were looked at after issue 28's twelfth round, with every hold-out error in
view, for two things the guide states and the hold-out's frozen text could not:

* its B200 min-latency run (batch 1, the hold-out row nv-dsr1-b200-c1-tpsuser's
  scenario) decodes with MTP (3 next-token layers), which that row's frozen spec leaves
  off ("speculative decoding not stated": default off): with MTP stated the engine is
  far above the guide's figure, so that row's small error does not say the engine's
  batch-1 DeepSeek-R1 step is right;
* its two H200 runs show Hopper's DeepSeek-R1 steps much longer than the engine's, at
  batch 1 as at 128 per rank, as the own hold-out's H200 DEP8 row does.

The "real dataset" runs (1K in / 2K out on average) are predicted at fixed lengths and,
for the max-throughput runs, also at an output spread (cv 1.0, assumed: the guide does
not give the dataset's spread), which changes how long a finite run drains; which of the
two the guide's runs were is not known, so neither line is a verdict. Not a test:
nothing is asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simengine.spec import predict_spec  # noqa: E402

# DeepSeek-R1 as the hold-out states it; the H200 runs load deepseek-ai/DeepSeek-R1
# (FP8 weights, KV 'auto': BF16, the 576-value latent at 2 bytes), the B200 runs
# nvidia/DeepSeek-R1-FP4 (NVFP4 experts, FP8 attention and KV, as the hold-out's B200 rows).
R1 = {
    "name": "deepseek-r1", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
    "head_dim": 128, "params_b": 671.0, "active_params_b": 37.0, "experts": 256,
    "experts_per_token": 8, "shared_experts": 1,
}  # fmt: skip
H200_MODEL = {**R1, "kv_bytes_per_token": 70272, "dtype": "fp8", "kv_dtype": "bf16"}
B200_MODEL = {
    **R1, "kv_bytes_per_token": 35136, "dtype": "nvfp4", "attention_dtype": "fp8",
    "kv_dtype": "fp8",
}  # fmt: skip
COMMON = {
    "input_tokens": 1024,
    "output_tokens": 2048,
    "software": "2025-03",
    "server": "tensorrt-llm",
}
MTP3 = {"method": "mtp", "draft_tokens": 3}


def _min_latency(hardware: str, expert_parallel: int, model: dict) -> dict:
    # batch 1, 10 requests, TP8, MTP with 3 layers
    return {**COMMON, "hardware": hardware, "devices": 8, "tensor_parallel": 8,
            "expert_parallel": expert_parallel, "concurrency": 1, "offline_requests": 10,
            "speculative": MTP3, "model": model}  # fmt: skip


def _max_throughput(
    hardware: str, per_rank: int, concurrency: int, requests: int, model: dict
) -> dict:
    # DEP8: attention data parallel + expert parallel over the 8 GPUs
    return {**COMMON, "hardware": hardware, "devices": 8, "tensor_parallel": 8,
            "expert_parallel": 8, "attention_data_parallel": True, "max_batch_size": per_rank,
            "concurrency": concurrency, "offline_requests": requests, "model": model}  # fmt: skip


# (run, metric, the guide's expected result, spec)
RUNS = [
    ("B200 min-latency: TP8, batch 1, MTP 3", "tokens_per_second", 254.76,
     _min_latency("b200", 8, B200_MODEL)),
    ("B200 max-throughput: DEP8, 384 a rank, concurrency 3072",
     "throughput_tokens_per_second", 36008.89,
     _max_throughput("b200", 384, 3072, 49152, B200_MODEL)),
    ("H200 min-latency: TP8 EP4, batch 1, MTP 3", "tokens_per_second", 158.12,
     _min_latency("h200", 4, H200_MODEL)),
    ("H200 max-throughput: DEP8, 128 a rank, concurrency 1024",
     "throughput_tokens_per_second", 10637.74,
     _max_throughput("h200", 128, 1024, 5120, H200_MODEL)),
]  # fmt: skip


def main() -> None:
    print(f"{'run':74s} {'guide':>9s} {'engine':>9s} {'error':>7s}")
    for name, metric, published, spec in RUNS:
        variants = [("", spec)]
        if "offline_requests" in spec and spec["concurrency"] > 1:
            variants.append((" (outputs cv 1.0)", {**spec, "output_tokens_cv": 1.0}))
        if "speculative" in spec:
            variants.append((" (no MTP)", {k: v for k, v in spec.items() if k != "speculative"}))
        for label, s in variants:
            value = float(predict_spec(s)[metric])
            print(
                f"{name + label:74s} {published:9,.0f} {value:9,.0f} {value / published - 1:+7.1%}"
            )


if __name__ == "__main__":
    main()

"""DeepSeek-R1 decode at batch 1 (and 8) on 4-8 GPUs, as three sources measured it (issue 28).

Usage: .venv/bin/python bench/dsr1_batch1_cells.py

Issue 28's thirteenth round added the kernels a decode step launches
(``simengine.step.decode_kernels``, params ``gpu:kernel_overhead``) after these figures
showed the engine's DeepSeek-R1 steps at batch 1 far shorter than measured, with the
gpt-oss-120b batch-1 calibration points fitting. None of them is a calibration point or
a hold-out figure, and nothing is fitted to them:

* NVIDIA/TensorRT-LLM issue #5929 (2025-07-10; a user's LLMPerf runs against
  trtllm-serve v0.21.0rc2, 1,600 in / 600 out): inter-token latency p50 of DeepSeek-R1
  FP4 on 8x B200 and FP8 on 8x H200, TP8 with no expert parallelism or EP8, batch 1
  and 8. A user's measurement: gpu_points.toml's rules leave such figures out of the
  calibration.
* NVIDIA/TensorRT-LLM pull request #14810 (AutoDeploy, 2026-07): DeepSeek-R1 NVFP4 on
  4x B200 at concurrency 1, 1K / 1K: 120 tok/s.
* TensorRT-LLM tech blog 1 ("Pushing Latency Boundaries", 2025): 111 tok/s per user
  on 8x B200 without MTP, its fully optimised min-latency stack (TP8 attention, experts
  TP4 x EP2, which a spec cannot state: EP8 here). The
  same document describes the own hold-out row nv-dsr1-b200-c1-tpsuser's scenario, so
  it is printed here, never fitted; its module list is where decode_kernels' counts
  per layer come from.

The specs are the hold-out's DeepSeek-R1 (FP4 experts, FP8 attention and KV on B200;
FP8 on H200 with an FP8 latent cache: the issue does not state the KV dtype). Not a
test: nothing is asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsr1_guide_cells import B200_MODEL, R1  # noqa: E402  (the same DeepSeek-R1)

from simengine.spec import predict_spec  # noqa: E402

# FP8 weights with the B200 rows' FP8 latent cache (the guide's H200 runs cache in BF16).
H200_MODEL = {**R1, "kv_bytes_per_token": 35136, "dtype": "fp8", "kv_dtype": "fp8"}


def _spec(hardware, model, *, ep=None, batch=1, devices=8, isl=1600, osl=600, software="2025-07"):
    spec = {"model": model, "hardware": hardware, "devices": devices,
            "tensor_parallel": devices, "concurrency": batch, "input_tokens": isl,
            "output_tokens": osl, "software": software, "server": "tensorrt-llm"}  # fmt: skip
    if ep:
        spec["expert_parallel"] = ep
    return spec


# (cell, metric, published, spec); ms per token for the ITL, tok/s otherwise.
CELLS = [
    ("#5929 B200 FP4 TP8, batch 1: ITL ms", "ms", 6.78, _spec("b200", B200_MODEL)),
    ("#5929 B200 FP4 TP8 EP8, batch 1: ITL ms", "ms", 6.81, _spec("b200", B200_MODEL, ep=8)),
    ("#5929 H200 FP8 TP8, batch 1: ITL ms", "ms", 13.78, _spec("h200", H200_MODEL)),
    ("#5929 H200 FP8 TP8 EP8, batch 1: ITL ms", "ms", 11.00, _spec("h200", H200_MODEL, ep=8)),
    ("#5929 H200 FP8 TP8, batch 8: ITL ms", "ms", 18.18, _spec("h200", H200_MODEL, batch=8)),
    ("PR #14810 4x B200 TP4, concurrency 1: tok/s", "tps", 120.0,
     _spec("b200", B200_MODEL, devices=4, isl=1024, osl=1024, software="2026-07")),
    ("tech blog 1, 8x B200 TP8, no MTP: tok/s", "tps", 111.0,
     _spec("b200", B200_MODEL, ep=8, isl=1024, osl=2048, software="2025-03")),
]  # fmt: skip


def main() -> None:
    print(f"{'cell':48s} {'published':>9s} {'engine':>8s} {'ratio':>6s}")
    for name, unit, published, spec in CELLS:
        r = predict_spec(spec)
        if unit == "ms":
            value = r["time_per_output_token_seconds"] * 1e3
        else:
            value = r["tokens_per_second"]
        print(f"{name:48s} {published:9.2f} {value:8.2f} {value / published:6.2f}")


if __name__ == "__main__":
    main()

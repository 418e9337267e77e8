"""The TensorRT-LLM "Performance Overview" page's other cells, predicted (issue 28).

Usage: .venv/bin/python bench/perf_overview_cells.py

The page (docs/source/developer-guide/perf-overview.md, the 1.x developer guide; per-GPU
output tok/s from trtllm-bench offline runs of fixed-length synthetic requests) has one
cell per model, GPU column and ISL/OSL pair. Seven of its cells are own hold-out figures
(simengine/data/holdout_own.toml, ids ``trt12-*``); this prints every cell of those
columns with the column's hold-out spec, the ISL/OSL and the page's request count
changed, and one column with no hold-out row (gpt-oss-120b on one H200, the H100
column's spec on one GPU). These cells are neither calibration points nor hold-out
figures: nothing is fitted to them. They were first looked at in issue 28's twelfth
round, before its change (README, the twelfth round), and show how a column's error
moves with the sequence lengths. Not a test: nothing is asserted.
"""

from __future__ import annotations

import copy
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simengine.holdout import load_own_holdout  # noqa: E402
from simengine.spec import predict_spec  # noqa: E402

# The page's request counts by ISL/OSL ("Preparing a Dataset"); 1000/1000 as 1024/1024.
REQUESTS = {
    (1000, 1000): 3000, (1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500,
    (32768, 1024): 1000, (1024, 32768): 1000,
}  # fmt: skip

# Column -> (hold-out figure whose spec it uses, spec changes, {(isl, osl): tok/s/GPU}).
COLUMNS: dict[str, tuple[str, dict, dict[tuple[int, int], int]]] = {
    "DeepSeek R1 0528, B200 DEP4 (FP4)": ("trt12-dsr1-b200-dep4-1024-1024", {}, {
        (1000, 1000): 6463, (1024, 1024): 6430, (1024, 8192): 3862, (1024, 32768): 1451,
        (8192, 1024): 1168}),
    "DeepSeek R1 0528, H200 DEP8 (FP8)": ("trt12-dsr1-h200-dep8-1000-1000", {}, {
        (1000, 1000): 1627, (1024, 1024): 1620, (1024, 8192): 1218, (1024, 32768): 438}),
    "GPT-OSS 120B, H100 DEP4": ("trt12-gptoss120b-h100-dep4-1000-1000", {}, {
        (1000, 1000): 4685, (1024, 1024): 4715, (1024, 32768): 1177, (8192, 1024): 1169,
        (32768, 1024): 333}),
    "GPT-OSS 120B, H200 TP1 (no hold-out row)": ("trt12-gptoss120b-h100-dep4-1000-1000", {
        "hardware": "h200", "devices": 1, "tensor_parallel": 1, "expert_parallel": None,
        "attention_data_parallel": None}, {
        (1000, 1000): 6868, (1024, 1024): 6798, (1024, 8192): 3543, (8192, 1024): 1828,
        (32768, 1024): 519}),
    "GPT-OSS 120B, GB200 TP1 (FP4)": ("trt12-gptoss120b-gb200-tp1-1000-1000", {}, {
        (1000, 1000): 27198, (1024, 1024): 26609, (1024, 8192): 14800, (1024, 32768): 5556,
        (8192, 1024): 6835, (32768, 1024): 1645}),
    "Llama 4 Maverick, GB200 DEP4 (FP4)": ("trt12-maverick-gb200-dep4-8192-1024", {}, {
        (1000, 1000): 11828, (1024, 1024): 11905, (1024, 8192): 5508, (1024, 32768): 2300,
        (8192, 1024): 3444, (32768, 1024): 963}),
    "Qwen3 235B A22B, H200 DEP4 (FP8)": ("trt12-qwen3-235b-h200-dep4-1024-8192", {}, {
        (1000, 1000): 3288, (1024, 1024): 3268, (1024, 8192): 1417, (8192, 1024): 627,
        (32768, 1024): 134}),
    "Llama 3.3 70B, H100 TP2 (FP8)": ("trt12-l33-70b-h100-tp2-8192-1024", {}, {
        (1000, 1000): 2209, (8192, 1024): 398}),
}  # fmt: skip


def main() -> int:
    specs = {f["id"]: f["spec"] for f in load_own_holdout()}
    ratios = []
    for column, (fid, changes, cells) in COLUMNS.items():
        print(column)
        for (isl, osl), published in cells.items():
            spec = copy.deepcopy(specs[fid])
            for key, value in changes.items():
                if value is None:
                    spec.pop(key, None)
                else:
                    spec[key] = value
            spec.update(input_tokens=isl, output_tokens=osl, offline_requests=REQUESTS[isl, osl])
            per_gpu = predict_spec(spec)["throughput_tokens_per_second"] / spec["devices"]
            ratios.append(per_gpu / published)
            print(f"  {isl:>6}/{osl:<6} published {published:>7,} predicted {per_gpu:>9,.0f}"
                  f"  x{per_gpu / published:.2f}")  # fmt: skip
    print(f"\n{len(ratios)} cells: median |error| "
          f"{statistics.median(abs(r - 1) for r in ratios):.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

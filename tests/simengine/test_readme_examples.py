"""The README's spec-field examples say what the engine answers today.

Each example below is run through ``predict_spec`` and its figures, rounded the way the
README rounds them, must appear in the README's text (line breaks and indentation
collapsed). When the engine changes, this fails until the README is brought up to date:
seven of these had drifted over issue 28's later rounds before the check existed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simengine.spec import predict_spec

from .test_simengine_kv import LLAMA_8B
from .test_simengine_openloop import LLAMA_70B  # FP8

README = Path(__file__).resolve().parents[2] / "README.md"

LLAMA_405B_BF16 = {
    "name": "llama-3.1-405b", "layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8,
    "head_dim": 128, "params_b": 405.9, "dtype": "bf16",
}  # fmt: skip


@pytest.fixture(scope="module")
def readme() -> str:
    return re.sub(r"\s+", " ", README.read_text())


def _n(x: float, step: float = 1.0) -> str:
    """``x`` rounded to a multiple of ``step``, with thousands separators."""
    return f"{round(x / step) * step:,.0f}"


def test_paged_kv_example(readme):
    r = predict_spec({"model": LLAMA_8B, "hardware": "h100", "devices": 1, "concurrency": 1400,
                      "max_batch_size": 2048, "input_tokens": 200, "output_tokens": 200})  # fmt: skip
    assert (
        f"-> batch {r['batch']:.0f}, {_n(r['throughput_tokens_per_second'], 100)} tok/s." in readme
    )


def test_server_example(readme):
    base = {"model": LLAMA_70B, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
            "concurrency": 512, "input_tokens": 1000, "output_tokens": 1000}  # fmt: skip
    # The admission rules compared at one cache dtype (FP8, stated).
    fp8_kv = {**base, "model": {**LLAMA_70B, "kv_dtype": "fp8"}}
    v = predict_spec({**fp8_kv, "server": "vllm"})
    t = predict_spec({**fp8_kv, "server": "tensorrt-llm"})
    assert (
        f'"server": "vllm"` -> batch {v["batch"]:.0f}, {_n(v["throughput_tokens_per_second"], 10)}'
        f" tok/s, TTFT {v['ttft_seconds']:.0f} s;" in readme
    )
    assert (
        f'"server": "tensorrt-llm"` -> batch {t["batch"]:.0f}, '
        f"{_n(t['throughput_tokens_per_second'], 10)} tok/s, TTFT {t['ttft_seconds']:.0f} s"
        in readme
    )
    # The cache's dtype unstated: vLLM keeps it in 16 bits (its "auto").
    auto = predict_spec({**base, "server": "vllm"})
    assert (
        f"-> batch {auto['batch']:.0f}, {_n(auto['throughput_tokens_per_second'], 10)} tok/s, "
        f"TTFT {auto['ttft_seconds']:.0f} s with its 16-bit cache" in readme
    )
    plain = predict_spec(base)  # no server: the weights' 8 bits
    cv = predict_spec({**base, "output_tokens_cv": 1.0})
    assert (
        f"-> batch {cv['batch']:.0f} ({plain['batch']:.0f} at cv 0), "
        f"{_n(cv['throughput_tokens_per_second'], 10)} tok/s "
        f"({_n(plain['throughput_tokens_per_second'], 10)})." in readme
    )


def test_offline_run_example(readme):
    base = {"model": LLAMA_8B, "hardware": "h100", "devices": 1, "max_batch_size": 256,
            "input_tokens": 500, "output_tokens": 1000, "offline_requests": 2000}  # fmt: skip
    r = predict_spec(base)
    assert (
        f"-> {_n(r['throughput_tokens_per_second'], 100)} tok/s over {r['run_seconds']:.0f} s, "
        f"half the requests back by {r['completion_p50_seconds']:.0f} s;" in readme
    )
    s = predict_spec({**base, "output_tokens_cv": 1.0, "max_output_tokens": 8000})
    p50, p90, p99 = (s[f"completion_p{q}_seconds"] for q in (50, 90, 99))
    assert (
        f"-> {_n(s['throughput_tokens_per_second'], 10)} tok/s over {s['run_seconds']:.0f} s, "
        f"{s['drain_seconds']:.0f} s of it the drain, a mean batch of {s['batch']:.0f} of the "
        f"256 slots, half back by {p50:.0f} s, 90 % by {p90:.0f} s, 99 % by {p99:.0f} s." in readme
    )


def test_open_loop_example(readme):
    r = predict_spec({"model": LLAMA_70B, "hardware": "h100", "devices": 2, "tensor_parallel": 2,
                      "replicas": 4, "rate_per_second": 24, "input_tokens": 1000,
                      "output_tokens": 500})  # fmt: skip
    assert (
        f"-> batch {r['batch']:.0f} per replica, TTFT {r['ttft_seconds']:.3f} s "
        f"({r['queue_seconds']:.3f} s of it queueing), capacity "
        f"{r['capacity_requests_per_second']:.0f} req/s, "
        f"{_n(r['throughput_tokens_per_second'], 100)} tok/s." in readme
    )


def test_pipeline_example(readme):
    r = predict_spec({"model": LLAMA_405B_BF16, "hardware": "h100", "tensor_parallel": 8,
                      "pipeline_parallel": 2, "concurrency": 64, "input_tokens": 1000,
                      "output_tokens": 500})  # fmt: skip
    assert f"-> {r['devices']} GPUs, {_n(r['throughput_tokens_per_second'], 10)} tok/s." in readme


def test_speculative_example(readme):
    spec = {"model": LLAMA_70B, "hardware": "h100", "devices": 4}
    sd = {"method": "eagle3", "draft_tokens": 6, "acceptance": 0.8}

    def ratio(c: int) -> float:
        on = predict_spec({**spec, "concurrency": c, "speculative": sd})
        return (
            on["tokens_per_second"] / predict_spec({**spec, "concurrency": c})["tokens_per_second"]
        )

    one = predict_spec({**spec, "concurrency": 1, "speculative": sd})["tokens_per_second"]
    assert (
        f"Speculative object: {one:.0f} tok/s for one stream ({ratio(1):.1f}x plain decoding; "
        f"{ratio(64):.1f}x at 64 streams, {ratio(160):.2f}x at 160 streams; at 1,024 streams "
        f"the compute-bound verify steps make it {ratio(1024):.2f}x" in readme
    )


def test_wafer_default_example(readme):
    qwen = {"name": "qwen3-32b", "layers": 64, "hidden": 5120, "heads": 64, "kv_heads": 8,
            "head_dim": 128, "params_b": 32.8}  # fmt: skip
    r = predict_spec({"model": qwen, "hardware": "cs-3"})
    assert f"(the draft-model method), {_n(r['tokens_per_second'])} tok/s at the" in readme


# The examples below were added in issue 28's tenth round, when five more had drifted.
DEEPSEEK_V3 = {
    "name": "deepseek-v3", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
    "head_dim": 128, "params_b": 671, "active_params_b": 37, "experts": 256,
    "experts_per_token": 8, "shared_experts": 1, "dtype": "fp8", "kv_dtype": "bf16",
    "kv_latent": 576,
}  # fmt: skip
GPT_OSS = {
    "name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
    "head_dim": 64, "params_b": 117, "active_params_b": 5.1, "experts": 128,
    "experts_per_token": 4, "attention_dtype": "bf16", "expert_dtype": "mxfp4",
    "kv_dtype": "fp8", "sliding_window": 128, "sliding_window_layers": 18,
}  # fmt: skip


def test_host_example(readme):
    from simengine.host import host_param
    from simengine.params import DEFAULT_PARAMS

    from .test_simengine_host import SMALL_MOE

    no_host = DEFAULT_PARAMS.with_values({host_param("grace"): 0.0, host_param("x86"): 0.0})

    def thr(hardware: str, batch: int, params=DEFAULT_PARAMS) -> str:
        spec = {"model": SMALL_MOE, "hardware": hardware, "devices": 1, "concurrency": batch,
                "max_batch_size": batch, "input_tokens": 200, "output_tokens": 200}  # fmt: skip
        return _n(predict_spec(spec, params)["throughput_tokens_per_second"], 100)

    assert (
        f"384 streams of 200 in / 200 out, makes {thr('b200', 384)} tok/s on a B200 (GPU-bound) "
        f"and {thr('gb200-nvl72', 384)} on a GB200," in readme
    )
    assert f"({thr('gb200-nvl72', 384, no_host)} without the host term)" in readme
    assert (
        f"at 1,024 streams the B200's x86 host binds too ({thr('b200', 1024)} tok/s; "
        f"{thr('b200', 1024, no_host)} without)" in readme
    )


def test_attention_data_parallel_and_disaggregated_examples(readme):
    dep = {"model": DEEPSEEK_V3, "hardware": "gb200-nvl72", "devices": 16,
           "expert_parallel": 16, "attention_data_parallel": True, "concurrency": 4096,
           "input_tokens": 2000, "output_tokens": 500}  # fmt: skip
    r = predict_spec(dep)
    tp = predict_spec({k: v for k, v in dep.items() if k != "attention_data_parallel"})
    assert (
        f"-> batch {r['batch']:.0f}, {_n(r['throughput_tokens_per_second'], 100)} tok/s "
        f"(attention TP holds {tp['batch']:.0f} streams of the 4,096 and gives "
        f"{_n(tp['throughput_tokens_per_second'], 100)} tok/s)." in readme
    )
    even = predict_spec({**dep, "attention_dp_balance": True})
    assert (
        f'`"attention_dp_balance": true` -> {_n(even["throughput_tokens_per_second"], 100)} '
        f"tok/s ({_n(r['throughput_tokens_per_second'], 100)} without)." in readme
    )
    unbalanced = predict_spec({**dep, "expert_load_balancer": False})
    assert (
        f'`"expert_load_balancer": false` -> '
        f"{_n(unbalanced['throughput_tokens_per_second'], 100)} tok/s "
        f"({_n(r['throughput_tokens_per_second'], 100)} balanced, its default)." in readme
    )
    d = predict_spec({**dep, "disaggregated_prefill": True})
    assert (
        f"-> {_n(d['throughput_tokens_per_second'], 100)} tok/s from the 16 decode GPUs "
        f"({d['time_per_output_token_seconds'] * 1e3:.1f} ms per output token," in readme
    )


DSR1_FP4 = {
    "name": "deepseek-r1", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
    "head_dim": 128, "params_b": 671.0, "active_params_b": 37.0, "experts": 256,
    "experts_per_token": 8, "shared_experts": 1, "kv_bytes_per_token": 35136,
    "dtype": "nvfp4", "kv_dtype": "fp8",
}  # fmt: skip
# DeepSeek-R1 DEP8 on 8x B200 at 512 streams a rank (the software-era example's serving).
DSR1_DEP8 = {
    "model": DSR1_FP4, "hardware": "b200", "devices": 8, "tensor_parallel": 8,
    "expert_parallel": 8, "attention_data_parallel": True, "attention_dp_balance": True,
    "concurrency": 4096, "max_batch_size": 512,
}  # fmt: skip


def test_software_era_example(readme):
    base = {**DSR1_DEP8, "input_tokens": 800, "output_tokens": 4000}
    old = predict_spec({**base, "software": "2025-09"})
    new = predict_spec({**base, "software": "2026-02"})
    assert (
        f"-> era {old['software']}, {_n(old['throughput_tokens_per_second'], 100)} tok/s; "
        f'with `"software": "2026-02"` -> era {new["software"]}, '
        f"{_n(new['throughput_tokens_per_second'], 100)} tok/s." in readme
    )


def test_expert_load_balancer_example(readme):
    # Issue 28's fourteenth round: DeepSeek-R1 DEP8 on B200, no balancer within 8 GPUs.
    base = {**DSR1_DEP8, "input_tokens": 1000, "output_tokens": 1000, "software": "2026-02"}
    off, on = predict_spec(base), predict_spec({**base, "expert_load_balancer": True})
    assert (
        f"-> {_n(off['throughput_tokens_per_second'], 100)} tok/s "
        f"({off['time_per_output_token_seconds'] * 1e3:.1f} ms per output token); "
        f'`"expert_load_balancer": true` -> {_n(on["throughput_tokens_per_second"], 100)} '
        f"tok/s ({on['time_per_output_token_seconds'] * 1e3:.1f} ms)." in readme
    )


def test_piggyback_example(readme):
    from .test_simengine_piggyback import former_rule

    spec = {"model": GPT_OSS, "hardware": "b200", "devices": 1, "concurrency": 256,
            "input_tokens": 1000, "output_tokens": 1000}  # fmt: skip
    r = predict_spec(spec)
    now, former, tpot_before = former_rule(GPT_OSS, "b200", 1, r, 1000, 1000)
    tpot = r["time_per_output_token_seconds"]
    before = r["throughput_tokens_per_second"] * tpot / tpot_before
    assert (
        f"256 streams of 1,000 in / 1,000 out: {_n(r['throughput_tokens_per_second'], 10)} "
        f"tok/s, where the former rule gives {_n(before, 10)} (the other streams' prompts "
        f"cost each token {now * 1e3:.2f} ms instead of {former * 1e3:.2f} ms)." in readme
    )


def test_moe_and_mixed_precision_examples(readme):
    r = predict_spec({"model": DEEPSEEK_V3, "hardware": "gb200-nvl72", "devices": 16,
                      "expert_parallel": 16, "concurrency": 64, "input_tokens": 2000,
                      "output_tokens": 500})  # fmt: skip
    assert (
        f"MoE with expert parallel on GB200 NVL72: {r['tokens_per_second']:.0f} tok/s per "
        f"stream, {_n(r['throughput_tokens_per_second'], 10)} tok/s for the replica "
        f"({r['time_per_output_token_seconds'] * 1e3:.1f} ms per output token)." in readme
    )
    m = predict_spec({"model": GPT_OSS, "hardware": "b200", "devices": 1, "concurrency": 32})
    assert (
        f"on one B200: {m['tokens_per_second']:.0f} tok/s per stream, "
        f"{_n(m['throughput_tokens_per_second'])} tok/s for the GPU." in readme
    )


def test_sliding_window_example(readme):
    # Added in issue 28's fifteenth round.
    full = {k: v for k, v in GPT_OSS.items() if not k.startswith("sliding_window")}
    runs = [predict_spec({"model": m, "hardware": "h200", "devices": 1, "concurrency": 2048,
                          "input_tokens": 8000, "output_tokens": 1000})
            for m in (GPT_OSS, full)]  # fmt: skip
    (win, whole) = ((_n(r["batch"]), _n(r["throughput_tokens_per_second"], 10)) for r in runs)
    assert (
        f"on one H200: the paged cache holds {win[0]} streams and they make {win[1]} tok/s; "
        f"stating every layer as full attention, {whole[0]} streams and {whole[1]} tok/s." in readme
    )
    # Added in issue 28's sixteenth round: TensorRT-LLM sizes the window layers like full ones.
    trt = predict_spec({"model": GPT_OSS, "hardware": "h200", "devices": 1, "concurrency": 2048,
                        "input_tokens": 8000, "output_tokens": 1000, "server": "tensorrt-llm",
                        "kv_admission": "paged"})  # fmt: skip
    assert (
        f'Under `"server": "tensorrt-llm"` with `"kv_admission": "paged"` the cache holds '
        f"{_n(trt['batch'])} streams, as without the window, and they make "
        f"{_n(trt['throughput_tokens_per_second'], 10)} tok/s (each step still reads only the "
        f"window)." in readme
    )


def test_activation_dtype_example(readme):
    runs = [("h200", {}), ("b200", {}), ("b200", {"activation_dtype": "nvfp4"})]

    def run(hardware, extra, concurrency):
        return predict_spec({"model": {**GPT_OSS, **extra}, "hardware": hardware,
                             "devices": 1, "concurrency": concurrency,
                             "input_tokens": 8000, "output_tokens": 500})  # fmt: skip

    one = [run(h, e, 1) for h, e in runs]
    many = [run(h, e, 256) for h, e in runs]
    h200, w4a8, w4a4 = (f"{r['ttft_seconds']:.3f}" for r in one)
    assert (
        f"TTFT {h200} s on an H200 (its MXFP4 experts multiplied in BF16), {w4a8} s on a B200"
        f' (W4A8), {w4a4} s there with `"activation_dtype": "nvfp4"` (W4A4);' in readme
    )
    tpot = {f"{r['time_per_output_token_seconds'] * 1e3:.1f}" for r in one[1:]}
    assert len(tpot) == 1 and f"decode {tpot.pop()} ms per token on the B200 either way" in readme
    thr = ", ".join(_n(r["throughput_tokens_per_second"], 10) for r in many[:2])
    assert f"{thr} and {_n(many[2]['throughput_tokens_per_second'], 10)} tok/s." in readme


def test_token_parts_example(readme):
    r = predict_spec({"model": LLAMA_70B, "hardware": "h100", "devices": 2,
                      "tensor_parallel": 2, "concurrency": 64, "input_tokens": 1000,
                      "output_tokens": 500})  # fmt: skip
    ms = {k: v * 1e3 for k, v in r["time_per_output_token_parts"].items()}
    bounds = r["time_per_output_token_bounds"]
    assert bounds["weight_gemms"] == "read" and bounds["attention"] == "kv_read"
    assert (
        f"spends its {r['time_per_output_token_seconds'] * 1e3:.1f} ms a token on weight GEMMs "
        f"({ms['weight_gemms']:.1f} ms, reading the weights), other streams' prompts riding "
        f"the step ({ms['prefill_riding']:.1f}), kernel launches ({ms['kernel_launches']:.1f}), "
        f"attention ({ms['attention']:.1f}, reading the KV) and all-reduces "
        f"({ms['collectives']:.1f})." in readme
    )


def test_prefix_cache_example(readme):
    base = {"model": {**LLAMA_70B, "kv_dtype": "fp8"}, "hardware": "h100", "devices": 2,
            "tensor_parallel": 2, "concurrency": 64, "input_tokens": 8000,
            "output_tokens": 400, "server": "vllm"}  # fmt: skip
    cold = predict_spec(base)
    warm = predict_spec({**base, "cached_input_tokens": 6000})
    assert (
        f"-> batch {cold['batch']:.0f}, {_n(cold['throughput_tokens_per_second'])} tok/s, "
        f'TTFT {cold["ttft_seconds"]:.1f} s; with `"cached_input_tokens": 6000` -> batch '
        f"{warm['batch']:.0f}, {_n(warm['throughput_tokens_per_second'])} tok/s, "
        f"TTFT {warm['ttft_seconds']:.1f} s." in readme
    )


def test_latent_decode_tile_example(readme):
    from .test_simengine_dataparallel import DEEPSEEK

    spec = {"hardware": "b200", "devices": 8, "tensor_parallel": 8, "concurrency": 512,
            "max_batch_size": 512, "input_tokens": 1024, "output_tokens": 2048,
            "server": "vllm", "software": "2025-07-16",
            "model": {**DEEPSEEK, "kv_bytes_per_token": 70272}}  # fmt: skip
    r = predict_spec(spec)
    tpot = r["time_per_output_token_seconds"] * 1e3
    attention = r["time_per_output_token_parts"]["attention"] * 1e3
    assert r["time_per_output_token_bounds"]["attention"] == "flops"
    assert (
        f"-> TPOT {tpot:.1f} ms (attention {attention:.1f} ms of it, flops-bound), "
        f"{_n(r['throughput_tokens_per_second'], 10)} tok/s;" in readme
    )
    assert f"which the engine put at 35.2 ms and now at {tpot:.1f} ms" in readme


def test_server_features_example(readme):
    def run(concurrency: int, **flags) -> dict:
        return predict_spec({"model": LLAMA_8B, "hardware": "h100", "concurrency": concurrency,
                             "input_tokens": 1000, "output_tokens": 500,
                             "server": "tensorrt-llm", **flags})  # fmt: skip

    off = {"cuda_graphs": False, "overlap_scheduler": False}
    on1, off1, on64, off64 = run(1), run(1, **off), run(64), run(64, **off)
    assert on1["cuda_graphs"] and not off1["cuda_graphs"]
    launches = off1["time_per_output_token_parts"]["kernel_launches"] * 1e3
    assert (
        f"one stream {on1['tokens_per_second']:.0f} tok/s (TPOT "
        f'{on1["time_per_output_token_seconds"] * 1e3:.2f} ms); with `"cuda_graphs": false, '
        f'"overlap_scheduler": false` {off1["tokens_per_second"]:.0f} tok/s '
        f"({off1['time_per_output_token_seconds'] * 1e3:.2f} ms, {launches:.2f} ms of it "
        f"launches); at 64 streams {_n(on64['throughput_tokens_per_second'])} against "
        f"{_n(off64['throughput_tokens_per_second'])} tok/s." in readme
    )


def test_graph_sizes_example(readme):
    def run(concurrency: int, **flags) -> dict:
        return predict_spec({"model": LLAMA_8B, "hardware": "h100", "concurrency": concurrency,
                             "input_tokens": 1000, "output_tokens": 500, **flags})  # fmt: skip

    early = run(200, server="sglang", software="2025-03")
    late = run(200, server="sglang", software="2025-10")
    assert (early["cuda_graph_max_batch"], late["cuda_graph_max_batch"]) == (160, 256)
    listed = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192]
    trt = {"server": "tensorrt-llm", "max_batch_size": 4096}
    padded = run(600, cuda_graph_batch_sizes=listed, **trt)
    exact = run(600, cuda_graph_batch_sizes=[600], **trt)
    assert padded["time_per_output_token_bounds"]["weight_gemms"] == "flops"
    assert (
        f'"2025-03"` (largest graph 160, so every step eager) '
        f'{_n(early["throughput_tokens_per_second"], 10)} tok/s; `"2025-10"` (256) '
        f"{_n(late['throughput_tokens_per_second'], 10)} tok/s." in readme
    )
    assert (
        f"overview's list (600 padded to 1024, the GEMMs bound by FLOPs): "
        f"{_n(padded['throughput_tokens_per_second'], 10)} tok/s, against "
        f"{_n(exact['throughput_tokens_per_second'], 10)} with a graph at 600 exactly." in readme
    )

"""Sliding-window attention (issue 28, fifteenth and sixteenth rounds).

The term isolated: some layers attend over, and keep KV for, only the last W tokens
(gpt-oss: every other layer, 128 tokens), so a stream at context c reads and holds
e(c) = c - f max(0, c - W) whole-cache tokens (``ModelSpec.kv_tokens``, f the share of
window layers). That one function sets what a decode step reads and attends over, a
prefill's attended pairs (its integral, ``ModelSpec.attended_pairs``) and, where the
server frees what falls out of the window (vLLM), what the paged cache holds (the
batch). A window wider than every context changes nothing; past it, the saving grows
with the context. What a stream takes up of the cache follows the server's pools
(``simengine.kv.capacity_tokens``, sixteenth round): TensorRT-LLM sizes the window
layers' pool like the full layers', SGLang at 0.8 of it.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from simengine.errors import SimEngineError
from simengine.hardware import HARDWARE
from simengine.holdout import legacy_spec
from simengine.kv import capacity_tokens, window_pool
from simengine.spec import model_from_spec, predict_spec
from simengine.step import decode_step_line

# gpt-oss-120b as its model card and config.json describe it: 36 layers, alternating
# sliding (128 tokens) and full attention.
GPT_OSS = {
    "name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
    "head_dim": 64, "params_b": 117.0, "active_params_b": 5.1, "experts": 128,
    "experts_per_token": 4, "shared_experts": 0, "dtype": "mxfp4", "attention_dtype": "bf16",
    "kv_dtype": "fp8",
}  # fmt: skip
WINDOWED = {**GPT_OSS, "sliding_window": 128, "sliding_window_layers": 18}


def _spec(model, **over):
    spec = {"model": model, "hardware": "h200", "devices": 1, "tensor_parallel": 1,
            "concurrency": 4096, "input_tokens": 8192, "output_tokens": 1024,
            "server": "vllm", "software": "2026-02"}  # fmt: skip
    spec.update(over)
    return spec


def test_tokens_held_follow_the_window():
    full, win = model_from_spec(GPT_OSS), model_from_spec(WINDOWED)
    assert win.window_fraction == 0.5
    for c in (0.0, 50.0, 128.0):  # inside the window every layer holds every token
        assert win.kv_tokens(c) == c == full.kv_tokens(c)
    # Past it: half the layers hold c, half hold 128.
    assert win.kv_tokens(8192.0) == pytest.approx(0.5 * 8192 + 0.5 * 128)
    xs = np.array([10.0, 128.0, 1000.0, 8192.0])
    assert np.allclose(win.kv_tokens(xs), [win.kv_tokens(float(x)) for x in xs])
    assert full.kv_tokens(xs) is xs  # no window: the context itself


def test_the_step_line_is_exact_on_the_reference_side_of_the_window():
    win = model_from_spec(WINDOWED)
    for ref in (64.0, 5000.0):
        a, b = win.kv_line(ref)
        for c in (ref * 0.5 if ref < 128 else ref * 0.9, ref, ref * 1.1 if ref > 128 else 100.0):
            assert a + b * c == pytest.approx(win.kv_tokens(c))


def test_attended_pairs_are_the_sum_over_query_positions():
    win = model_from_spec(WINDOWED)
    full = model_from_spec(GPT_OSS)
    for new, cached in ((100, 0), (1000, 0), (300, 4000), (50, 100)):
        # Continuous sum: the integral of e(x) from cached to cached + new.
        xs = np.linspace(cached, cached + new, 200_001)
        integral = np.trapezoid(win.kv_tokens(xs), xs)
        assert win.attended_pairs(new, cached) == pytest.approx(integral, rel=1e-6)
        assert full.attended_pairs(new, cached) == pytest.approx(
            ((cached + new) ** 2 - cached**2) / 2
        )
    arr = win.attended_pairs(np.array([100.0, 1000.0]), np.array([0.0, 4000.0]))
    assert arr == pytest.approx([win.attended_pairs(100, 0), win.attended_pairs(1000, 4000)])


def test_a_window_wider_than_every_context_changes_nothing():
    wide = {**GPT_OSS, "sliding_window": 65536, "sliding_window_layers": 18}
    a, b = predict_spec(_spec(GPT_OSS)), predict_spec(_spec(wide))
    for key in ("throughput_tokens_per_second", "ttft_seconds", "batch"):
        assert a[key] == pytest.approx(b[key], rel=1e-12)


def test_a_kv_bound_batch_grows_and_the_gain_grows_with_the_context():
    gains, batch_gains = [], []
    for isl in (1024, 8192, 32768):  # no batch cap: what the cache holds binds
        full = predict_spec(_spec(GPT_OSS, input_tokens=isl, max_batch_size=65536))
        win = predict_spec(_spec(WINDOWED, input_tokens=isl, max_batch_size=65536))
        assert win["batch"] > full["batch"]  # the paged cache holds more streams
        batch_gains.append(win["batch"] / full["batch"])
        gains.append(win["throughput_tokens_per_second"] / full["throughput_tokens_per_second"])
    # The streams the window adds grow with the context. Throughput gains everywhere
    # and most at the longest context; between, the prompt's share of the cycle (which
    # the window barely shortens) can hold it back: under vLLM's 8,192-token budget
    # (2026) an 8,192-token prompt is one piece, and the gains are 1.24, 1.21 and 1.32.
    assert batch_gains[0] < batch_gains[1] < batch_gains[2]
    assert min(gains) > 1.0 and gains[2] == max(gains)


def test_a_decode_step_reads_and_attends_over_the_windowed_context():
    full, win = model_from_spec(GPT_OSS), model_from_spec(WINDOWED)
    hw = HARDWARE["h200"]
    kw = {"batch": 64, "other_context_tokens": 9000.0, "tensor_parallel": 1,
          "pipeline_stages": 1, "eta_mem": 0.8, "eta_flop": 0.5, "allreduce_base": 0.0,
          "activation_bytes": 2.0}  # fmt: skip
    lf, lw = decode_step_line(full, hw, **kw), decode_step_line(win, hw, **kw)
    assert lf.fixed == lw.fixed  # the weights' part does not depend on the cache
    # The KV read: 64 streams at 9,000 tokens hold half as much past the window.
    kv_full = lf.mem0 + lf.mem1 * 9000.0
    kv_win = lw.mem0 + lw.mem1 * 9000.0
    assert kv_win / kv_full == pytest.approx(win.kv_tokens(9000.0) / 9000.0)
    assert lw.flop1 == pytest.approx(lf.flop1 * 0.5)  # past the window, half the slope


def test_prefill_attention_grows_linearly_in_the_window_layers():
    win, full = model_from_spec(WINDOWED), model_from_spec(GPT_OSS)
    n = np.array([8192.0, 16384.0, 32768.0])
    ratio = win.attended_pairs(n, 0.0) / full.attended_pairs(n, 0.0)
    assert np.all(np.diff(ratio) < 0) and ratio[-1] == pytest.approx(0.5, abs=0.01)
    ttft = [predict_spec(_spec(m, concurrency=1, input_tokens=32768))["ttft_seconds"]
            for m in (GPT_OSS, WINDOWED)]  # fmt: skip
    assert ttft[1] < ttft[0]


@pytest.mark.parametrize(
    "model, message",
    [
        ({**GPT_OSS, "sliding_window": 128}, "needs model.sliding_window_layers"),
        ({**GPT_OSS, "sliding_window_layers": 18}, "needs model.sliding_window"),
        ({**GPT_OSS, "sliding_window": 128, "sliding_window_layers": 37}, "must be <="),
        ({**GPT_OSS, "sliding_window": -1, "sliding_window_layers": 18}, "integer >= 0"),
        ({**GPT_OSS, "sliding_window": 128, "sliding_window_layers": 0}, "integer >= 1"),
        ({**GPT_OSS, "sliding_window": True, "sliding_window_layers": 18}, "integer >= 0"),
        ({**GPT_OSS, "sliding_windows": 128}, "unknown field"),
    ],
)
def test_spec_errors(model, message):
    with pytest.raises(SimEngineError, match=message):
        model_from_spec(model)


def test_a_zero_token_window_is_a_layer_without_a_growing_cache():
    linear = model_from_spec({**GPT_OSS, "sliding_window": 0, "sliding_window_layers": 27})
    assert linear.kv_tokens(4000.0) == pytest.approx(4000.0 * 9 / 36)


def test_the_legacy_engine_never_sees_the_window():
    legacy, factor = legacy_spec(copy.deepcopy(_spec(WINDOWED)))
    assert "sliding_window" not in legacy["model"]
    assert "sliding_window_layers" not in legacy["model"]
    assert factor == 1.0


def test_each_server_sizes_the_window_layers_its_own_way():
    win, full = model_from_spec(WINDOWED), model_from_spec(GPT_OSS)
    assert window_pool("vllm") is None and window_pool(None) is None
    assert window_pool("tensorrt-llm") == 1.0 and window_pool("sglang") == 0.8
    for c in (64.0, 128.0, 8192.0):
        # A shared pool that frees out-of-window pages: what the stream holds.
        assert capacity_tokens(win, c, None) == win.kv_tokens(c)
        # TensorRT-LLM: every layer sized as full attention, the whole context.
        assert capacity_tokens(win, c, 1.0) == pytest.approx(c)
        # No window: the server's pools do not matter.
        assert capacity_tokens(full, c, 0.8) == c == capacity_tokens(full, c, 1.0)
    # SGLang: full layers c, the window pool 0.8 of theirs: (1 - f + 0.8 f) c past it,
    # and inside the window the smaller pool binds first: 0.9 c / 0.8.
    assert capacity_tokens(win, 8192.0, 0.8) == pytest.approx(0.9 * 8192.0)
    assert capacity_tokens(win, 100.0, 0.8) == pytest.approx(0.9 * 100.0 / 0.8)
    # Layers without attention (a 0-token window) hold nothing in any server.
    linear = model_from_spec({**GPT_OSS, "sliding_window": 0, "sliding_window_layers": 27})
    assert capacity_tokens(linear, 4000.0, 1.0) == linear.kv_tokens(4000.0)


def test_tensorrt_llm_holds_fewer_windowed_streams_but_reads_the_same_per_stream():
    over = {"input_tokens": 8192, "max_batch_size": 65536, "kv_admission": "paged"}
    by = {srv: predict_spec(_spec(WINDOWED, server=srv, **over))
          for srv in ("vllm", "sglang", "tensorrt-llm")}  # fmt: skip
    caps = [by[s]["batch_cap"] for s in ("vllm", "sglang", "tensorrt-llm")]
    assert caps[0] > caps[1] > caps[2]  # freed > 0.8 pool > sized like full layers
    # TensorRT-LLM holds as many windowed streams as the model without a window ...
    plain = predict_spec(_spec(GPT_OSS, server="tensorrt-llm", **over))
    assert by["tensorrt-llm"]["batch_cap"] == pytest.approx(plain["batch_cap"])
    # ... and its steps still read only the window: at that one batch it is faster.
    assert (by["tensorrt-llm"]["throughput_tokens_per_second"]
            > plain["throughput_tokens_per_second"])  # fmt: skip
    # At one stream the pools do not matter.
    one = [predict_spec(_spec(WINDOWED, server=s, concurrency=1))["time_per_output_token_seconds"]
           for s in ("vllm", "sglang", "tensorrt-llm")]  # fmt: skip
    assert one[0] == pytest.approx(one[1], rel=1e-12) == pytest.approx(one[2], rel=1e-12)


def test_a_finite_run_steps_at_the_windowed_context():
    # Seventeenth round: a finite run (offline_requests) times each interval's step from
    # per-batch coefficients; those scale with the tokens the streams attend over,
    # kv_tokens(c), not with c (the windowed layers read 128 of them). One wave of 64
    # requests (prompts prefilled elsewhere, fixed lengths) decodes at its midpoint's
    # context, 4096 + 2048: the same step the steady state reads there. Before the fix
    # the run read every layer's KV over the whole context, as if there were no window.
    spec = _spec(WINDOWED, server="tensorrt-llm", hardware="b200", max_batch_size=64,
                 input_tokens=4096, output_tokens=4096, disaggregated_prefill=True)  # fmt: skip
    steady = predict_spec({**spec, "concurrency": 64})
    run = predict_spec({k: v for k, v in spec.items() if k != "concurrency"}
                       | {"offline_requests": 64})  # fmt: skip
    assert run["batch"] == steady["batch"] == 64
    assert run["time_per_output_token_seconds"] == pytest.approx(
        steady["time_per_output_token_seconds"], rel=1e-9
    )
    no_window = predict_spec({**spec, "model": GPT_OSS, "concurrency": 64})
    assert run["time_per_output_token_seconds"] < no_window["time_per_output_token_seconds"]

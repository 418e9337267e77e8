"""Hardware of issue 28: B200 at 180 GB, GB200 NVL72, FP4 at twice FP8 on Blackwell."""

from __future__ import annotations

import pytest

from simengine import HARDWARE, SimEngineError
from simengine.moe import compute_peak
from simengine.spec import model_from_spec, parse_spec, predict_spec

MODEL = {
    "name": "m", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 8, "head_dim": 128,
    "params_b": 671, "active_params_b": 37, "experts": 256, "experts_per_token": 8,
    "shared_experts": 1,
}  # fmt: skip


def test_b200_is_the_180_gb_hgx_part_and_gb200_is_one_72_gpu_nvlink_domain():
    b200, gb = HARDWARE["b200"], HARDWARE["gb200-nvl72"]
    assert b200.memory_bytes == 180e9
    assert gb.memory_bytes == 186e9 and gb.memory_bandwidth == 8e12
    assert gb.max_tensor_parallel == 72 and b200.max_tensor_parallel == 8
    # NVLink 5's 1.8 TB/s is both directions: 900 GB/s each way (what the ring and
    # all-to-all formulas divide a GPU's sent bytes by); NVLink 4's 900 GB/s likewise.
    assert gb.link_bandwidth == b200.link_bandwidth == 0.9e12
    assert HARDWARE["h100"].link_bandwidth == HARDWARE["h200"].link_bandwidth == 0.45e12


def test_tp8_allreduce_on_hgx_h100_runs_at_nccl_bus_bandwidth():
    # A 256 MiB ring all-reduce over 8 H100s: nccl-tests report ~450 GB/s bus bandwidth
    # on HGX H100 (busbw = 2 (n - 1) / n x size / time), i.e. ~1.04 ms; the engine's time
    # without the launch and hop latencies is exactly that.
    from simengine.parallel import allreduce_seconds

    size = 256 * 2**20
    hw = HARDWARE["h100"]
    t = allreduce_seconds(hw, size, 8, 0.0) - 2 * 7 * hw.link_latency
    assert 2 * 7 / 8 * size / t == pytest.approx(450e9)


def test_fp4_runs_at_twice_fp8_on_blackwell_and_at_the_8_bit_rate_elsewhere():
    for key in ("b200", "gb200-nvl72"):
        hw = HARDWARE[key]
        assert hw.peak_flops(0.5) == pytest.approx(2 * hw.peak_flops(1.0))
    for key in ("h100", "h200", "wse-3"):
        hw = HARDWARE[key]
        assert hw.peak_flops(0.5) == hw.peak_flops(1.0)


def test_mixed_precision_compute_peak_weighs_each_component_by_its_flops():
    hw = HARDWARE["b200"]
    bf16 = model_from_spec(MODEL)
    fp4_experts = model_from_spec({**MODEL, "expert_dtype": "fp4"})
    assert compute_peak(bf16, hw) == hw.peak_flops_16bit
    peak = compute_peak(fp4_experts, hw)
    assert hw.peak_flops_16bit < peak < hw.peak_flops_4bit
    n, e = fp4_experts.active_split
    assert peak == pytest.approx((n + e) / (n / hw.peak_flops_16bit + e / hw.peak_flops_4bit))


def test_fp4_experts_are_faster_than_bf16_experts_on_gb200():
    def tpot(**dtypes):
        return predict_spec({
            "model": {**MODEL, **dtypes}, "hardware": "gb200-nvl72", "devices": 16,
            "concurrency": 32, "input_tokens": 2000, "output_tokens": 500,
        })["time_per_output_token_seconds"]  # fmt: skip

    assert tpot(expert_dtype="fp4") < tpot(expert_dtype="fp8") < tpot()


def test_gb200_allows_tensor_parallel_up_to_72():
    spec = {"model": MODEL, "hardware": "gb200-nvl72", "devices": 72, "tensor_parallel": 72}
    assert parse_spec(spec)[1].nodes_per_replica == 72
    with pytest.raises(SimEngineError, match="tensor_parallel must be <= 8"):
        parse_spec({**spec, "hardware": "b200"})

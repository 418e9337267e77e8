"""Software eras by date (issue 28): ``software`` may be a date "YYYY-MM[-DD]" that
selects the calibrated era in effect at that date, on GPUs and wafers alike.

Eras are compared as dates, not strings: "2026-08" sorts before "2026.08" as a
string, which would resolve a figure of the newest era to the older (faster) fit."""

from __future__ import annotations

import pytest

from simengine import DEFAULT_PARAMS, SimEngineError
from simengine.eras import software_era
from simengine.spec import predict_spec

LLAMA_70B = {
    "name": "llama-3.1-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
    "head_dim": 128, "params_b": 70.6, "dtype": "bf16",
}  # fmt: skip
WAFER = {"model": LLAMA_70B, "hardware": "cs-3", "concurrency": 1, "input_tokens": 1000,
         "output_tokens": 1000, "speculative": True}  # fmt: skip
GPU = {"model": {**LLAMA_70B, "dtype": "fp8"}, "hardware": "h100", "devices": 2,
       "tensor_parallel": 2, "input_tokens": 1000, "output_tokens": 500}  # fmt: skip


def _wafer_eras() -> list[str]:
    return sorted(
        {k.split("@")[1].split(":")[0] for k in DEFAULT_PARAMS.values if k.startswith("wse-3@")}
    )


@pytest.mark.parametrize(
    ("date", "era"),
    [
        ("2024-08-27", "2024.08"),
        ("2024-09", "2024.08"),
        ("2024-10", "2024.10"),  # as a string "2024-10" < "2024.10": must not pick 2024.08
        ("2024-10-24", "2024.10"),
        ("2025-06-15", "2024.10"),  # between two eras: the one in effect
        ("2026-08", "2026.08"),  # as a string "2026-08" < "2026.08": must not pick 2024.10
        ("2026-11-30", "2026.08"),
    ],
)
def test_wafer_date_selects_the_era_in_effect(date, era):
    assert _wafer_eras() == ["2024.08", "2024.10", "2026.08"]
    version, note = software_era(DEFAULT_PARAMS, "wse-3", date)
    assert version == era and date in note
    dated, named = (
        predict_spec({**WAFER, "software": date}),
        predict_spec({**WAFER, "software": era}),
    )
    assert dated["software"] == era and dated["software_era"] == note
    assert dated["tokens_per_second"] == named["tokens_per_second"]


def test_a_date_in_the_newest_era_uses_its_fit_not_an_older_faster_one():
    newest = predict_spec({**WAFER, "software": "2026-08-15"})
    older = predict_spec({**WAFER, "software": "2024.10"})
    assert newest["software"] == "2026.08"
    assert newest["tokens_per_second"] != older["tokens_per_second"]


def test_wafer_date_before_every_era_resolves_to_the_earliest_and_says_so():
    r = predict_spec({**WAFER, "software": "2023-05"})
    assert r["software"] == "2024.08"
    assert "earliest" in r["software_era"] and "predates" in r["software_era"]


def test_gpu_dates_select_one_of_two_software_eras_and_say_so():
    # Two GPU software eras since issue 28's seventh round: 2025.04 (the serving software
    # of 2025) and 2026.02 (TensorRT-LLM 1.2+, vLLM 0.14+): an older date resolves to the
    # earliest with a note, a date between them to the one in effect.
    assert software_era(DEFAULT_PARAMS, "h100", None)[0] == "2026.02"
    old = predict_spec({**GPU, "software": "2024-06"})
    assert old["software"] == "2025.04" and "predates" in old["software_era"]
    mid = predict_spec({**GPU, "software": "2025-11-30"})
    assert mid["software"] == "2025.04" and "in effect at 2025-11-30" in mid["software_era"]
    new = predict_spec({**GPU, "software": "2026-10-01"})
    assert new["software"] == "2026.02" and "in effect at 2026-10-01" in new["software_era"]
    assert new["tokens_per_second"] == predict_spec(GPU)["tokens_per_second"]


DEEPSEEK = {"name": "deepseek-r1", "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128,
            "head_dim": 128, "params_b": 671.0, "active_params_b": 37.0, "experts": 256,
            "experts_per_token": 8, "shared_experts": 1, "kv_bytes_per_token": 35136,
            "dtype": "nvfp4", "kv_dtype": "fp8"}  # fmt: skip
DEP8 = {"model": DEEPSEEK, "hardware": "b200", "devices": 8, "tensor_parallel": 8,
        "expert_parallel": 8, "attention_data_parallel": True, "concurrency": 4096,
        "max_batch_size": 512, "input_tokens": 800, "output_tokens": 4000}  # fmt: skip


def test_the_era_moves_decode_attention_where_it_binds_and_nothing_else():
    # Blackwell's decode-attention efficiency differs by era; the GEMMs' does not.
    p = DEFAULT_PARAMS
    early = p.get("blackwell@2025.04:eta_decode_attention")
    late = p.get("blackwell@2026.02:eta_decode_attention")
    assert early < late
    # DeepSeek-R1 at full batch: latent attention over thousands of tokens binds on
    # compute, so the 2026 software runs it faster than the 2025 software.
    r25 = predict_spec({**DEP8, "software": "2025-09"})
    r26 = predict_spec({**DEP8, "software": "2026-02"})
    assert r26["throughput_tokens_per_second"] > 1.2 * r25["throughput_tokens_per_second"]
    # A dense model's decode attention is bound by reading the KV cache, not by math:
    # both eras give the same step.
    dense = {**GPU, "concurrency": 64}
    same = [predict_spec({**dense, "software": d})["throughput_tokens_per_second"]
            for d in ("2025-09", "2026-02")]  # fmt: skip
    assert same[0] == same[1]
    # Hopper has no decode-attention efficiency of its own: its GEMMs' holds in both eras.
    h200 = {**DEP8, "hardware": "h200", "model": {**DEEPSEEK, "dtype": "fp8"}}
    hop = [predict_spec({**h200, "software": d})["throughput_tokens_per_second"]
           for d in ("2025-09", "2026-02")]  # fmt: skip
    assert hop[0] == hop[1]


def test_versions_still_resolve_as_before():
    # A version the parameters do not name uses the latest era not newer than it.
    assert software_era(DEFAULT_PARAMS, "wse-3", "2024.11")[0] == "2024.10"
    assert software_era(DEFAULT_PARAMS, "wse-3", "2024.10")[0] == "2024.10"
    assert software_era(DEFAULT_PARAMS, "wse-3", None)[0] == "2026.08"


@pytest.mark.parametrize(("software", "message"), [("2025-13", "no month 13"), ("v1", "v1")])
def test_bad_software_is_an_error(software, message):
    with pytest.raises(SimEngineError, match=message):
        predict_spec({**WAFER, "software": software})

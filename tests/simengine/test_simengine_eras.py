"""Software eras by date (issue 28): ``software`` may be a date "YYYY-MM[-DD]" that
selects the calibrated era in effect at that date, on GPUs and wafers alike.

Eras are compared as dates, not strings: "2026-08" sorts before "2026.08" as a
string, which would resolve a figure of the newest era to the older (faster) fit."""

from __future__ import annotations

import pytest

from simengine import DEFAULT_PARAMS, SimEngineError
from simengine.perf import software_era
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


def test_gpu_date_selects_the_only_calibrated_era_and_says_so():
    # The calibration has no GPU figure from an earlier software era, so there is no
    # earlier GPU fit: an older date resolves to the only one, with a note.
    old = predict_spec({**GPU, "software": "2024-06"})
    assert old["software"] == "2026.08" and "predates" in old["software_era"]
    new = predict_spec({**GPU, "software": "2026-10-01"})
    assert new["software"] == "2026.08" and "in effect at 2026-10-01" in new["software_era"]
    assert new["tokens_per_second"] == predict_spec(GPU)["tokens_per_second"]


def test_versions_still_resolve_as_before():
    # A version the parameters do not name uses the latest era not newer than it.
    assert software_era(DEFAULT_PARAMS, "wse-3", "2024.11")[0] == "2024.10"
    assert software_era(DEFAULT_PARAMS, "wse-3", "2024.10")[0] == "2024.10"
    assert software_era(DEFAULT_PARAMS, "wse-3", None)[0] == "2026.08"


@pytest.mark.parametrize(("software", "message"), [("2025-13", "no month 13"), ("v1", "v1")])
def test_bad_software_is_an_error(software, message):
    with pytest.raises(SimEngineError, match=message):
        predict_spec({**WAFER, "software": software})

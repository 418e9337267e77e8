"""Hold-out figures: public measurements never used in the fit, and the model's skill on them."""

from __future__ import annotations

import inspect

import pytest

import simengine.calibration as calibration
from simengine.calibration import default_targets
from simengine.holdout import MAX_LIMIT, MEDIAN_LIMIT, evaluate_holdout, load_holdout
from simengine.report import holdout_table


@pytest.fixture(scope="module")
def holdout():
    return evaluate_holdout()


def test_holdout_has_at_least_12_dated_sourced_figures_across_gpus_and_wafers():
    figures = load_holdout()
    assert len(figures) >= 12
    assert len({f["id"] for f in figures}) == len(figures)
    for f in figures:
        assert f["url"].startswith("https://") and f["source"] and f["date"], f["id"]
    gpu = [f for f in figures if f["spec"]["hardware"] != "cs-3"]
    wafer = [f for f in figures if f["spec"]["hardware"] == "cs-3"]
    assert len(wafer) >= 3 and len(gpu) >= 6
    # GPU: time per token and throughput at several concurrencies, TTFT at two prompts.
    for metric in ("time_per_output_token_seconds", "throughput_tokens_per_second"):
        assert len({f["spec"]["concurrency"] for f in gpu if f["metric"] == metric}) >= 3
    ttft_prompts = {f["spec"]["input_tokens"] for f in gpu if f["metric"] == "ttft_seconds"}
    assert len(ttft_prompts) >= 2
    assert {f["spec"]["model"]["name"] for f in wafer if f["metric"] == "tokens_per_second"}


def test_no_holdout_figure_is_a_fit_target():
    # The fit never reads the hold-out file, and none of its targets is a hold-out value.
    fit_source = inspect.getsource(calibration._Problem) + inspect.getsource(
        calibration.default_targets
    )
    assert "holdout" not in fit_source
    # (Llama 3.3 70B is a GPU hold-out figure and a wafer fit point: different hardware.)
    holdout_models = {
        f["spec"]["model"]["name"] for f in load_holdout() if f["spec"]["hardware"] == "cs-3"
    }
    fit_models = {w["model"]["name"] for w in calibration.WAFER_ERA_POINTS}
    assert not holdout_models & fit_models
    holdout_ids = {f["id"] for f in load_holdout()}
    assert not holdout_ids & {t.name for t in default_targets()}


def test_holdout_table_lists_figure_source_model_and_error(holdout):
    text = holdout_table(holdout)
    for row in holdout.rows:
        assert row.id in text and row.model in text
    assert "median |error|" in text and "published" in text and "predicted" in text


def test_holdout_error_median_at_most_15_percent_none_above_30(holdout):
    worst = sorted(holdout.rows, key=lambda r: -abs(r.error))[:3]
    assert holdout.median_abs_error <= MEDIAN_LIMIT, worst
    assert holdout.max_abs_error <= MAX_LIMIT, worst

"""`manage.py simulate` and `manage.py calibrate`: the engine through the catalog."""

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def simulate(*args) -> dict:
    out = StringIO()
    call_command("simulate", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_simulate_prints_the_prediction_as_json(builtin_catalog):
    r = simulate("--model", "gpt-5.6-sol", "--tier", "ultrafast", "--output-tokens", "7500")
    for key in (
        "tokens_per_second",
        "ttft_seconds",
        "generation_seconds",
        "tool_seconds",
        "queue_seconds",
        "total_seconds",
        "wafers",
    ):
        assert key in r
    assert r["wafers"] >= 2  # the flagship needs a pipeline of wafers
    assert r["total_seconds"] == pytest.approx(
        r["queue_seconds"] + r["transport_seconds"] + r["generation_seconds"] + r["tool_seconds"]
    )


def test_simulate_off_wafer_reports_no_wafers_and_a_family_alias_works(builtin_catalog):
    r = simulate("--model", "sol", "--tier", "standard")
    assert r["model"] == "gpt-5.6-sol" and r["wafers"] is None and r["device"] == "h200"


def test_simulate_ultrafast_beats_standard_on_the_gdpval_shape(builtin_catalog):
    shape = [
        "--input-tokens",
        "8000",
        "--output-tokens",
        "22000",
        "--turns",
        "30",
        "--tool-seconds",
        "15",
        "--tool-result-tokens",
        "30000",
    ]
    std = simulate("--model", "sol", "--tier", "standard", *shape)
    fast = simulate("--model", "sol", "--tier", "ultrafast", *shape)
    assert 5.0 < std["total_seconds"] / fast["total_seconds"] < 6.2


def test_simulate_load_adds_a_queue_and_load_1_is_refused(builtin_catalog):
    calm = simulate("--model", "gpt-5.3-codex-spark", "--tier", "standard", "--load", "0.3")
    busy = simulate("--model", "gpt-5.3-codex-spark", "--tier", "standard", "--load", "0.95")
    assert busy["queue_seconds"] > calm["queue_seconds"]
    with pytest.raises(CommandError, match=r"load 1.0 is outside \[0, 1\)"):
        simulate("--model", "gpt-5.3-codex-spark", "--load", "1.0")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-9"], "Unknown model 'gpt-9'. Known models: "),
        (["--model", "gpt-5.6-sol", "--tier", "turbo"], "has no 'turbo' tier. Its tiers: flex"),
        (["--model", "gpt-5.3-codex-spark", "--tier", "ultrafast"], "Its tiers: standard"),
        (["--model", "gpt-5.3-codex-spark", "--input-tokens", "200000"], "context window"),
        (["--model", "sol", "--output-tokens", "0"], "output_tokens must be >= 1"),
        (["--model", "sol", "--input-tokens", "9" * 12], "above the 50000000 sanity limit"),
    ],
)
def test_simulate_bad_input_is_a_clear_error(builtin_catalog, args, message):
    with pytest.raises(CommandError, match=message):
        simulate(*args)


def test_simulate_model_too_large_for_its_pool(builtin_catalog):
    from catalog.models import HardwarePool

    HardwarePool.objects.filter(slug="cs3-ultrafast").update(nodes=4)  # Sol needs more
    with pytest.raises(CommandError, match="needs 16 wse-3 per replica but the pool has only 4"):
        simulate("--model", "gpt-5.6-sol", "--tier", "ultrafast")


def test_simulate_negative_tokens_from_the_shell_prints_no_traceback(builtin_catalog):
    out = subprocess.run(
        [sys.executable, "manage.py", "simulate", "--model", "sol", "--input-tokens", "-5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr and "-5 is negative" not in out.stdout
    assert "--input-tokens" in out.stderr


def test_simulate_writes_a_tier_chart(builtin_catalog, tmp_path):
    png = tmp_path / "tiers.png"
    call_command(
        "simulate", "--model", "sol", "--plot", str(png), stdout=StringIO(), stderr=StringIO()
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_simulate_plot_shows_the_chosen_model_and_states_the_task(
    builtin_catalog, tmp_path, monkeypatch
):
    from catalog.management.commands import simulate as simulate_command

    seen = {}

    def fake_plot(path, rows, *, title=None):
        seen.update(rows=rows, title=title)
        return path

    monkeypatch.setattr(simulate_command, "plot_tiers", fake_plot)
    err = StringIO()
    args = ["--model", "sol", "--turns", "30", "--output-tokens", "22000", "--tool-seconds", "15"]
    call_command("simulate", *args, "--plot", "x.png", stdout=StringIO(), stderr=err)
    assert {r["model"] for r in seen["rows"]} == {"gpt-5.6-sol"}
    assert len(seen["rows"]) >= 2  # every tier of the model
    task = "2,000 input / 22,000 output tokens, 30 turns, 15 s of tools"
    assert seen["title"].startswith("gpt-5.6-sol: " + task)
    assert task in err.getvalue() and "x.png" in err.getvalue()
    call_command(
        "simulate",
        *args,
        "--plot",
        "x.png",
        "--plot-all-models",
        stdout=StringIO(),
        stderr=StringIO(),
    )
    assert len({r["model"] for r in seen["rows"]}) > 1
    assert seen["title"].startswith("Serving models: ")
    with pytest.raises(CommandError, match="needs --plot"):
        call_command("simulate", "--model", "sol", "--plot-all-models", stdout=StringIO())


def test_calibrate_prints_every_target_within_tolerance(builtin_catalog):
    out = StringIO()
    call_command("calibrate", stdout=out)
    text = out.getvalue()
    for target in (
        "sol_ultrafast_tokens_per_s",
        "gdpval_standard_total_s",
        "spark_tokens_per_s",
        "llama70b_launch_tokens_per_s",
        "h200_70b_bf16_ceiling",
    ):
        assert target in text
    fit, _, holdout = text.partition("hold-out figures (never used in the fit)")
    assert "FAIL" not in fit and "all targets PASS" in fit
    # The finite runs' completion times beside their logs, before the hold-out.
    assert "completion times, engine against the run's log" in fit
    # Then the hold-out table: figure, model, predicted, published, error, source.
    assert "nim-l33-70b-tpot-c1" in holdout and "cerebras-l31-405b-speed" in holdout
    assert "median |error|" in holdout


def test_calibrate_json_has_residuals_for_every_row(builtin_catalog):
    out = StringIO()
    call_command("calibrate", "--check", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["rows"] and all(row["passed"] for row in data["rows"])
    assert all("residual" in row for row in data["rows"])
    assert len(data["holdout"]["rows"]) >= 12
    shapes = data["run_shapes"]
    assert {r["quantile"] for r in shapes} == {"p50", "p90", "p99", "max"}
    assert all(r["ratio"] == r["logged"] / r["predicted"] for r in shapes)


def test_calibrate_without_catalog_says_what_to_do(db):
    with pytest.raises(CommandError, match="loadcatalog"):
        call_command("calibrate", stdout=StringIO())

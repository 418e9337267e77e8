"""`manage.py replay` on a generated trace (bursts, not the shipped trace's pattern):
the JSON the issue specifies, determinism, the promise's calibration, refusals under
overload, the cost floor, the chart. Each run makes, migrates and drops a database of
its own (SQLite or PostgreSQL, as DATABASE_URL says)."""

from __future__ import annotations

import os
import tempfile

import pytest
from django.core.management.base import CommandError
from django.db import connection

from routing.replay.run import replay_run
from routing.replay.trace import read_trace
from routing.replay.world import DEFAULT_START

POLICY_KEYS = {
    "accepted",
    "refused",
    "attainment",
    "promise_calibration",
    "cost",
    "late_p50_seconds",
    "late_p99_seconds",
    "tier_mix",
}
SWEEP = ("--limit", 60, "--load", "0.3,0.9", "--seed", 3, "--json")


@pytest.fixture(scope="module")
def sweep(burst_trace, django_db_blocker, tmp_path_factory):
    """One sweep of every policy at two loads, with its chart."""
    import io
    import json

    from django.core.management import call_command

    png = tmp_path_factory.mktemp("plot") / "replay.png"
    out = io.StringIO()
    with django_db_blocker.unblock():
        call_command(
            "replay", "--trace", str(burst_trace), *map(str, SWEEP), "--plot", str(png),
            "--quiet", stdout=out,
        )  # fmt: skip
    return json.loads(out.getvalue()), png


def test_a_sweep_prints_one_object_per_load_in_the_issues_shape(sweep):
    reports, _ = sweep
    assert isinstance(reports, list) and [r["load"] for r in reports] == [0.3, 0.9]
    for rep in reports:
        assert set(rep) == {"requests", "load", "policies", "cost_floor", "pools"}
        assert rep["requests"] == 60
        assert list(rep["policies"]) == ["router", "standard", "priority", "ultrafast", "cheapest"]
        assert set(rep["pools"]) == {"h200-main", "cs3-ultrafast"}
        assert all(u >= 0 for u in rep["pools"].values())
        for name, p in rep["policies"].items():
            assert set(p) == POLICY_KEYS, name
            assert p["accepted"] + p["refused"] == 60
            for share in ("attainment", "promise_calibration"):
                assert 0.0 <= p[share] <= 1.0
            assert sum(p["tier_mix"].values()) == pytest.approx(1.0)
            assert 0 <= p["late_p50_seconds"] <= p["late_p99_seconds"]
        for fixed in ("standard", "priority", "ultrafast"):
            assert rep["policies"][fixed]["tier_mix"] == {fixed: 1.0}
            assert rep["policies"][fixed]["refused"] == 0  # fixed policies take everything
    # more load, more of the pool in use
    assert reports[1]["pools"]["h200-main"] > reports[0]["pools"]["h200-main"]


def test_the_cost_floor_is_below_every_policy_that_meets_every_deadline(sweep):
    reports, _ = sweep
    qualifying = 0
    for rep in reports:
        for name, p in rep["policies"].items():
            if p["refused"] == 0 and p["attainment"] == 1.0:
                qualifying += 1
                assert p["cost"] >= rep["cost_floor"], name
        # `cheapest` buys exactly the floor's tiers (prices do not depend on load)
        assert rep["policies"]["cheapest"]["cost"] == pytest.approx(rep["cost_floor"], abs=1e-4)
        assert rep["policies"]["priority"]["cost"] > rep["policies"]["standard"]["cost"]
    assert qualifying >= 2  # the check above checked something


def test_the_chart_is_written(sweep):
    _, png = sweep
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_the_same_seed_gives_the_same_json(sweep, burst_trace, replay_cmd):
    reports, _ = sweep
    again = replay_cmd("--trace", burst_trace, *SWEEP, "--policies", "router")
    for rep, rep_again in zip(reports, again, strict=True):
        assert rep_again["policies"]["router"] == rep["policies"]["router"]
        assert rep_again["cost_floor"] == rep["cost_floor"]
        assert rep_again["pools"] == rep["pools"]  # measured under the router
    other = replay_cmd(
        "--trace", burst_trace, "--limit", 60, "--load", "0.9", "--seed", 4, "--json",
        "--policies", "router",
    )  # fmt: skip
    assert other["policies"]["router"] != reports[1]["policies"]["router"]  # the seed counts


def test_about_nine_in_ten_jobs_finish_within_their_promised_p90(burst_trace, replay_cmd):
    rep = replay_cmd(
        "--trace", burst_trace, "--limit", 120, "--load", "0.7", "--seed", 2, "--json",
        "--policies", "router",
    )  # fmt: skip
    router = rep["policies"]["router"]
    assert router["accepted"] == 120
    # 120 seeded draws of a P90: 0.9 +- 2.5 standard deviations (0.027)
    assert 0.83 <= router["promise_calibration"] <= 0.97
    assert router["attainment"] >= 0.95


def test_under_overload_the_router_refuses_up_front_and_says_why(
    burst_trace, django_db_blocker, settings
):
    """Tight deadlines (1.2x Standard's unloaded time) at three times the capacity of a
    pool of one replica (Terra: all its tiers on that pool): the router refuses what no
    tier can meet at its P90 (counted, outcome `deadline`), and what it accepts meets its
    deadline; always-Standard accepts all and misses."""
    requests = read_trace(burst_trace, limit=80)
    with django_db_blocker.unblock():
        (rep,) = replay_run(
            requests,
            model="gpt-5.6-terra",
            loads=[3.0],
            seed=1,
            slack=1.2,
            policies="router,standard",
            pool_scale=1 / 4096,  # one replica
            start=DEFAULT_START,
        )
    router, standard = rep["policies"]["router"], rep["policies"]["standard"]
    assert router["refused"] > 0
    assert router["_extra"]["refused_by"] == {"deadline": router["refused"]}
    assert router["accepted"] + router["refused"] == 80
    assert router["attainment"] >= 0.9
    assert standard["refused"] == 0
    assert standard["attainment"] < router["attainment"]


def test_the_throwaway_database_is_gone_after_a_run_or_a_failure(
    burst_trace, replay_cmd, monkeypatch, tmp_path, django_db_blocker
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # SQLite's temp folder
    with pytest.raises(CommandError, match="unknown model 'nope'"):
        replay_cmd("--trace", burst_trace, "--limit", 5, "--model", "nope")
    table = replay_cmd("--trace", burst_trace, "--limit", 5, "--policies", "router")
    assert "| router | " in table and "*floor*" in table
    assert not list(tmp_path.glob("replay-*"))
    if connection.vendor == "postgresql":
        # the server's own database: the configured one may not exist here
        with django_db_blocker.unblock(), connection._nodb_cursor() as cur:
            cur.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                [f"replay_{os.getpid()}_%"],
            )
            assert cur.fetchall() == []


@pytest.mark.parametrize(
    "args, message",
    [
        (("--load", "0"), "positive"),
        (("--load", "0.5", "--rate", "2"), "not both"),
        (("--policies", "router,fastest"), "unknown policy 'fastest'"),
        (("--limit", "0"), "at least 1"),
        (("--pool-scale", "2"), "at most 1"),
    ],
)
def test_bad_options_are_refused_with_a_message(burst_trace, replay_cmd, args, message):
    with pytest.raises(CommandError, match=message):
        replay_cmd("--trace", burst_trace, *args)


def test_a_bad_trace_is_refused_with_its_line(tmp_path, replay_cmd):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00,12,x\n")
    with pytest.raises(CommandError, match="line 2: GeneratedTokens"):
        replay_cmd("--trace", bad)

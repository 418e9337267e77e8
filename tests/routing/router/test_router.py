"""The router as a pure function: candidates, choice and reasons."""

import datetime as dt
from decimal import Decimal

import pytest

import simengine
from routing.quota import PackageView
from routing.router.route import (
    Benchmark,
    ModelOption,
    RouteRequest,
    TierOption,
    route,
    success_rate,
)
from tests.helpers import tier_option

NOW = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)
SPECS = simengine.load_catalog_models("catalog/data/catalog.toml")


tier = tier_option


def sol(**kw) -> ModelOption:
    return ModelOption(
        id=1,
        slug="gpt-5.6-sol",
        family_id=1,
        spec=SPECS["gpt-5.6-sol"],
        context_window=400_000,
        tiers=(
            tier("flex", 0, 1, "h200", 4096, "2.5", "20"),
            tier("standard", 1, 1, "h200", 4096, "5", "40"),
            tier("priority", 2, 1, "h200", 4096, "10", "80"),
            tier("ultrafast", 3, 2, "wse-3", 64, "30", "240"),
        ),
        **kw,
    )


def package(remaining="1000", **kw) -> PackageView:
    base = dict(
        id=1,
        name="main",
        scope="all",
        family_id=None,
        model_ids=frozenset(),
        tier_ids=frozenset(),
        remaining=Decimal(remaining),
        order=10,
        independent=False,
        valid_from=None,
        valid_until=None,
        next_reset_at=dt.datetime(2027, 1, 1, tzinfo=dt.UTC),
    )
    base.update(kw)
    return PackageView(**base)


GDP = dict(input_tokens=8000, output_tokens=22000, turns=30, tool_seconds=15)


def decide(deadline, models=None, packages=None, loads=None, **kw):
    req = RouteRequest(deadline_seconds=deadline, **(GDP | kw))
    return route(
        req,
        models=models or [sol()],
        packages=[package()] if packages is None else packages,
        loads=loads or {},
        now=NOW,
    )


def by_tier(decision):
    return {c.tier: c for c in decision.candidates}


@pytest.mark.parametrize(
    ("deadline", "tier"), [(3600, "flex"), (600, "standard"), (300, "priority"), (120, "ultrafast")]
)
def test_the_cheapest_tier_that_meets_the_deadline(deadline, tier):
    d = decide(deadline)
    assert d.outcome == "ok" and d.chosen.tier == tier
    others = [c for c in d.candidates if c.eligible and not c.chosen]
    assert all(c.cost > d.chosen.cost for c in others)


def test_every_candidate_has_a_prediction_a_cost_and_a_reason():
    d = decide(300)
    c = by_tier(d)
    assert "misses the deadline" in c["standard"].reason
    assert c["priority"].chosen and c["priority"].reason.startswith("chosen")
    assert "costs more" in c["ultrafast"].reason
    assert all(x.prediction and x.cost > 0 and x.reason for x in d.candidates)
    assert c["priority"].package.name == "main"


def test_ties_on_cost_go_to_the_faster_tier():
    m = sol()
    same = tuple(
        TierOption(**{**t.__dict__, "price_input": Decimal(5), "price_output": Decimal(40)})
        for t in m.tiers
    )
    d = decide(3600, models=[ModelOption(**{**m.__dict__, "tiers": same})])
    assert d.chosen.tier == "ultrafast"


def test_no_tier_meets_an_impossible_deadline_and_the_fastest_is_named():
    d = decide(60)
    assert d.outcome == "deadline" and d.chosen is None
    # Its typical run is 75-92 s; the candidate's total is the P90 promised (the run's
    # spread on top: simengine.spread), so a little more.
    run = d.fastest.prediction["run_seconds"]
    assert d.fastest.tier == "ultrafast" and 75 < run < 92
    assert run < d.fastest.total_seconds < run * 1.2


def test_a_forced_tier_is_the_only_candidate():
    d = decide(3600, tier="priority")
    assert d.chosen.tier == "priority"
    assert "not requested" in by_tier(d)["flex"].reason


def test_max_cost_is_a_hard_filter():
    d = decide(120, max_cost=Decimal("1.00"))
    assert d.outcome == "max_cost" and d.fastest.tier == "ultrafast"
    d = decide(3600, max_cost=Decimal("0.30"))
    assert d.outcome == "max_cost"
    d = decide(3600, max_cost=Decimal("0.50"))
    assert d.chosen.tier == "flex"


def test_a_full_pool_pushes_the_choice_to_a_faster_tier():
    calm = decide(600)
    assert calm.chosen.tier == "standard"
    busy = decide(600, loads={1: 1.0})  # the GPU pool is saturated
    assert busy.chosen.tier == "ultrafast"
    assert "saturated" in by_tier(busy)["standard"].reason


def test_the_queue_grows_with_load():
    waits = [
        by_tier(decide(3600, loads={1: rho}))["standard"].prediction["queue_seconds"]
        for rho in (0.5, 0.999, 0.99999)
    ]
    assert waits[0] <= waits[1] < waits[2]


def test_not_enough_quota_is_its_own_outcome_with_the_next_reset():
    d = decide(3600, packages=[package(remaining="0.10")])
    assert d.outcome == "quota" and d.next_reset_at == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    assert "not enough credits" in by_tier(d)["flex"].reason


def test_quota_picks_the_tier_a_package_can_pay():
    # 0.5 credits pays flex (0.46) but not standard (0.92): with a loose deadline flex wins,
    # with a 600 s deadline nothing can pay on time.
    assert decide(3600, packages=[package(remaining="0.5")]).chosen.tier == "flex"
    assert decide(600, packages=[package(remaining="0.5")]).outcome == "quota"


def test_a_task_over_the_context_window():
    d = decide(3600, input_tokens=390_000, output_tokens=20_000, turns=1, tool_seconds=0)
    assert d.outcome == "context"


def test_a_deployment_not_yet_available_is_skipped():
    m = sol()
    later = tuple(
        TierOption(**{**t.__dict__, "available_from": dt.date(2027, 1, 1)})
        if t.tier == "ultrafast"
        else t
        for t in m.tiers
    )
    d = decide(120, models=[ModelOption(**{**m.__dict__, "tiers": later})])
    assert d.outcome == "deadline"
    assert "not available before 2027-01-01" in by_tier(d)["ultrafast"].reason


# --- Quality-aware choice (model "auto") ---------------------------------------------

SWE = "SWE-Bench Pro"


def coder(id, slug, spec, tiers, benchmarks):
    return ModelOption(
        id=id,
        slug=slug,
        family_id=id,
        spec=SPECS[spec],
        context_window=128_000,
        tiers=tiers,
        benchmarks=tuple(Benchmark(n, s, d) for n, s, d in benchmarks),
    )


def codex_and_spark():
    codex = coder(
        10,
        "gpt-5.3-codex",
        "gpt-5.3-codex",
        (tier("standard", 1, 3, "h100", 2048, "1.75", "14"),),
        [(SWE, 51, 3), (SWE, 56, 9), (SWE, 57, 16), ("Terminal-Bench 2.0", 77.3, None)],
    )
    spark = coder(
        11,
        "gpt-5.3-codex-spark",
        "gpt-5.3-codex-spark",
        (tier("standard", 1, 4, "wse-3", 8, "1.75", "14"),),
        [(SWE, 47, 1), (SWE, 51, 2), ("Terminal-Bench 2.0", 58.4, None)],
    )
    return codex, spark


def auto(deadline, task):
    req = RouteRequest(
        input_tokens=20_000,
        output_tokens=4000,
        turns=4,
        tool_seconds=20,
        deadline_seconds=deadline,
        task=task,
    )
    return route(
        req, models=list(codex_and_spark()), packages=[package()], loads={}, now=NOW, quality=True
    )


def test_success_rate_reads_the_curve_up_to_the_deadline():
    codex, spark = codex_and_spark()
    assert success_rate(codex, "swe-bench-pro", 2 * 60) is None
    assert success_rate(codex, "swe-bench-pro", 10 * 60) == pytest.approx(0.56)
    assert success_rate(spark, "SWE-Bench Pro", 60 * 60) == pytest.approx(0.51)


def test_auto_prefers_the_more_accurate_model_although_spark_streams_faster():
    d = auto(30 * 60, "swe-bench-pro")
    by_model = {c.model: c for c in d.candidates}
    assert by_model["gpt-5.3-codex-spark"].total_seconds < by_model["gpt-5.3-codex"].total_seconds
    assert d.chosen.model == "gpt-5.3-codex"  # 57 % vs 51 %: cheaper per correct result
    assert by_model["gpt-5.3-codex"].expected_cost < by_model["gpt-5.3-codex-spark"].expected_cost


def test_auto_on_terminal_bench_picks_codex_for_its_accuracy():
    assert auto(3600, "terminal-bench-2.0").chosen.model == "gpt-5.3-codex"


def test_auto_with_a_short_deadline_takes_what_can_answer_in_time():
    # Within 2 minutes only Spark has a published result: it is the only option.
    d = auto(150, "swe-bench-pro")
    assert d.chosen.model == "gpt-5.3-codex-spark"
    codex = next(c for c in d.candidates if c.model == "gpt-5.3-codex")
    assert "no published" in codex.reason


def test_equal_requests_share_one_checked_task_profile():
    # RouteRequest.task_profile interns the task (the engine's memos then find it by
    # identity); equal to a fresh TaskProfile, and a bad task still raises every time.
    a = RouteRequest(input_tokens=1200, output_tokens=300, deadline_seconds=60, turns=3)
    b = RouteRequest(input_tokens=1200, output_tokens=300, deadline_seconds=9, turns=3)
    assert a.task_profile is b.task_profile
    assert a.task_profile == simengine.TaskProfile(1200, 300, turns=3, tool_seconds=0.0)
    bad = RouteRequest(input_tokens=10, output_tokens=2, deadline_seconds=60, turns=3)
    for _ in range(2):
        with pytest.raises(simengine.SimEngineError, match="must be >= turns"):
            _ = bad.task_profile

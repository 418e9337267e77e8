"""The router's warm-path memos (issue 29) change no decision.

The oracle is the same router without its memos (`route(..., memo=False)`): every tier
predicted by the engine and every package choice made by `choose_package`, per
candidate, as before the memos. The memoised router must give the same decision,
candidate by candidate and field by field, cold and warm, over randomised requests
(loads, our own slots, forced and allowed tiers, max_cost, quality, package scopes,
windows and balances). And a memoised answer is never stale: a spend, a package edit,
the clock leaving a package's window or a model edit gives the fresh answer.
"""

import dataclasses
import datetime as dt
import random
from decimal import Decimal

import pytest

import simengine
from routing.quota import PackageView
from routing.router import route as router_route
from routing.router.route import Benchmark, ModelOption, RouteRequest, route
from routing.router.timing import OwnSlots
from tests.helpers import tier_option
from tests.routing.router.test_router import package as base_package

NOW = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)
SPECS = simengine.load_catalog_models("catalog/data/catalog.toml")
FAMILIES = {"gpt-5.6-sol": 1, "gpt-5.6-terra": 1, "gpt-5.6-luna": 1, "gpt-5.3-codex": 2}


def models() -> list[ModelOption]:
    out = []
    for i, slug in enumerate(FAMILIES):
        spec = SPECS[slug]
        out.append(
            ModelOption(
                id=i + 1,
                slug=slug,
                family_id=FAMILIES[slug],
                spec=spec,
                context_window=spec.context_window,
                tiers=(
                    tier_option("flex", 0, 1, "h200", 4096, "1.25", "10"),
                    tier_option("standard", 1, 1, "h200", 4096, "2.5", "20"),
                    # the last model's Priority pool too small to hold it: "cannot run"
                    tier_option("priority", 2, 3, "h200", 512 if i < 3 else 1, "5", "40"),
                    tier_option(
                        "ultrafast",
                        3,
                        2,
                        "wse-3",
                        64,
                        "15",
                        "120",
                        available_from=dt.date(2026, 12, 1 + i * 2),
                    ),
                ),  # fmt: skip
                benchmarks=(
                    Benchmark("SWE-Bench Pro", 40.0 + 5 * i, None),
                    Benchmark("SWE-Bench Pro", 50.0 + 5 * i, 9.0),
                ),
            )
        )
    return out


def package(pid, remaining, **kw) -> PackageView:
    return base_package(remaining, id=pid, name=f"p{pid}", order=10 * pid, **kw)


def package_sets(rng: random.Random) -> list[list[PackageView]]:
    """A few account states, each met by many requests (as between two spends)."""
    out = []
    for _ in range(6):
        choices = [
            package(1, rng.choice(["0.05", "0.5", "5", "1000"])),
            package(2, rng.choice(["0.2", "50"]), scope="family", family_id=rng.choice([1, 2])),
            package(3, "1", scope="models", model_ids=frozenset({2, 4}), tier_ids=frozenset({2})),
            package(4, "2", independent=True, valid_until=NOW + dt.timedelta(hours=1)),
            package(5, "100", valid_from=NOW + dt.timedelta(minutes=rng.choice([-5, 5]))),
        ]
        out.append(rng.sample(choices, rng.randint(0, len(choices))))
    return out


def random_case(rng: random.Random, catalog: list[ModelOption], packages):
    turns = rng.choice([1, 1, 2, 4, 8, 30])
    req = RouteRequest(
        input_tokens=rng.choice([rng.randint(200, 60_000)] * 12 + [390_000, 2_000_000]),
        output_tokens=max(turns, rng.randint(100, 40_000)),
        turns=turns,
        tool_seconds=float(rng.choice([0, 5, 15, 60])),
        deadline_seconds=float(rng.choice([20, 60, 120, 300, 600, 3600])),
        max_cost=rng.choice([None, None, Decimal("0.05"), Decimal("1")]),
        tier=rng.choice([None] * 6 + ["standard", "ultrafast"]),
        task=rng.choice([None, "swe-bench-pro"]),
        tiers=rng.choice([(), (), ("flex", "priority")]),
    )
    quality = req.task is not None and rng.random() < 0.5
    chosen_models = catalog if quality else [rng.choice(catalog)]
    loads = {p: rng.choice([0.0, 0.3, rng.uniform(0, 0.97), 0.999, 1.0]) for p in (1, 2, 3)}
    del loads[rng.choice([1, 2, 3])]  # a pool without a measured load
    own = None
    if rng.random() < 0.4:
        ends = sorted(NOW + dt.timedelta(seconds=rng.uniform(1, 600)) for _ in range(3))
        own = {
            p: OwnSlots(
                running=rng.uniform(0.5, 1.0),
                queued=rng.choice([0.0, 0.0, rng.uniform(0, 2)]),
                holding=tuple((e, rng.uniform(0.1, 0.4)) for e in ends),
            )
            for p in rng.sample([1, 2, 3], 2)
        }
    at = NOW + dt.timedelta(days=rng.choice([0, 0, 3]))
    return req, dict(
        models=chosen_models,
        packages=rng.choice(packages),
        loads=loads,
        own=own,
        now=at,
        quality=quality,
    )


def as_data(decision) -> dict:
    return dataclasses.asdict(decision)


def check_choice(decision, quality):
    """The choice and the fastest as min() over the candidates picks them (the oracle of
    _decide's single passes)."""
    runnable = [c for c in decision.candidates if c.prediction is not None]
    fastest = min(runnable, key=lambda c: c.total_seconds, default=None)
    eligible = [c for c in decision.candidates if c.eligible]
    if eligible:
        best = min(
            eligible, key=lambda c: (c.expected_cost if quality else c.cost, c.total_seconds)
        )
        assert decision.chosen is best and best.chosen
        assert decision.fastest is fastest


def test_memoised_decisions_equal_the_per_candidate_engine_path():
    rng = random.Random(29)
    catalog = models()
    router_route._TIMINGS.clear()
    router_route._CHOICES.clear()
    outcomes, reasons = set(), set()
    packages = package_sets(rng)
    cases = [random_case(rng, catalog, packages) for _ in range(400)]
    for _ in range(2):  # cold, then warm (every memo hit)
        for req, kw in cases:
            oracle = route(req, memo=False, **kw)
            fast = route(req, **kw)
            assert as_data(fast) == as_data(oracle), (req, kw)
            check_choice(fast, kw["quality"])
            outcomes.add(fast.outcome)
            reasons |= {c.reason.split(" ", 1)[0] for c in fast.candidates}
    assert router_route._TIMINGS and router_route._CHOICES
    # The random cases reach every kind of answer.
    assert outcomes >= {"ok", "deadline", "max_cost", "quota", "context"}
    assert reasons >= {"chosen:", "meets", "misses", "over", "not", "no", "pool", "task", "cannot"}


def test_a_spend_or_a_package_change_is_a_new_choice():
    sol = models()[0]
    req = RouteRequest(input_tokens=8000, output_tokens=22000, turns=30, tool_seconds=15,
                       deadline_seconds=3600)  # fmt: skip
    first = route(req, models=[sol], packages=[package(1, "1000")], loads={}, now=NOW)
    cost = first.chosen.cost
    assert first.chosen.package.name == "p1"
    # Spent down below the cost: the memo must not answer p1 again.
    spent = [package(1, str(cost - Decimal("0.000001"))), package(2, "1000")]
    d = route(req, models=[sol], packages=spent, loads={}, now=NOW)
    assert d.chosen.package.name == "p2" and d.chosen.package.remaining == Decimal("1000")
    only = [package(1, str(cost - Decimal("0.000001")))]
    assert route(req, models=[sol], packages=only, loads={}, now=NOW).outcome == "quota"
    # A top-up: paid again, with the new balance.
    topped = route(req, models=[sol], packages=[package(1, "2000")], loads={}, now=NOW)
    assert topped.chosen.package.remaining == Decimal("2000")
    # The package's tiers narrowed to Ultrafast: the cheap tiers are not covered any more.
    narrowed = [package(1, "1000", tier_ids=frozenset({4}))]
    d = route(req, models=[sol], packages=narrowed, loads={}, now=NOW)
    assert d.chosen.tier == "ultrafast"
    assert by_tier(d)["flex"].reason == "no quota package covers this model and tier"


def test_the_same_account_state_pays_what_it_can():
    sol = models()[0]
    small = RouteRequest(input_tokens=1000, output_tokens=1000, deadline_seconds=3600)
    large = dataclasses.replace(small, output_tokens=100_000)
    packages = [package(1, "0.1"), package(2, "1000")]
    for _ in range(2):  # the memo must tell the two costs apart
        assert (
            route(small, models=[sol], packages=packages, loads={}, now=NOW).chosen.package.id == 1
        )
        assert (
            route(large, models=[sol], packages=packages, loads={}, now=NOW).chosen.package.id == 2
        )


def test_the_clock_leaving_a_window_is_a_new_choice():
    sol = models()[0]
    req = RouteRequest(input_tokens=8000, output_tokens=2000, deadline_seconds=3600)
    packages = [package(1, "1000", valid_until=NOW + dt.timedelta(minutes=1))]
    assert route(req, models=[sol], packages=packages, loads={}, now=NOW).outcome == "ok"
    later = NOW + dt.timedelta(minutes=2)
    assert route(req, models=[sol], packages=packages, loads={}, now=later).outcome == "quota"


def test_a_model_edit_is_a_new_timing():
    sol = models()[0]
    req = RouteRequest(input_tokens=8000, output_tokens=22000, turns=30, tool_seconds=15,
                       deadline_seconds=3600)  # fmt: skip
    before = route(req, models=[sol], packages=[package(1, "1000")], loads={1: 0.5}, now=NOW)
    heavier = dataclasses.replace(
        sol,
        spec=dataclasses.replace(sol.spec, active_params_decode=sol.spec.active_params_decode * 3),
    )
    after = route(req, models=[heavier], packages=[package(1, "1000")], loads={1: 0.5}, now=NOW)
    oracle = route(
        req, models=[heavier], packages=[package(1, "1000")], loads={1: 0.5}, now=NOW, memo=False
    )
    assert as_data(after) == as_data(oracle)
    assert by_tier(after)["flex"].total_seconds > by_tier(before)["flex"].total_seconds


@pytest.mark.parametrize("load", [0, 0.0, 1, 1.0])
def test_an_int_load_and_a_float_load_keep_their_own_answers(load):
    sol = models()[0]
    req = RouteRequest(input_tokens=8000, output_tokens=2000, deadline_seconds=3600)
    kw = dict(models=[sol], packages=[package(1, "1000")], loads={1: load}, now=NOW)
    fast = route(req, **kw)
    assert as_data(fast) == as_data(route(req, memo=False, **kw))
    assert type(by_tier(fast)["flex"].load) is type(load)


def by_tier(decision):
    return {c.tier: c for c in decision.candidates}

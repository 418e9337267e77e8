import datetime as dt

import pytest

from catalog import lifecycle
from catalog.lifecycle import LifecycleError, model_status, resolve_successor, status_q
from catalog.models import LifecycleChange, ModelVersion, Tier

pytestmark = pytest.mark.django_db


def at(day: str, hour: int = 0, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(dt.date.fromisoformat(day), dt.time(hour, minute), tzinfo=dt.UTC)


def m(slug: str) -> ModelVersion:
    return ModelVersion.objects.get(slug=slug)


def test_spark_status_on_the_days_around_its_retirement(builtin_catalog):
    spark = m("gpt-5.3-codex-spark")
    assert model_status(spark, at("2026-09-10", 23, 59)) == "preview"  # before the notice
    assert model_status(spark, at("2026-09-11")) == "deprecated"  # announced
    assert model_status(spark, at("2026-09-17", 23, 59)) == "deprecated"  # the day before
    assert model_status(spark, at("2026-09-18")) == "retired"  # 00:00 UTC on the day
    assert model_status(spark, at("2026-09-19", 12)) == "retired"  # the day after


def test_status_is_computed_in_utc_whatever_the_caller_timezone(builtin_catalog):
    spark = m("gpt-5.3-codex-spark")
    # 2026-09-17 23:30 in New York is 2026-09-18 03:30 UTC: retired.
    new_york = dt.timezone(dt.timedelta(hours=-4))
    assert model_status(spark, dt.datetime(2026, 9, 17, 23, 30, tzinfo=new_york)) == "retired"


def test_upcoming_before_release_and_active_after(builtin_catalog):
    sol = m("gpt-5.6-sol")
    assert model_status(sol, at("2026-07-15")) == "upcoming"
    assert model_status(sol, at("2026-07-16")) == "active"


def test_preview_until_general_availability(builtin_catalog):
    terra = m("gpt-5.6-terra")
    terra.generally_available_on = dt.date(2026, 8, 1)
    assert model_status(terra, at("2026-07-31")) == "preview"
    assert model_status(terra, at("2026-08-01")) == "active"


def test_a_scheduled_but_unannounced_retirement_keeps_the_model_active(builtin_catalog):
    sol = m("gpt-5.6-sol")
    sol.retires_on = dt.date(2027, 6, 1)
    sol.retirement_announced_on = dt.date(2027, 1, 1)
    assert model_status(sol, at("2026-12-31")) == "active"
    assert model_status(sol, at("2027-01-01")) == "deprecated"


def test_query_filter_agrees_with_status_on_every_boundary_day(builtin_catalog):
    days = set()
    for model in ModelVersion.objects.all():
        for d in (model.released_on, model.retires_on, model.retirement_announced_on):
            if d:
                days |= {d - dt.timedelta(days=1), d, d + dt.timedelta(days=1)}
    for day in sorted(days):
        moment = at(day.isoformat(), 12)
        for status in lifecycle.STATUSES:
            by_query = set(
                ModelVersion.objects.filter(status_q(status, moment)).values_list("slug", flat=True)
            )
            by_object = {
                x.slug for x in ModelVersion.objects.all() if model_status(x, moment) == status
            }
            assert by_query == by_object, (day, status)


def test_successor_chain_resolves_to_the_model_to_use_today(builtin_catalog):
    res = resolve_successor(m("gpt-5.3-codex"), at("2026-12-02"))
    assert [x.slug for x in res.chain] == ["gpt-5.3-codex", "gpt-5.4", "gpt-5.6-sol"]
    assert res.model.slug == "gpt-5.6-sol"


def test_spark_resolves_to_sol_on_ultrafast(builtin_catalog):
    res = resolve_successor(m("gpt-5.3-codex-spark"), at("2026-12-02"))
    assert res.model.slug == "gpt-5.6-sol"
    assert res.tier.slug == "ultrafast"


def test_an_active_model_resolves_to_itself(builtin_catalog):
    res = resolve_successor(m("gpt-5.6-sol"), at("2026-12-02"))
    assert res.model.slug == "gpt-5.6-sol" and len(res.chain) == 1


def test_chain_stops_at_a_model_that_is_still_serving(builtin_catalog):
    # On 2026-06-10 GPT-5.4 still served: GPT-5.3-Codex users go there.
    res = resolve_successor(m("gpt-5.3-codex"), at("2026-06-10"))
    assert res.model.slug == "gpt-5.4"


def test_family_alias_resolves_to_the_newest_serving_version(builtin_catalog):
    assert lifecycle.resolve_model_reference("sol").slug == "gpt-5.6-sol"
    assert lifecycle.resolve_model_reference("gpt-5.4").slug == "gpt-5.4"
    assert lifecycle.resolve_model_reference("nonexistent") is None


def test_a_successor_cycle_is_refused(builtin_catalog):
    sol = m("gpt-5.6-sol")
    with pytest.raises(LifecycleError, match="cycle"):
        lifecycle.model_update_lifecycle(
            model=sol,
            actor="test",
            retires_on=dt.date(2027, 1, 1),
            successor=m("gpt-5.3-codex"),  # codex -> 5.4 -> sol -> codex
        )
    assert m("gpt-5.6-sol").successor is None
    assert not LifecycleChange.objects.filter(model=sol, actor="test").exists()


def test_a_successor_retiring_before_its_predecessor_is_refused(builtin_catalog):
    with pytest.raises(LifecycleError, match="retires on 2026-06-02, before"):
        lifecycle.model_schedule_retirement(
            model=m("gpt-5.6-terra"),
            retires_on=dt.date(2027, 3, 1),
            successor=m("gpt-5.2"),
            actor="test",
        )


def test_a_successor_cannot_be_made_to_retire_before_its_predecessor(builtin_catalog):
    # Sol succeeds Spark (retired 2026-09-18): Sol cannot retire before that day.
    with pytest.raises(LifecycleError, match="cannot retire before it"):
        lifecycle.model_update_lifecycle(
            model=m("gpt-5.6-sol"), actor="test", retires_on=dt.date(2026, 9, 1)
        )


def test_a_retirement_before_release_is_refused(builtin_catalog):
    with pytest.raises(LifecycleError, match="before its release"):
        lifecycle.model_update_lifecycle(
            model=m("neohorse-1-4b"), actor="test", retires_on=dt.date(2026, 1, 1)
        )


def test_a_model_cannot_succeed_itself(builtin_catalog):
    sol = m("gpt-5.6-sol")
    with pytest.raises(LifecycleError, match="its own successor"):
        lifecycle.model_schedule_retirement(
            model=sol, retires_on=dt.date(2027, 9, 1), successor=sol, actor="test"
        )


def test_an_announcement_after_the_retirement_is_refused(builtin_catalog):
    with pytest.raises(LifecycleError, match="after it takes effect"):
        lifecycle.model_schedule_retirement(
            model=m("gpt-5.6-luna"),
            retires_on=dt.date(2027, 1, 1),
            announced_on=dt.date(2027, 2, 1),
            successor=None,
            actor="test",
        )


def test_scheduling_records_who_changed_what(builtin_catalog, django_user_model):
    user = django_user_model.objects.create_user("alice")
    luna = m("gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        model=luna,
        retires_on=dt.date(2027, 7, 1),
        announced_on=dt.date(2026, 12, 1),
        successor=m("gpt-5.6-terra"),
        successor_tier=Tier.objects.get(slug="flex"),
        actor="admin:alice",
        user=user,
        reason="cheaper Terra flex",
    )
    rows = {c.field: c for c in LifecycleChange.objects.filter(model=luna, actor="admin:alice")}
    assert set(rows) == {"retires_on", "retirement_announced_on", "successor", "successor_tier"}
    assert rows["retires_on"].old_value == "" and rows["retires_on"].new_value == "2027-07-01"
    assert rows["successor"].new_value == "gpt-5.6-terra"
    assert rows["successor"].changed_by == user and rows["successor"].reason == "cheaper Terra flex"


def test_an_unchanged_value_writes_no_history(builtin_catalog):
    spark = m("gpt-5.3-codex-spark")
    before = LifecycleChange.objects.count()
    lifecycle.model_update_lifecycle(model=spark, actor="test", retires_on=spark.retires_on)
    assert LifecycleChange.objects.count() == before


def test_retire_now_retires_from_today(builtin_catalog):
    now = at("2026-12-02", 15)
    luna = lifecycle.model_retire_now(
        model=m("gpt-5.6-luna"), actor="test", at=now, notice_override="test"
    )
    assert luna.retires_on == dt.date(2026, 12, 2)
    assert model_status(luna, now) == "retired"


def test_retire_now_refuses_a_model_already_retired(builtin_catalog):
    with pytest.raises(LifecycleError, match="already retired"):
        lifecycle.model_retire_now(model=m("gpt-5.2"), actor="test")


def test_cancel_clears_a_scheduled_retirement_but_not_a_past_one(builtin_catalog):
    luna = m("gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        model=luna, retires_on=dt.date(2099, 1, 1), successor=None, actor="test"
    )
    lifecycle.model_cancel_retirement(model=luna, actor="test")
    luna.refresh_from_db()
    assert luna.retires_on is None and luna.retirement_announced_on is None
    with pytest.raises(LifecycleError, match="cannot be cancelled"):
        lifecycle.model_cancel_retirement(model=m("gpt-5.3-codex-spark"), actor="test")
    with pytest.raises(LifecycleError, match="no retirement scheduled"):
        lifecycle.model_cancel_retirement(model=m("gpt-5.6-sol"), actor="test")


def test_deprecation_headers_follow_rfc_9745_and_8594(builtin_catalog):
    headers = lifecycle.deprecation_headers(
        m("gpt-5.3-codex-spark"), successor_url="https://h/api/v1/models/gpt-5.6-sol/"
    )
    assert headers["Deprecation"] == "@1789084800"  # 2026-09-11T00:00:00Z
    assert headers["Sunset"] == "Fri, 18 Sep 2026 00:00:00 GMT"
    assert headers["Link"] == '<https://h/api/v1/models/gpt-5.6-sol/>; rel="successor-version"'
    assert lifecycle.deprecation_headers(m("gpt-5.6-sol"), successor_url=None) == {}


def test_notice_policies_are_loaded_per_kind(builtin_catalog):
    from catalog.models import NoticePolicy

    assert dict(NoticePolicy.objects.values_list("kind", "minimum_days")) == {
        "general": 182,
        "variant": 91,
        "preview": 14,
    }


def test_scheduling_inside_the_notice_policy_needs_an_override(builtin_catalog):
    luna = m("gpt-5.6-luna")  # a general model: 182 days
    today = lifecycle.utc_today()
    with pytest.raises(lifecycle.NoticeTooShort, match="at least 182 days' notice; 30 given"):
        lifecycle.model_schedule_retirement(
            model=luna, retires_on=today + dt.timedelta(days=30), successor=None, actor="t"
        )
    assert m("gpt-5.6-luna").retires_on is None
    lifecycle.model_schedule_retirement(
        model=luna,
        retires_on=today + dt.timedelta(days=30),
        successor=None,
        actor="t",
        reason="security issue",
        notice_override="critical vulnerability",
    )
    change = LifecycleChange.objects.get(model=luna, field="retires_on")
    assert (
        change.reason == "notice override (30 of 182 days): critical vulnerability; security issue"
    )


def test_enough_notice_needs_no_override(builtin_catalog):
    today = lifecycle.utc_today()
    lifecycle.model_schedule_retirement(
        model=m("gpt-5.6-luna"),
        retires_on=today + dt.timedelta(days=182),
        successor=None,
        actor="t",
    )
    assert m("gpt-5.6-luna").retires_on == today + dt.timedelta(days=182)


def test_a_retirement_announced_long_ago_retires_now_without_override(builtin_catalog):
    luna = m("gpt-5.6-luna")
    today = lifecycle.utc_today()
    # Announced 200 days ago for a later date: retiring it early still gave 200 days.
    lifecycle.model_update_lifecycle(
        model=luna,
        actor="t",
        retirement_announced_on=today - dt.timedelta(days=200),
        retires_on=today + dt.timedelta(days=30),
    )
    assert lifecycle.model_retire_now(model=m("gpt-5.6-luna"), actor="t").retires_on == today


def test_spark_was_retired_inside_its_preview_policy(builtin_catalog):
    # A week's notice for a preview that the policy gives two: today it would need an
    # override (the built-in catalog records history as published).
    spark = m("gpt-5.3-codex-spark")
    with pytest.raises(lifecycle.NoticeTooShort, match="preview model: it gets at least 14"):
        lifecycle.check_notice(
            spark, announced_on=dt.date(2026, 9, 11), retires_on=dt.date(2026, 9, 18), override=""
        )

"""Quota packages tied to a retiring model follow their policy, once."""

import datetime as dt
from decimal import Decimal

import pytest

from catalog import lifecycle
from catalog.models import ModelVersion, Tier
from routing import quota
from routing.models import LedgerEntry, QuotaPackage, RetirementApplication
from routing.retirement import day, policies

pytestmark = pytest.mark.django_db


def m(slug):
    return ModelVersion.objects.get(slug=slug)


def _with_policy(account, policy, **kw):
    pkg = quota.package_create(
        account=account,
        name="Spark spare tank",
        limit="20",
        period="once",
        scope=QuotaPackage.Scope.MODELS,
        model_versions=[m("gpt-5.3-codex-spark")],
        independent=True,
    )
    QuotaPackage.objects.filter(pk=pkg.pk).update(on_retirement=policy, **kw)
    pkg.refresh_from_db()
    return pkg


def test_keep_covers_the_successor_until_its_own_expiry(account):
    pkg = _with_policy(account, "keep")
    assert policies.quota_apply_retirement(model=m("gpt-5.3-codex-spark")) == {
        "applied": 1,
        "already": 0,
    }
    slugs = set(pkg.model_versions.values_list("slug", flat=True))
    assert slugs == {"gpt-5.3-codex-spark", "gpt-5.6-sol"}
    pkg.refresh_from_db()
    assert pkg.valid_until is None and pkg.limit == 20


def test_migrate_moves_to_the_successor_tier_at_the_stated_conversion(account):
    ultrafast = Tier.objects.get(slug="ultrafast")
    pkg = _with_policy(account, "migrate", migrate_tier=ultrafast, conversion=Decimal("0.25"))
    quota.quota_reserve(package_id=pkg.pk, amount="4", reference="in-flight")  # a job running
    policies.quota_apply_retirement(model=m("gpt-5.3-codex-spark"))
    pkg.refresh_from_db()
    assert list(pkg.model_versions.values_list("slug", flat=True)) == ["gpt-5.6-sol"]
    assert list(pkg.tiers.values_list("slug", flat=True)) == ["ultrafast"]
    assert pkg.remaining == Decimal(4)  # 16 free credits x 0.25
    assert pkg.reserved == 4  # the in-flight job still settles from it
    quota.quota_settle(reference="in-flight", actual="4")
    assert quota.ledger_mismatches() == []


def test_expire_ends_the_package_on_the_retirement_date_but_keeps_it_visible(api, account):
    pkg = _with_policy(account, "expire")
    policies.quota_apply_retirement(model=m("gpt-5.3-codex-spark"))
    pkg.refresh_from_db()
    assert pkg.valid_until == dt.datetime(2026, 9, 18, tzinfo=dt.UTC)
    data = {p["name"]: p for p in api.get("/api/v1/quota").json()["data"]}
    tank = data["Spark spare tank"]
    assert tank["valid_until"].startswith("2026-09-18")
    (ret,) = tank["retirements"]
    assert ret["model"] == "gpt-5.3-codex-spark" and ret["policy"] == "expire"
    assert ret["applied_at"] and "expires 2026-09-18" in ret["detail"]


def test_applying_twice_changes_nothing(account):
    pkg = _with_policy(account, "migrate", conversion=Decimal("0.5"))
    policies.quota_apply_retirement(model=m("gpt-5.3-codex-spark"))
    pkg.refresh_from_db()
    limit = pkg.limit
    assert policies.quota_apply_retirement(model=m("gpt-5.3-codex-spark"))["already"] == 0
    assert day.retirements_apply_due() == {
        "models": 0,
        "applied": 0,
        "rerouted": 0,
        "batch_lines_moved": 0,
    }
    pkg.refresh_from_db()
    assert pkg.limit == limit
    assert LedgerEntry.objects.filter(package=pkg, kind="retirement").count() == 1


def test_a_crash_half_way_resumes_without_applying_anything_twice(account, monkeypatch):
    packages = [_with_policy(account, "migrate", conversion=Decimal("0.5")) for _ in range(3)]
    real = policies._apply_one
    calls = []

    def crash_on_second(package_id, *args):
        calls.append(package_id)
        if len(calls) == 2:
            raise RuntimeError("worker died")
        return real(package_id, *args)

    monkeypatch.setattr(policies, "_apply_one", crash_on_second)
    with pytest.raises(RuntimeError):
        day.retirements_apply_due()
    assert RetirementApplication.objects.count() == 1
    monkeypatch.setattr(policies, "_apply_one", real)
    assert day.retirements_apply_due()["applied"] == 2
    for pkg in packages:
        pkg.refresh_from_db()
        assert pkg.limit == Decimal(10)  # 20 x 0.5, once
    assert LedgerEntry.objects.filter(kind="retirement").count() == 3


def test_the_policy_and_date_show_before_the_day(api, account):
    luna = m("gpt-5.6-luna")
    quota.package_create(
        account=account,
        name="Luna pack",
        limit="10",
        scope=QuotaPackage.Scope.MODELS,
        model_versions=[luna],
    )
    QuotaPackage.objects.filter(name="Luna pack").update(on_retirement="migrate")
    retires = lifecycle.utc_today() + dt.timedelta(days=200)
    lifecycle.model_schedule_retirement(
        model=luna, retires_on=retires, successor=m("gpt-5.6-terra"), actor="t"
    )
    pack = next(p for p in api.get("/api/v1/quota").json()["data"] if p["name"] == "Luna pack")
    assert pack["on_retirement"]["policy"] == "migrate"
    (ret,) = pack["retirements"]
    assert ret == ret | {
        "model": "gpt-5.6-luna",
        "status": "deprecated",
        "retires_on": retires.isoformat(),
        "successor": "gpt-5.6-terra",
        "policy": "migrate",
        "applied_at": None,
    }
    assert day.retirements_apply_due() == {
        "models": 0,
        "applied": 0,
        "rerouted": 0,
        "batch_lines_moved": 0,
    }  # not yet


def test_retire_now_applies_the_policies_at_once(account, django_capture_on_commit_callbacks):
    luna = m("gpt-5.6-luna")
    pkg = quota.package_create(
        account=account,
        name="Luna pack",
        limit="10",
        scope=QuotaPackage.Scope.MODELS,
        model_versions=[luna],
    )
    QuotaPackage.objects.filter(pk=pkg.pk).update(on_retirement="expire")
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.model_retire_now(model=luna, actor="t", notice_override="incident")
    assert RetirementApplication.objects.filter(package=pkg, model=luna).exists()


def test_the_beat_task_applies_due_retirements(account):
    from routing.tasks import apply_retirements

    _with_policy(account, "keep")
    assert apply_retirements.apply().get() == {
        "models": 1,
        "applied": 1,
        "rerouted": 0,
        "batch_lines_moved": 0,
    }
    assert apply_retirements.apply().get() == {
        "models": 0,
        "applied": 0,
        "rerouted": 0,
        "batch_lines_moved": 0,
    }

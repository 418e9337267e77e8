import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from catalog.models import ModelFamily, ModelVersion, Tier
from routing import quota
from routing.models import LedgerEntry, QuotaPackage, QuotaReservation
from tests.helpers import make_account, make_model, make_package

pytestmark = pytest.mark.django_db
UTC = dt.UTC


@pytest.fixture
def account(db):
    """Quota rules do not depend on the catalog: an account with the main package every
    new account gets (100 credits, monthly), built by the factories (no catalog.toml).
    Overrides tests/routing/conftest.py's fixture; tests on catalog models ask for
    builtin_catalog too."""
    account = make_account()
    make_package(account, limit="100")
    return account


def sol():
    return ModelVersion.objects.get(slug="gpt-5.6-sol")


def tier(slug):
    return Tier.objects.get(slug=slug)


def reserve_for(account, model, tier_slug, amount, ref, at=None):
    return quota.quota_reserve_for(
        account=account,
        model_id=model.pk,
        family_id=model.family_id,
        tier_id=tier(tier_slug).pk,
        amount=amount,
        reference=ref,
        at=at,
    )


def test_reserve_settle_release_write_the_ledger_in_step(account):
    pkg = account.packages.get()
    r1 = quota.quota_reserve(package_id=pkg.pk, amount="10", reference="job-1")
    r2 = quota.quota_reserve(package_id=pkg.pk, amount="5", reference="job-2")
    pkg.refresh_from_db()
    assert (pkg.reserved, pkg.spent, pkg.remaining) == (Decimal(15), 0, Decimal(85))
    quota.quota_settle(reference="job-1", actual="7.5")
    quota.quota_release(reference="job-2")
    pkg.refresh_from_db()
    assert (pkg.reserved, pkg.spent) == (0, Decimal("7.5"))
    r1.refresh_from_db(), r2.refresh_from_db()
    assert (r1.state, r1.charged, r2.state) == ("settled", Decimal("7.5"), "released")
    kinds = sorted(LedgerEntry.objects.filter(package=pkg).values_list("kind", flat=True))
    assert kinds == ["release", "reserve", "reserve", "settle"]
    assert quota.ledger_mismatches() == []


def test_settle_and_release_are_idempotent(account):
    pkg = account.packages.get()
    quota.quota_reserve(package_id=pkg.pk, amount="10", reference="job-1")
    quota.quota_settle(reference="job-1", actual="10")
    quota.quota_settle(reference="job-1", actual="10")
    quota.quota_release(reference="job-1")  # too late: it was settled
    pkg.refresh_from_db()
    assert pkg.spent == 10 and pkg.reserved == 0
    assert LedgerEntry.objects.filter(package=pkg).count() == 2


def test_a_repeated_reservation_reference_holds_once(account):
    pkg = account.packages.get()
    a = quota.quota_reserve(package_id=pkg.pk, amount="10", reference="job-1")
    b = quota.quota_reserve(package_id=pkg.pk, amount="10", reference="job-1")
    assert a.pk == b.pk
    pkg.refresh_from_db()
    assert pkg.reserved == 10


def test_settlement_never_charges_above_the_reservation(account):
    pkg = account.packages.get()
    quota.quota_reserve(package_id=pkg.pk, amount="10", reference="job-1")
    r = quota.quota_settle(reference="job-1", actual="12")
    assert r.charged == 10


def test_a_reservation_past_the_limit_is_refused(account):
    pkg = account.packages.get()
    quota.quota_reserve(package_id=pkg.pk, amount="99", reference="a")
    with pytest.raises(quota.QuotaExhausted):
        quota.quota_reserve(package_id=pkg.pk, amount="2", reference="b")
    assert not QuotaReservation.objects.filter(reference="b").exists()
    assert quota.ledger_mismatches() == []


def test_the_database_refuses_a_negative_balance(account):
    pkg = account.packages.get()
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaPackage.objects.filter(pk=pkg.pk).update(spent=Decimal("101"))
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaPackage.objects.filter(pk=pkg.pk).update(reserved=Decimal("-1"))


def test_main_packages_pay_in_order_before_the_spare_tank(account):
    main = account.packages.get()
    second = quota.package_create(account=account, name="second", limit="5", order=20)
    spare = quota.package_create(
        account=account, name="spark tank", limit="50", independent=True, order=1
    )
    model = make_model()
    r = reserve_for(account, model, "standard", "60", "a")
    assert r.package_id == main.pk  # main first, although the spare tank has order 1
    r = reserve_for(account, model, "standard", "45", "b")  # main has 40 left: the next
    assert r.package_id == spare.pk  # neither main package can pay 45: the spare tank
    r = reserve_for(account, model, "standard", "4", "c")
    assert r.package_id == main.pk
    second.refresh_from_db(), spare.refresh_from_db()
    assert second.reserved == 0 and spare.reserved == 45


def test_a_spare_tank_never_touches_main_quota(account):
    main = account.packages.get()
    spark = make_model("spark-like", family="spark-like")
    tank = quota.package_create(
        account=account,
        name="Spark tank",
        limit="20",
        scope=QuotaPackage.Scope.MODELS,
        model_versions=[spark],
        independent=True,
    )
    QuotaPackage.objects.filter(pk=main.pk).update(spent=Decimal("100"))  # main used up
    r = reserve_for(account, spark, "standard", "5", "spark-1")
    assert r.package_id == tank.pk
    with pytest.raises(quota.QuotaExhausted):
        reserve_for(account, make_model(), "standard", "5", "sol-1")  # the tank is Spark's only


def test_scope_by_family_and_tiers_and_validity(account, builtin_catalog):
    account.packages.all().delete()
    sol_family = ModelFamily.objects.get(slug="sol")
    now = dt.datetime(2026, 12, 2, 12, tzinfo=UTC)
    pkg = quota.package_create(
        account=account,
        name="Sol priority only",
        limit="10",
        scope=QuotaPackage.Scope.FAMILY,
        family=sol_family,
        tiers=[tier("priority")],
        valid_until=dt.datetime(2026, 12, 31, tzinfo=UTC),
        at=now,
    )
    view = quota.account_packages(account)[0]
    s = sol()
    assert view.covers(model_id=s.pk, family_id=s.family_id, tier_id=tier("priority").pk, at=now)
    assert not view.covers(
        model_id=s.pk, family_id=s.family_id, tier_id=tier("standard").pk, at=now
    )
    terra = ModelVersion.objects.get(slug="gpt-5.6-terra")
    assert not view.covers(
        model_id=terra.pk, family_id=terra.family_id, tier_id=tier("priority").pk, at=now
    )
    late = dt.datetime(2027, 1, 1, tzinfo=UTC)
    assert not view.covers(
        model_id=s.pk, family_id=s.family_id, tier_id=tier("priority").pk, at=late
    )
    assert pkg.next_reset_at == dt.datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "at", "start", "nxt"),
    [
        ("day", "2026-12-02T13:00", "2026-12-02", "2026-12-03"),
        ("week", "2026-12-02T13:00", "2026-11-30", "2026-12-07"),  # ISO weeks start Monday
        ("month", "2026-12-02T13:00", "2026-12-01", "2027-01-01"),
        ("month", "2027-01-31T23:59", "2027-01-01", "2027-02-01"),
    ],
)
def test_periods_are_calendar_periods_in_utc(period, at, start, nxt):
    at = dt.datetime.fromisoformat(at).replace(tzinfo=UTC)
    s = quota.period_start_for(period, at)
    assert s == dt.datetime.fromisoformat(start).replace(tzinfo=UTC)
    assert quota.next_period_start(period, s) == dt.datetime.fromisoformat(nxt).replace(tzinfo=UTC)


def test_a_due_reset_runs_once_even_if_triggered_twice(account):
    created = dt.datetime(2026, 12, 2, 9, tzinfo=UTC)
    pkg = quota.package_create(account=account, name="daily", limit="10", period="day", at=created)
    quota.quota_reserve(package_id=pkg.pk, amount="4", reference="a")
    quota.quota_settle(reference="a", actual="4")
    quota.quota_reserve(package_id=pkg.pk, amount="3", reference="b")  # in flight
    before = dt.datetime(2026, 12, 2, 23, 59, tzinfo=UTC)
    assert quota.quota_reset_due(at=before) == 0
    after = dt.datetime(2026, 12, 3, 0, 1, tzinfo=UTC)
    assert quota.quota_reset_due(at=after) == 1
    assert quota.quota_reset_due(at=after) == 0
    pkg.refresh_from_db()
    assert pkg.spent == 0 and pkg.reserved == 3  # in-flight work keeps its hold
    assert pkg.period_start == dt.datetime(2026, 12, 3, tzinfo=UTC)
    assert pkg.next_reset_at == dt.datetime(2026, 12, 4, tzinfo=UTC)
    assert LedgerEntry.objects.filter(package=pkg, kind="reset").count() == 1
    assert quota.ledger_mismatches() == []


def test_a_one_off_package_never_resets(account):
    pkg = quota.package_create(account=account, name="grant", limit="10", period="once")
    quota.quota_reserve(package_id=pkg.pk, amount="4", reference="a")
    quota.quota_settle(reference="a", actual="4")
    assert pkg.next_reset_at is None
    quota.quota_reset_due(at=dt.datetime(2030, 1, 1, tzinfo=UTC))
    pkg.refresh_from_db()
    assert pkg.spent == 4 and not LedgerEntry.objects.filter(package=pkg, kind="reset").exists()


def test_the_beat_task_resets_due_packages(account):
    from routing.tasks import reset_quota_periods

    QuotaPackage.objects.update(next_reset_at=dt.datetime(2020, 1, 1, tzinfo=UTC))
    assert reset_quota_periods.apply().get() == 1
    assert reset_quota_periods.apply().get() == 0

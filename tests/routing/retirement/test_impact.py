"""The retirement impact view: Spark's users after a few weeks of replayed traffic."""

import re
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from catalog.models import HardwarePool, ModelVersion
from routing import quota
from routing.models import Job, QuotaPackage
from routing.retirement.impact import AccountImpact, impact_chart, retirement_impact, time_changes

pytestmark = pytest.mark.django_db


@pytest.fixture
def spark_traffic(builtin_catalog):
    out = StringIO()
    call_command("demo_traffic", "--jobs", "120", stdout=out)
    assert "Replayed 120 jobs on gpt-5.3-codex-spark from 6 accounts" in out.getvalue()
    assert "Recorded 6 retirement notice(s)" in out.getvalue()
    return ModelVersion.objects.get(slug="gpt-5.3-codex-spark")


def test_demo_traffic_lands_in_the_weeks_before_the_retirement(spark_traffic):
    jobs = Job.objects.filter(model=spark_traffic)
    assert jobs.count() == 120 and set(jobs.values_list("status", flat=True)) == {"succeeded"}
    first, last = jobs.order_by("created_at").first(), jobs.order_by("created_at").last()
    assert (
        str(last.created_at.date()) <= "2026-09-18" and str(first.created_at.date()) >= "2026-08-28"
    )
    assert quota.ledger_mismatches() == []


def test_impact_lists_users_and_replays_them_on_sol_ultrafast(spark_traffic):
    impact = retirement_impact(model=spark_traffic)
    assert impact.successor.slug == "gpt-5.6-sol" and impact.tier.slug == "ultrafast"
    assert [a.account for a in impact.accounts][:2] == ["acme-robotics", "initech"]
    assert sum(a.jobs for a in impact.accounts) == 120
    acme = impact.accounts[0]
    # Sol Ultrafast streams a bit slower than Spark and costs far more per token.
    assert 0.8 < acme.latency_after / acme.latency_before < 1.5
    assert acme.cost_after > 5 * acme.cost_before
    assert len(impact.packages) == 6
    assert impact.pool == "cs3-ultrafast" and impact.wafers_freed == 8
    assert impact.utilisation_after > impact.utilisation_before
    assert impact_chart(impact).startswith("data:image/png;base64,")


def test_the_chart_draws_relative_time_changes_so_short_jobs_stand_out():
    """Absolute bars hid an account of 0.6 s jobs going to 0.8 s next to minutes-long
    ones: the chart draws each account's change in percent instead."""

    def row(name, before, after):
        return AccountImpact(name, 1, 1, before, after, Decimal(1), Decimal(2))

    rows = [row("long", 60.0, 61.0), row("short", 0.6, 0.8), row("faster", 10.0, 5.0)]
    rows.append(row("unreplayed", 5.0, 0.0))
    long, short, faster, unreplayed = time_changes(rows)
    assert short == pytest.approx(100 / 3) and long == pytest.approx(100 / 60)
    assert short > 10 * long  # absolute: 0.2 s against 1 s, the other way round
    assert faster == pytest.approx(-50.0) and unreplayed == 0.0


def test_capacity_check_flags_a_busy_successor_pool(spark_traffic):
    from routing.models import PoolLoad

    assert retirement_impact(model=spark_traffic).fits
    PoolLoad.objects.create(
        pool=HardwarePool.objects.get(slug="cs3-ultrafast"), background_utilisation=0.9
    )
    impact = retirement_impact(model=spark_traffic)
    assert impact.utilisation_before == pytest.approx(0.9) and not impact.fits


def test_another_successor_and_tier_can_be_simulated(spark_traffic):
    terra = ModelVersion.objects.get(slug="gpt-5.6-terra")
    from catalog.models import Tier

    impact = retirement_impact(
        model=spark_traffic, successor=terra, tier=Tier.objects.get(slug="priority")
    )
    assert impact.pool == "h200-main" and impact.accounts[0].latency_after > 0


def test_the_admin_impact_page_shows_table_chart_capacity_and_packages(admin_client, spark_traffic):
    html = admin_client.get(
        "/admin/routing/retirementapplication/impact/gpt-5.3-codex-spark/"
    ).content.decode()
    for marker in (
        'id="impact-accounts"',
        'id="impact-chart"',
        'id="impact-capacity"',
        'id="impact-packages"',
        "acme-robotics",
        "wafers freed",
        'id="impact-notices">6 no webhook',
    ):
        assert marker in html
    # Numbers for people: Sol Ultrafast costs ~17 times Spark, written "17x", not "1613 %";
    # credits to 2 decimals; the sidebar highlights Model versions, where the page belongs.
    assert re.search(r'class="cost-change">1[5-9]x<', html), html
    assert "200.00<" in html and "200.000000" not in html
    assert re.search(r'current-model">\s*<th[^>]*>\s*<a href="/admin/catalog/modelversion/"', html)
    assert html.count("current-model") == 1
    page = admin_client.get("/admin/catalog/modelversion/").content.decode()
    assert "/admin/routing/retirementapplication/impact/gpt-5.3-codex-spark/" in page


@pytest.mark.parametrize("jobs", [50, 1, 7, 401])
def test_demo_traffic_makes_exactly_the_jobs_asked_for(builtin_catalog, jobs):
    out = StringIO()
    call_command("demo_traffic", "--jobs", str(jobs), stdout=out)
    assert Job.objects.count() == jobs
    assert f"Replayed {jobs} jobs" in out.getvalue()


def test_demo_traffic_twice_adds_nothing_the_second_time(builtin_catalog):
    call_command("demo_traffic", "--jobs", "50", stdout=StringIO())
    first = sorted(Job.objects.values_list("account__name", "input_tokens", "created_at"))
    spent = {p.pk: p.spent for p in QuotaPackage.objects.all()}
    out = StringIO()
    call_command("demo_traffic", "--jobs", "50", stdout=out)
    assert Job.objects.count() == 50
    assert sorted(Job.objects.values_list("account__name", "input_tokens", "created_at")) == first
    assert {p.pk: p.spent for p in QuotaPackage.objects.all()} == spent
    assert "Replayed" not in out.getvalue()
    assert "50 of the 50 demo jobs on gpt-5.3-codex-spark were already there" in out.getvalue()
    # Asking for more adds only the rest.
    call_command("demo_traffic", "--jobs", "80", stdout=out)
    assert Job.objects.count() == 80
    assert quota.ledger_mismatches() == []


def test_demo_traffic_refuses_bad_input(builtin_catalog):
    with pytest.raises(CommandError, match="Unknown model"):
        call_command("demo_traffic", "--model", "gpt-9", stdout=StringIO())
    with pytest.raises(CommandError, match="--jobs must be"):
        call_command("demo_traffic", "--jobs", "0", stdout=StringIO())


def test_the_impact_lists_batches_with_lines_still_to_run_on_the_model(
    admin_client, builtin_catalog
):
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from routing.accounts.accounts import account_create
    from routing.batches.create import batch_create
    from routing.batches.validation import batch_validate
    from tests.helpers import file_upload, jsonl

    account, _ = account_create(name="nightly-ops", default_credits=Decimal(100))
    at = timezone.now()
    f = file_upload(account, jsonl(40, model="gpt-5.6-luna"))
    b = batch_create(
        account=account,
        input_file_id=f.id,
        start_at=(at + dt.timedelta(hours=2)).isoformat(),
        at=at,
    )
    b = batch_validate(b.pk, at=at)
    assert b.status == "validating" and b.validated_at, (b.status, b.errors)
    assert b.failed == 0
    impact = retirement_impact(model=ModelVersion.objects.get(slug="gpt-5.6-luna"))
    assert [(x["id"], x["account"], x["lines"]) for x in impact.batches] == [
        (b.pk, "nightly-ops", 40)
    ]
    html = admin_client.get(
        "/admin/routing/retirementapplication/impact/gpt-5.6-luna/"
    ).content.decode()
    assert 'id="impact-batches"' in html and str(b.pk) in html

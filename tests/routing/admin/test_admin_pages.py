"""What the admin pages say (issue 18): the home page's "Needs attention" lines and
their links, the run chart's axis scaled to the run, and the impact view's numbers and
sidebar. How they look at 1,366 px is tests/test_browser_admin_pages.py."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from catalog import lifecycle
from catalog.models import HardwarePool, ModelVersion
from routing.accounts.accounts import account_create
from routing.batches.progress import batch_chart, run_axis
from routing.models import Batch, Notice, PoolLoad
from routing.retirement.attention import attention
from tests.helpers import batch_make, batch_run, jsonl

pytestmark = pytest.mark.django_db

HOUR = 3600.0


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def test_the_run_chart_spans_the_run_not_the_window():
    # A 20 s run in an 8 h window: the axis ends near 20 s, the window is only written.
    assert run_axis(18.0, 20.0, 8 * HOUR) == (20.0, False)
    # A run that takes most of its window: the window's end is on the chart.
    assert run_axis(5 * HOUR, 6 * HOUR, 8 * HOUR) == (8 * HOUR, True)
    # Finished later than predicted: the axis reaches the last finish.
    assert run_axis(90.0, 60.0, 8 * HOUR) == (90.0, False)


def test_home_lists_what_needs_attention_with_links(admin_client, builtin_catalog):
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        model=luna,
        retires_on=lifecycle.utc_today() + dt.timedelta(days=20),
        successor=None,
        actor="test",
        notice_override="test",
    )
    pool = HardwarePool.objects.get(slug="cs3-ultrafast")
    PoolLoad.objects.create(pool=pool, background_utilisation=0.93)
    account, _ = account_create(name="ops-test", default_credits=Decimal(100))
    Notice.objects.create(
        account=account,
        model=luna,
        retires_on=luna.retires_on,
        delivery=Notice.Delivery.FAILED,
        body={},
    )
    at = timezone.now()
    batch = batch_make(account, jsonl(5), window="1h", at=at)
    Batch.objects.filter(pk=batch.pk).update(predicted_finish_at=at + dt.timedelta(hours=2))

    a = attention()
    assert [r.model.slug for r in a.retiring] == ["gpt-5.6-luna"] and a.retiring[0].inside_notice
    assert [p.pool.slug for p in a.pools] == ["cs3-ultrafast"]
    assert [(f.model.slug, f.count) for f in a.failed_notices] == [("gpt-5.6-luna", 1)]
    assert [b.batch.pk for b in a.batches] == [batch.pk]
    assert "after its window ends" in a.batches[0].why

    html = admin_client.get("/admin/").content.decode()
    assert 'id="attention"' in html
    for link in (
        f"/admin/catalog/modelversion/{luna.pk}/change/",
        "/admin/routing/retirementapplication/impact/gpt-5.6-luna/",
        f"/admin/catalog/hardwarepool/{pool.pk}/change/",
        f"/admin/routing/notice/?delivery__exact=failed&amp;model__id__exact={luna.pk}",
        f"/admin/routing/batch/{batch.pk}/change/",
    ):
        assert f'href="{link}"' in html, link
    assert "inside its 182-day notice period" in html and "93 %" in html


def test_home_says_when_nothing_needs_attention(admin_client, builtin_catalog):
    assert not attention()
    assert "Nothing: no retirement coming" in admin_client.get("/admin/").content.decode()


def test_a_finished_batch_page_shows_its_run_to_the_second(admin_client, builtin_catalog):
    account, _ = account_create(name="ops-test", default_credits=Decimal(100))
    t0 = timezone.now() - dt.timedelta(hours=1)
    batch = batch_make(account, jsonl(10), window="8h", at=t0)
    batch_run(batch, t0)
    batch.refresh_from_db()
    assert batch.status == Batch.Status.COMPLETED
    assert batch_chart(batch).startswith("data:image/png;base64,")
    html = admin_client.get(f"/admin/routing/batch/{batch.pk}/change/").content.decode()
    assert f"{batch.completed_at:%Y-%m-%d %H:%M:%S}" in html
    assert "credits charged so far" in html and ".000000" not in html.split("Stored record")[0]
    listing = admin_client.get("/admin/routing/batch/").content.decode()
    assert str(batch.pk)[:8] in listing and "stream" in listing


def test_change_pages_read_credits_to_two_decimals(admin_client, builtin_catalog):
    account, _ = account_create(name="credits-test", default_credits=Decimal("5000"))
    package = account.packages.get()
    package.spent = Decimal("1234.567891")
    package.save(update_fields=["spent"])
    page = admin_client.get(f"/admin/routing/quotapackage/{package.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "1,234.57" in text and "1234.567891" not in text
    batch = batch_make(account, jsonl(3), window="1h", at=timezone.now())
    assert batch.predicted_cost is not None
    page = admin_client.get(f"/admin/routing/batch/{batch.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"{float(batch.predicted_cost):,.2f}" in text
    assert f'readonly">{batch.predicted_cost:.6f}<' not in text  # (the raw plan JSON may)


def test_home_lists_a_tier_that_missed_its_promise_and_links_to_the_late_jobs(
    admin_client, builtin_catalog, settings
):
    # Issue 24: ten jobs finished in the last hour, all claimed so late that they missed
    # their deadline (SIM_TIME_SCALE large: a simulated quarter hour is a millisecond).
    from routing.jobs import worker as jobs_worker
    from routing.models import Job
    from tests.helpers import ApiClient, job_submit

    settings.SIM_TIME_SCALE = 1e6
    _, key = account_create(name="late-co", default_credits=Decimal(1000))
    api = ApiClient(key)
    for _ in range(10):
        job_id = job_submit(api, tier="standard", deadline_seconds=600).json()["id"]
        created = Job.objects.get(pk=job_id).created_at
        job = jobs_worker.job_run(job_id, at=created + dt.timedelta(seconds=0.001))
        jobs_worker.job_finish(job_id, at=job.finishes_at)
    late = attention(timezone.now() + dt.timedelta(seconds=1)).late
    assert [(r.tier, r.model, r.finished, r.met) for r in late] == [
        ("standard", "gpt-5.6-sol", 10, 0)
    ]
    row = late[0]
    html = admin_client.get("/admin/").content.decode()
    link = (
        f"/admin/routing/job/?deadline_met__exact=0&amp;tier__id__exact={row.tier_id}"
        f"&amp;model__id__exact={row.model_id}"
    )
    assert f'href="{link}"' in html and "met 0 % of deadlines" in html
    listing = admin_client.get(link.replace("&amp;", "&"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert page.count("missed by") == 10 and "promised" in page

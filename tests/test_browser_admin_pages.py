"""Admin pages at a laptop's 1,366 x 768, in a real browser (Debian's Chromium driven by
Playwright) against a live server, after `demo_traffic` and one batch: no page scrolls
sideways, and each shows the facts an admin comes for. Screenshots go to
test-artifacts/browser/pages/."""

import datetime as dt
from io import StringIO

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.utils import timezone

from catalog import lifecycle
from catalog.loader import catalog_load
from catalog.models import ModelVersion
from routing.models import Account, Batch
from tests.helpers import batch_make, batch_run, jsonl
from tests.test_browser_admin import CHROMIUM, SHOTS, browser_page  # noqa: F401

PAGES = SHOTS / "pages"
WIDTH, HEIGHT = 1366, 768

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not __import__("pathlib").Path(CHROMIUM).exists(),
        reason="needs Debian's chromium (.ci/run installs it)",
    ),
]


def overflow(page) -> int:
    """How many pixels the page is wider than the window (0: no horizontal scroll)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


# The admin puts wide tables (change lists, inlines) in boxes that scroll sideways on
# their own: the page then fits while its right-hand columns are still out of sight.
SCROLLING_BOXES = """() => [...document.querySelectorAll('#content *')].filter(e => {
    const o = getComputedStyle(e).overflowX;
    return (o === 'auto' || o === 'scroll') && e.scrollWidth > e.clientWidth + 1;
}).map(e => (e.id || e.className || e.tagName) + ': ' + e.scrollWidth + ' in ' + e.clientWidth)"""


def visit(page, url: str, name: str) -> None:
    page.goto(url)
    page.wait_for_load_state("load")
    PAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(PAGES / f"{name}.png"), full_page=True)
    assert overflow(page) <= 0, f"{name}: {overflow(page)} px wider than the window"
    assert page.evaluate(SCROLLING_BOXES) == [], name


@pytest.fixture
def demo(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    catalog_load()
    call_command("demo_traffic", "--jobs", "60", stdout=StringIO())
    # A retirement inside its notice period, so the home page has something coming.
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    lifecycle.model_schedule_retirement(
        model=luna,
        retires_on=lifecycle.utc_today() + dt.timedelta(days=20),
        successor=ModelVersion.objects.get(slug="gpt-5.6-terra"),
        actor="test",
        notice_override="browser test",
    )
    account = Account.objects.get(name="acme-robotics")
    t0 = timezone.now() - dt.timedelta(hours=1)
    batch = batch_make(account, jsonl(40), window="8h", at=t0)
    batch_run(batch, t0)
    batch.refresh_from_db()
    assert batch.status == Batch.Status.COMPLETED, batch.errors
    return batch


def log_in(page, base: str, users, width: int, height: int) -> None:
    """A superuser logged in, the window at width x height."""
    users.objects.create_superuser("ops", "ops@example.com", "a-long-password-1")
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "a-long-password-1")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def test_admin_pages_fit_and_inform(live_server, django_user_model, demo, browser_page):  # noqa: F811 (the fixture, imported)
    page, base = browser_page, live_server.url
    log_in(page, base, django_user_model, WIDTH, HEIGHT)

    # Home: what needs attention, each line linking to the page that acts on it.
    visit(page, f"{base}/admin/", "1-home")
    attention = page.inner_text("#attention")
    assert "gpt-5.6-luna retires on" in attention and "inside its 182-day notice" in attention
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    assert page.locator(f"#attention a[href='/admin/catalog/modelversion/{luna.pk}/change/']")
    assert page.locator(
        "#attention a[href='/admin/routing/retirementapplication/impact/gpt-5.6-luna/']"
    ).count()

    # Model versions: every column in sight, status and successor (with its tier).
    visit(page, f"{base}/admin/catalog/modelversion/", "2-model-versions")
    spark = ModelVersion.objects.get(slug="gpt-5.3-codex-spark")
    row = page.locator("#result_list tr", has_text="gpt-5.3-codex-spark").first
    assert "retired" in row.inner_text() and "2026-09-18" in row.inner_text()
    assert "on ultrafast" in row.inner_text() and row.locator("a", has_text="impact").count()

    # A model's page: derived status, the impact link, ticked boxes, readable history.
    visit(page, f"{base}/admin/catalog/modelversion/{spark.pk}/change/", "3-model-spark")
    status = page.inner_text("#lifecycle-status-text")
    assert "since 2026-09-18" in status and "retired" not in status  # the badge says it
    assert page.get_attribute("#impact-link", "href").endswith("/impact/gpt-5.3-codex-spark/")
    assert page.locator("input[name=input_modalities][value=text]").is_checked()
    assert page.locator("textarea[name=input_modalities]").count() == 0
    history = page.inner_text("#history-group")
    assert "retirement on 2026-09-18" in history and "->" not in history
    assert "gpt-5.3-codex-spark.retires_on" not in page.inner_text("#content")

    # The impact view: fits, numbers for people, the chart, Model versions highlighted.
    visit(page, f"{base}/admin/routing/retirementapplication/impact/{spark.slug}/", "4-impact")
    assert "retired since 2026-09-18" in page.inner_text("#impact-status")
    changes = page.locator("#impact-accounts td.cost-change").all_inner_texts()
    assert changes and all(c.endswith("x") for c in changes), changes  # "17x", not "1613 %"
    assert page.locator("#impact-chart").is_visible()
    assert page.inner_text("#nav-sidebar .current-model").strip().startswith("Model versions")
    assert "200.00" in page.inner_text("#impact-packages")
    assert "200.000000" not in page.inner_text("#impact-packages")

    # Batches: short ids, cost in sight; the batch page's chart scaled to its run.
    visit(page, f"{base}/admin/routing/batch/", "5-batches")
    row = page.locator("#result_list tbody tr").first
    assert str(demo.pk)[:8] in row.inner_text() and str(demo.pk) not in row.inner_text()
    assert "(40 streams)" in row.inner_text() and "Completed" in row.inner_text()
    visit(page, f"{base}/admin/routing/batch/{demo.pk}/change/", "6-batch")
    assert page.locator("img[alt^='requests completed']").is_visible()
    completed = page.locator(".field-completed_at .readonly").inner_text()
    assert completed == f"{demo.completed_at:%Y-%m-%d %H:%M:%S}", completed
    assert ".000000" not in page.inner_text("#content")

    # Every other list page of the catalog and of routing fits as well.
    for model in admin.site._registry:
        if model._meta.app_label in ("catalog", "routing"):
            opts = model._meta
            visit(page, f"{base}/admin/{opts.app_label}/{opts.model_name}/", f"list-{opts.label}")


PHONE_WIDTH, PHONE_HEIGHT = 390, 844


# What reaches past the window's right edge (the deepest such elements), for the message.
PAST_THE_EDGE = """() => [...document.querySelectorAll('body *')].filter(e =>
    e.getBoundingClientRect().right > window.innerWidth + 1
    && ![...e.children].some(c => c.getBoundingClientRect().right > window.innerWidth + 1)
).slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className + ': '
    + Math.round(e.getBoundingClientRect().right))"""

# Wide tables may scroll in their own box: the admin's change lists (.results) and the
# boxes of the site's own pages (.table-scroll).
OWN_SCROLLERS = ("results:", "table-scroll:")


def visit_phone(page, url: str, name: str) -> None:
    """A page at a phone's 390 px: the page itself never scrolls sideways; a wide change
    list may scroll inside its own box (the admin's), nothing else may."""
    page.goto(url)
    page.wait_for_load_state("load")
    PAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(PAGES / f"phone-{name}.png"), full_page=True)
    assert overflow(page) <= 0, (name, overflow(page), page.evaluate(PAST_THE_EDGE))
    boxes = [b for b in page.evaluate(SCROLLING_BOXES) if not b.startswith(OWN_SCROLLERS)]
    assert boxes == [], (name, boxes)


def test_admin_pages_fit_a_phone(live_server, django_user_model, demo, browser_page):  # noqa: F811 (the fixture, imported)
    page, base = browser_page, live_server.url
    log_in(page, base, django_user_model, PHONE_WIDTH, PHONE_HEIGHT)
    spark = ModelVersion.objects.get(slug="gpt-5.3-codex-spark")
    for url, name in [
        ("/admin/", "home"),
        ("/admin/catalog/modelversion/", "model-versions"),
        (f"/admin/routing/retirementapplication/impact/{spark.slug}/", "impact"),
        ("/admin/routing/job/", "jobs"),
        ("/admin/routing/batch/", "batches"),
    ]:
        visit_phone(page, base + url, name)
        if name == "model-versions":
            # the change list scrolls in its box; its first columns are in sight
            status = page.locator("#result_list tbody tr td.field-status_badge").first
            box = status.bounding_box()
            assert box and box["x"] + box["width"] <= PHONE_WIDTH, box

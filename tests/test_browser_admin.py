"""The retirement workflow in a real browser: headless Chromium (Debian's, driven by
Playwright) against the admin on a live server. Screenshots of each screen go to
test-artifacts/browser/."""

import datetime as dt
import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from catalog import lifecycle
from catalog.loader import catalog_load
from catalog.models import ModelVersion

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="needs Debian's chromium (.ci/run installs it)"
    ),
]


@pytest.fixture
def browser_page():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the test
    # makes between browser steps are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            yield page
        finally:
            browser.close()
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_schedule_inspect_and_retire_in_the_admin(live_server, django_user_model, browser_page):
    catalog_load()
    call_command("demo_traffic", "--jobs", "60", stdout=StringIO())
    django_user_model.objects.create_superuser("ops", "ops@example.com", "a-long-password-1")
    page = browser_page

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "a-long-password-1")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    shot(page, "1-admin-home")

    # Schedule a retirement of GPT-5.6 Luna with Terra as successor.
    page.goto(f"{live_server.url}/admin/catalog/modelversion/")
    luna = ModelVersion.objects.get(slug="gpt-5.6-luna")
    page.check(f"input[name=_selected_action][value='{luna.pk}']")
    page.select_option("select[name=action]", "schedule_retirement")
    page.click("button[name=index]")
    page.wait_for_selector("#lifecycle-action-form")
    retires = lifecycle.utc_today() + dt.timedelta(days=45)
    page.fill("#id_retires_on", retires.isoformat())
    page.select_option("#id_successor", label="gpt-5.6-terra")
    page.fill("#id_reason", "Terra covers Luna's work")
    page.fill("#id_notice_override", "browser test: short notice agreed with users")
    shot(page, "2-schedule-form")
    page.click("input[name=apply]")
    page.wait_for_selector(".messagelist")
    assert "Retirement scheduled: gpt-5.6-luna" in page.inner_text(".messagelist")
    shot(page, "3-scheduled")
    luna.refresh_from_db()
    assert luna.retires_on == retires and luna.successor.slug == "gpt-5.6-terra"

    # The impact of Spark's retirement: users, migration to Sol Ultrafast, capacity.
    page.goto(f"{live_server.url}/admin/routing/retirementapplication/impact/gpt-5.3-codex-spark/")
    page.wait_for_selector("#impact-accounts")
    assert "acme-robotics" in page.inner_text("#impact-accounts")
    assert page.locator("#impact-chart").is_visible()
    shot(page, "4-impact-spark")

    # Retire Luna now (inside its notice policy: an override reason is required).
    page.goto(f"{live_server.url}/admin/catalog/modelversion/")
    page.check(f"input[name=_selected_action][value='{luna.pk}']")
    page.select_option("select[name=action]", "retire_now")
    page.click("button[name=index]")
    page.wait_for_selector("#lifecycle-action-form")
    page.fill("#id_notice_override", "incident: unsafe output")
    shot(page, "5-retire-now-form")
    page.click("input[name=apply]")
    page.wait_for_selector(".messagelist")
    assert "Retired: gpt-5.6-luna" in page.inner_text(".messagelist")
    shot(page, "6-retired")
    luna.refresh_from_db()
    assert lifecycle.model_status(luna) == "retired"


def test_staff_log_in_with_an_authenticator_code(
    live_server, django_user_model, browser_page, settings
):
    """Production settings (ADMIN_REQUIRE_2FA): the login page asks for the code; the
    password alone is refused, the code (computed from the device's key, as the app
    would) lets the user in."""
    from django_otp.oath import TOTP
    from django_otp.plugins.otp_totp.models import TOTPDevice

    from routing.staffauth import staff_enrol

    settings.ADMIN_REQUIRE_2FA = True
    django_user_model.objects.create_superuser("ops", "ops@example.com", "a-long-password-1")
    staff_enrol("ops")
    device = TOTPDevice.objects.get(user__username="ops")
    page = browser_page

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "a-long-password-1")
    shot(page, "0-login-2fa")
    page.click("input[type=submit]")
    page.wait_for_selector(".errornote")
    assert "authenticator" in page.inner_text("#content")
    page.goto(f"{live_server.url}/admin/")
    assert "/admin/login/" in page.url

    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    page.fill("#id_username", "ops")
    page.fill("#id_password", "a-long-password-1")
    page.fill("#id_otp_token", f"{totp.token():0{device.digits}d}")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    assert page.url.rstrip("/").endswith("/admin")

"""Staff two-factor (issue 30, item 6): with ADMIN_REQUIRE_2FA on (the default with DEBUG
off), the admin wants an authenticator's TOTP code (or a backup code) after the password;
a staff user without one never reaches /admin/ pages; a wrong code counts toward
django-axes' lockout like a wrong password. The codes are computed here from the device's
key with django-otp's own TOTP, as an authenticator app would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from axes.models import AccessAttempt
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import AsyncClient, Client
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from routing.staffauth import staff_enrol

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
PASSWORD = "a-long-password-1"
HERE = "203.0.113.7"
PAGES = ("/admin/", "/admin/catalog/modelversion/", "/admin/auth/user/")


@pytest.fixture
def required(settings):
    settings.ADMIN_REQUIRE_2FA = True


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_superuser("ops", "ops@example.com", PASSWORD)


def code(device: TOTPDevice, steps_ahead: int = 0) -> str:
    """The authenticator app's code now (or a step later: within the device's tolerance)."""
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():0{device.digits}d}"


def wrong_code(device: TOTPDevice) -> str:
    valid = {code(device, k) for k in (-2, -1, 0, 1, 2)}
    return next(c for c in ("000000", "111111", "222222") if c not in valid)


def login(client: Client, token: str | None = None, password: str = PASSWORD):
    data = {"username": "ops", "password": password, "next": "/admin/"}
    if token is not None:
        data["otp_token"] = token
    return client.post(LOGIN, data)


def logged_in(r) -> bool:
    return r.status_code == 302 and r["Location"] == "/admin/"


def reaches_admin(client: Client) -> bool:
    codes = {client.get(page).status_code for page in PAGES}
    assert codes <= {200, 302}, codes
    return codes == {200}


def test_staff_without_a_second_factor_cannot_reach_the_admin(required, ops):
    client = Client(REMOTE_ADDR=HERE)
    r = login(client)
    assert r.status_code == 200 and not logged_in(r)
    text = r.content.decode()
    assert "no second factor yet" in text and "staff_2fa enrol" in text
    assert not reaches_admin(client)
    # Even a session logged in by password alone (no verified device) is sent to the login.
    client.force_login(ops)
    r = client.get("/admin/catalog/modelversion/")
    assert r.status_code == 302 and r["Location"].startswith(LOGIN)
    assert not reaches_admin(client)


def test_the_right_code_lets_staff_in_and_the_login_page_asks_for_it(required, ops):
    device = TOTPDevice.objects.get(user=ops, pk=_enrol().pk)
    client = Client(REMOTE_ADDR=HERE)
    page = client.get(LOGIN).content.decode()
    assert 'name="otp_token"' in page and "Authentication code" in page
    assert not logged_in(login(client))  # the password alone: the code is asked for
    assert not reaches_admin(client)
    used = code(device)
    assert logged_in(login(client, used))
    assert reaches_admin(client)
    # The same code cannot be used twice (a replayed code); the next one works. The replay
    # is the very string sent above: computing it again could land in the next 30-s step
    # and give a fresh code, which is rightly accepted.
    other = Client(REMOTE_ADDR=HERE)
    assert not logged_in(login(other, used))
    device.refresh_from_db()
    device.throttling_failure_count = 0  # django-otp's own delay after a failure
    device.save()
    assert logged_in(login(other, code(device, 1)))


def test_under_asgi_as_the_web_server_runs_it(required, ops):
    """The middleware's async path (gunicorn + uvicorn): the same refusals and the same
    way in."""
    device = _enrol()
    client = AsyncClient(REMOTE_ADDR=HERE)
    get, post = async_to_sync(client.get), async_to_sync(client.post)
    form = {"username": "ops", "password": PASSWORD, "next": "/admin/"}
    assert post(LOGIN, form).status_code == 200  # no code: the form again
    assert get("/admin/").status_code == 302
    r = post(LOGIN, {**form, "otp_token": code(device)})
    assert r.status_code == 302 and r["Location"] == "/admin/"
    assert get("/admin/").status_code == 200
    assert get("/api/v1/models").status_code == 200  # the API: no session, no second factor


def test_a_wrong_code_fails_and_counts_toward_the_lockout(required, ops):
    device = _enrol()
    client = Client(REMOTE_ADDR=HERE)
    for attempt in range(1, 5):
        r = login(client, wrong_code(device))
        assert r.status_code == 200 and not logged_in(r)
        assert AccessAttempt.objects.get(username="ops").failures_since_start == attempt
    r = login(client, wrong_code(device))
    assert r.status_code == 429 and "Too many failed logins" in r.content.decode()
    # Locked: even the right password and code are refused, and the admin stays shut.
    assert login(client, code(device)).status_code == 429
    assert not reaches_admin(client)


def test_a_wrong_password_still_counts_as_before(required, ops):
    device = _enrol()
    client = Client(REMOTE_ADDR=HERE)
    for _ in range(4):
        assert login(client, code(device), password="wrong").status_code == 200
    assert login(client, code(device), password="wrong").status_code == 429


def test_a_backup_code_works_once(required, ops):
    enrolment = staff_enrol("ops", backup_codes=3)
    first = enrolment.backup_codes[0]
    assert logged_in(login(Client(REMOTE_ADDR=HERE), first))
    assert StaticToken.objects.filter(device__user=ops).count() == 2
    assert not logged_in(login(Client(REMOTE_ADDR=HERE), first))


def test_reset_removes_every_factor_and_enrol_replaces_the_authenticator(required, ops):
    old = _enrol()
    out = StringIO()
    call_command("staff_2fa", "enrol", "ops", "--no-qr", stdout=out)
    assert "otpauth://totp/" in out.getvalue() and "issuer=" in out.getvalue()
    new = TOTPDevice.objects.get(user=ops)
    assert new.pk != old.pk
    assert not logged_in(login(Client(REMOTE_ADDR=HERE), code(old)))  # the old app's code
    call_command("staff_2fa", "reset", "ops", stdout=StringIO())
    r = login(Client(REMOTE_ADDR=HERE), code(new))
    assert "no second factor yet" in r.content.decode()
    status = StringIO()
    call_command("staff_2fa", "status", stdout=status)
    assert "ops: NO authenticator, 0 backup code(s) left" in status.getvalue()


def test_the_command_refuses_unknown_and_non_staff_users(django_user_model):
    django_user_model.objects.create_user("client", password=PASSWORD)
    for name in ("nobody", "client"):
        with pytest.raises(CommandError):
            call_command("staff_2fa", "enrol", name, stdout=StringIO())


def test_the_qr_code_prints(ops):
    out = StringIO()
    call_command("staff_2fa", "enrol", "ops", stdout=out)
    assert "█" in out.getvalue() or "▀" in out.getvalue()


def test_with_the_setting_off_a_password_is_enough(settings, ops):
    settings.ADMIN_REQUIRE_2FA = False  # `make run`, the test suite
    client = Client(REMOTE_ADDR=HERE)
    assert 'name="otp_token"' not in client.get(LOGIN).content.decode()
    assert logged_in(login(client))
    assert reaches_admin(client)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DEBUG": "0"}, True),
        ({"DEBUG": "1"}, False),
        ({"DEBUG": "0", "ADMIN_REQUIRE_2FA": "0"}, False),
    ],
)
def test_required_by_default_when_debug_is_off(env, expected):
    root = Path(__file__).resolve().parents[3]
    code = "import django; django.setup(); from django.conf import settings as s; print(s.ADMIN_REQUIRE_2FA)"
    environ = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "ADMIN_REQUIRE_2FA"}}
    environ.update(env, SECRET_KEY="x" * 50, DJANGO_SETTINGS_MODULE="deploy.settings")
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(expected)


def _enrol() -> TOTPDevice:
    staff_enrol("ops")
    return TOTPDevice.objects.get(user__username="ops")

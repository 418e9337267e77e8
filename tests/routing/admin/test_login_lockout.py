"""Admin login throttling (issue 13: "30 wrong passwords in 9.7 s, no delay"): after
ADMIN_LOGIN_FAILURES failed logins a username is locked out from that address for
ADMIN_LOCKOUT_MINUTES with a clear page; the lockout ends by itself (attempts during it
do not extend it), never touches the same admin from another address, is cleared by a
successful login, and staff can lift it early (command or admin)."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
PASSWORD = "a-long-password-1"
HERE = "203.0.113.7"
ELSEWHERE = "198.51.100.9"


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("ops", "ops@example.com", PASSWORD)


def login(password: str, *, username: str = "ops", ip: str = HERE):
    client = Client(REMOTE_ADDR=ip)
    r = client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"})
    return r


def logged_in(r) -> bool:
    return r.status_code == 302 and r["Location"] == "/admin/"


def fail(times: int, **kw) -> None:
    for _ in range(times):
        r = login("wrong", **kw)
        assert r.status_code == 200, r.status_code  # the form again, with its error
        assert b"Please enter the correct username and password" in r.content


def lock(**kw) -> None:
    """Five failed logins: the fifth answers the lockout page."""
    fail(4, **kw)
    assert_locked(login("wrong", **kw))


def assert_locked(r):
    assert r.status_code == 429
    text = r.content.decode()
    assert "Too many failed logins" in text and "ops" in text
    assert "15 minutes" in text
    assert "axes_reset_username" in text


def age_attempts(minutes: float) -> None:
    """Pretend the recorded attempts were made `minutes` earlier."""
    for attempt in AccessAttempt.objects.all():
        attempt.attempt_time -= dt.timedelta(minutes=minutes)
        attempt.save(update_fields=["attempt_time"])


def test_five_failures_lock_the_username_from_that_address(admin_user):
    lock()
    assert_locked(login("wrong"))
    assert_locked(login(PASSWORD))  # even the right password, while locked


def test_the_same_admin_from_another_address_is_not_locked_out(admin_user):
    lock()
    assert_locked(login(PASSWORD))
    assert logged_in(login(PASSWORD, ip=ELSEWHERE))


def test_the_lockout_ends_after_the_cool_off_and_attempts_during_it_do_not_extend_it(
    admin_user,
):
    lock()
    age_attempts(10)
    assert_locked(login("wrong"))  # 10 minutes in: still locked, and this does not extend it
    age_attempts(6)
    assert logged_in(login(PASSWORD))


def test_a_successful_login_clears_the_count(admin_user):
    fail(4)
    assert logged_in(login(PASSWORD))
    fail(4)
    assert logged_in(login(PASSWORD))


def test_unknown_usernames_are_locked_out_too(admin_user):
    fail(4, username="root")
    assert login("wrong", username="root").status_code == 429
    assert logged_in(login(PASSWORD))  # ops from the same address is another pair


def test_staff_unlock_with_the_command(admin_user):
    lock()
    assert_locked(login(PASSWORD))
    call_command("axes_reset_username", "ops", stdout=StringIO())
    assert logged_in(login(PASSWORD))


def test_staff_see_and_delete_lockouts_in_the_admin(admin_user, django_user_model):
    lock()
    other = django_user_model.objects.create_superuser("lead", "lead@example.com", PASSWORD)
    staff = Client()
    staff.force_login(other)
    listing = staff.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and b"203.0.113.7" in listing.content
    attempt = AccessAttempt.objects.get(username="ops")
    r = staff.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert r.status_code == 302
    assert logged_in(login(PASSWORD))


def test_the_limit_and_cool_off_come_from_settings(admin_user, settings):
    settings.AXES_FAILURE_LIMIT = 2
    fail(1)
    assert login("wrong").status_code == 429
    assert login(PASSWORD).status_code == 429

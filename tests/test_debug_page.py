"""Issue 13: with DEBUG on (`make run`), Django's debug pages are for loopback clients
only, and never show credentials (httpedge/debugpage.py)."""

from __future__ import annotations

import json

import pytest
from django.http import Http404
from django.test import Client
from django.urls import include, path

from deploy.urls import handler400, handler404, handler500  # noqa: F401 (this URLconf's)
from httpedge.debugpage import CredentialsFilter, is_local_client

PROBLEM = "application/problem+json"
# Built at run time: the debug page shows source lines, and secrets live in the
# environment, never in the code.
DB_PW, BROKER_PW = "-".join(["db", "pw", "4711"]), "-".join(["broker", "pw", "0815"])
DB_URL = f"postgres://svc:{DB_PW}@db.internal:5432/lifecycle"
BROKER_URL = f"redis://:{BROKER_PW}@redis.internal:6379/0"


def boom(request):
    database_url = DB_URL  # a local variable the debug page lists  # noqa: F841
    raise RuntimeError("boom")


def missing(request):
    raise Http404("no such thing")


urlpatterns = [
    path("boom/", boom),
    path("missing/", missing),
    path("", include("deploy.urls")),
]


@pytest.fixture
def debug_on(settings):
    settings.DEBUG = True
    settings.ROOT_URLCONF = __name__
    settings.CELERY_BROKER_URL = BROKER_URL
    return settings


def client_from(addr: str, **extra) -> Client:
    return Client(raise_request_exception=False, REMOTE_ADDR=addr, **extra)


@pytest.mark.parametrize("addr", ["203.0.113.9", "10.0.0.7", "2001:db8::1"])
def test_a_remote_client_gets_problem_json_not_the_debug_500_page(debug_on, addr):
    r = client_from(addr).get("/boom/")
    assert r.status_code == 500 and r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["type"].endswith("/internal-error")
    assert b"Traceback" not in r.content and b"RuntimeError" not in r.content


@pytest.mark.parametrize("url", ["/missing/", "/nothing-here/"])
def test_a_remote_client_gets_problem_json_not_the_debug_404_page(debug_on, url):
    r = client_from("203.0.113.9").get(url)
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM, r.content[:200]
    assert b"URLconf" not in r.content and b"DEBUG" not in r.content


def test_a_request_through_a_proxy_is_not_local(debug_on):
    r = client_from("127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").get("/boom/")
    assert r.status_code == 500 and r["Content-Type"] == PROBLEM


@pytest.mark.parametrize("addr", ["127.0.0.1", "::1", "127.0.0.2", "::ffff:127.0.0.1"])
def test_a_loopback_client_gets_the_debug_page(debug_on, addr):
    r = client_from(addr).get("/boom/")
    assert r.status_code == 500 and r["Content-Type"].startswith("text/html")
    assert b"RuntimeError" in r.content
    r = client_from(addr).get("/nothing-here/")
    assert r.status_code == 404 and r["Content-Type"].startswith("text/html")


def test_internal_ips_see_the_debug_page(debug_on):
    debug_on.INTERNAL_IPS = ["10.0.0.7"]
    r = client_from("10.0.0.7").get("/boom/")
    assert r.status_code == 500 and r["Content-Type"].startswith("text/html")


def test_with_debug_off_nothing_changes(settings):
    settings.ROOT_URLCONF = __name__
    r = client_from("127.0.0.1").get("/boom/")
    assert r.status_code == 500 and r["Content-Type"] == PROBLEM


def test_the_debug_page_shows_no_credentials(debug_on):
    # The request's environment under runserver holds os.environ (DATABASE_URL...).
    r = client_from("127.0.0.1", DATABASE_URL=DB_URL, CELERY_BROKER_URL=BROKER_URL).get("/boom/")
    assert r.status_code == 500 and b"RuntimeError" in r.content
    page = r.content.decode()
    for secret in (DB_PW, BROKER_PW, debug_on.SECRET_KEY):
        assert secret not in page
    assert "CELERY_BROKER_URL" in page and "database_url" in page  # listed, hidden
    # The plain-text page (curl, no Accept: text/html) too.
    r = client_from("127.0.0.1", DATABASE_URL=DB_URL).get("/boom/", HTTP_ACCEPT="text/plain")
    assert r["Content-Type"].startswith("text/plain")
    assert DB_PW not in r.content.decode() and BROKER_PW not in r.content.decode()


def test_the_filter_hides_database_passwords_and_urls_with_a_password():
    f = CredentialsFilter()
    dbs = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "lifecycle",
            "USER": "svc",
            "PASSWORD": DB_PW,
            "OPTIONS": {"service": "x", "dsn": DB_URL},
        }
    }
    cleansed = f.cleanse_setting("DATABASES", dbs)
    assert DB_PW not in json.dumps(cleansed)
    assert cleansed["default"]["NAME"] == "lifecycle"
    assert f.cleanse_setting("CELERY_BROKER_URL", BROKER_URL) == f.cleansed_substitute
    # A URL without a password stays readable.
    assert f.cleanse_setting("PUBLIC_BASE_URL", "http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert (
        f.cleanse_setting("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
        == "redis://127.0.0.1:6379/0"
    )


@pytest.mark.django_db
def test_a_body_over_the_limit_is_a_413_also_with_debug_on(debug_on, builtin_catalog):
    from decimal import Decimal

    from routing.accounts.accounts import account_create

    debug_on.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    _, key = account_create(name="big", default_credits=Decimal(1))
    r = client_from("127.0.0.1").post(
        "/api/v1/quotes",
        json.dumps({"model": "sol", "pad": "x" * 2000}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert r.status_code == 413 and r["Content-Type"] == PROBLEM
    assert r.json()["type"].endswith("/request-too-large")


def test_is_local_client_refuses_garbage():
    class R:
        META = {"REMOTE_ADDR": "not-an-ip"}

    assert not is_local_client(R())

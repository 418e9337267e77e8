"""The browser's middleware (sessions, Django's user, messages) is passed by on the
API's paths (httpedge.middleware.browser_only, issue 16) and still runs for the admin,
under the WSGI handler and the ASGI one; the API keeps its security headers. (CSRF is
Django's own middleware everywhere, as check --deploy asks: the API's views are
csrf_exempt, so it only looks at them; the admin keeps its checks, tested below.)"""

import pytest
from asgiref.sync import async_to_sync
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.test import AsyncClient, Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser_middleware_refuses_api(monkeypatch):
    """Any of the browser's middleware touching an API request fails the test."""
    seen = []

    def spy(cls, name):
        real = getattr(cls, name)

        def hook(self, request, *args):
            if request.path.startswith(("/api/", "/v1/")):
                seen.append((cls.__name__, name, request.path))
            return real(self, request, *args)

        monkeypatch.setattr(cls, name, hook)

    spy(SessionMiddleware, "process_request")
    spy(MessageMiddleware, "process_request")
    return seen


def api_headers_ok(r):
    assert r.status_code == 200
    assert "Set-Cookie" not in r.headers and "Cookie" not in r.headers.get("Vary", "")
    assert r["X-Frame-Options"] == "DENY" and r["X-Content-Type-Options"] == "nosniff"


def test_api_paths_skip_the_browser_middleware(browser_middleware_refuses_api):
    api_headers_ok(Client().get("/api/v1/ping"))
    assert Client().get("/v1/models").status_code == 200  # the compat surface
    assert browser_middleware_refuses_api == []


def test_api_paths_skip_the_browser_middleware_under_asgi(browser_middleware_refuses_api):
    api_headers_ok(async_to_sync(AsyncClient().get)("/api/v1/ping"))
    assert browser_middleware_refuses_api == []


def test_the_admin_keeps_sessions_and_csrf(browser_middleware_refuses_api):
    client = Client(enforce_csrf_checks=True)
    r = client.get("/admin/login/")
    assert r.status_code == 200 and "csrftoken" in r.cookies
    refused = client.post("/admin/login/", {"username": "x", "password": "y"})
    assert refused.status_code == 403  # no CSRF token
    token = r.cookies["csrftoken"].value
    r = client.post(
        "/admin/login/", {"username": "x", "password": "y", "csrfmiddlewaretoken": token}
    )
    assert r.status_code == 200 and b"Please enter the correct username" in r.content


def test_the_admin_keeps_csrf_under_asgi():
    client = AsyncClient(enforce_csrf_checks=True)
    r = async_to_sync(client.get)("/admin/login/")
    assert r.status_code == 200 and "csrftoken" in r.cookies
    assert async_to_sync(client.post)("/admin/login/", {"username": "x"}).status_code == 403

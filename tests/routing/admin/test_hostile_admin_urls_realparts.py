"""The hostile admin URLs of test_hostile_admin_urls.py, and a job's change page, through
the web server as deployed (gunicorn with uvicorn workers, PostgreSQL, Redis), as a
logged-in staff user: none is a 500 (issue 23, finding 4). uvicorn decodes `%00` into
the path the middleware sees, so this is the path a real client takes."""

from __future__ import annotations

import http.client
import json
import re
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest

from tests.realparts import free_port, run_manage, start_web
from tests.routing.admin.test_hostile_admin_urls import HOSTILE

pytestmark = pytest.mark.realparts


class Session:
    """Raw HTTP (paths sent exactly as written) with the cookies the server set."""

    def __init__(self, port: int):
        self.port, self.cookies = port, {}

    def request(self, method: str, path: str, body: str | None = None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        conn.request(
            method, path, body, {**({"Cookie": cookie} if cookie else {}), **(headers or {})}
        )
        r = conn.getresponse()
        content = r.read()
        for header in r.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        conn.close()
        return r.status, r.headers, content


def test_hostile_admin_urls_through_the_deployed_server(real_project):
    env = {**real_project.env, "DJANGO_SUPERUSER_PASSWORD": "a-long-test-password-1"}
    run_manage(env, "createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.test")
    run_manage(env, "loadcatalog")
    key = json.loads(run_manage(env, "create_account", "hostile", "--json"))["api_key"]
    port = free_port()
    web = start_web(env, port, name=f"web-{port}")
    try:
        web.wait_ready(60)
        s = Session(port)
        job = {"model": "sol", "input_tokens": 100, "output_tokens": 100, "deadline_seconds": 600}
        status, _, body = s.request(
            "POST",
            "/api/v1/jobs",
            json.dumps(job),
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        assert status == 202, body[:300]
        job_id = json.loads(body)["id"]
        s.cookies.clear()

        status, _, page = s.request("GET", "/admin/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = {
            "username": "ops",
            "password": env["DJANGO_SUPERUSER_PASSWORD"],
            "csrfmiddlewaretoken": token.decode(),
            "next": "/admin/",
        }
        status, headers, _ = s.request(
            "POST",
            "/admin/login/",
            urlencode(form),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert status == 302 and headers["Location"] == "/admin/", status
        status, _, page = s.request("GET", f"/admin/routing/job/{job_id}/change/")
        assert status == 200 and job_id.encode() in page
        answers = {url: s.request("GET", url)[:2] for url in HOSTILE}
        failures = {url: code for url, (code, _) in answers.items() if code >= 500}
        assert failures == {}
        for url, (code, headers) in answers.items():
            if code in (400, 404) and url.startswith("/admin/"):
                assert headers["Content-Type"].startswith("text/html"), url
    finally:
        web.stop(10)

"""Issue 13 with real parts: the web app under gunicorn on a throwaway PostgreSQL that
the test stops and starts again. While the database is down every API call answers 503
problem+json with Retry-After (no 500, no HTML); once it is back the same calls work."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.stack import SMALL, Stack

pytestmark = pytest.mark.realparts


@pytest.fixture
def stack(postgres_server, redis_server, broker_server):
    """The service's processes (tests/conftest.py's `stack`), with a request waiting 1 s
    for a database connection before its 503 instead of the default 5
    (DB_POOL_TIMEOUT): what is checked is the answer, and five calls of 5 s or more
    made this test a minute long."""
    s = Stack(postgres_server, redis_server, broker=broker_server, extra_env={"DB_POOL_TIMEOUT": 1})
    try:
        yield s
    finally:
        s.close()


def call(stack: Stack, method: str, path: str, body: dict | None = None):
    """(status, headers, parsed body) of one request to the stack's web process."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {stack.key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"{}")


def test_the_database_down_answers_503_with_retry_after_and_recovers(stack):
    assert call(stack, "GET", "/api/v1/quota")[0] == 200
    job = stack.submit()

    stack.pg.stop()
    for method, path, body in [
        ("GET", "/api/v1/quota", None),
        ("GET", "/api/v1/jobs", None),
        ("GET", f"/api/v1/jobs/{job['id']}", None),
        ("POST", "/api/v1/jobs", SMALL),
        ("GET", "/api/v1/models/", None),
    ]:
        status, headers, problem = call(stack, method, path, body)
        assert status == 503, (method, path, problem, stack.logs())
        assert headers["Content-Type"] == "application/problem+json"
        assert headers["Retry-After"] == "5"
        assert problem["type"].endswith("/problems/service-unavailable")
        assert "postgres" not in json.dumps(problem)  # no connection details leak

    stack.pg.start()
    assert call(stack, "GET", "/api/v1/quota")[0] == 200
    assert call(stack, "GET", f"/api/v1/jobs/{job['id']}")[0] == 200

"""Issue 13, a body over the limit: 413 `request-too-large`, and the keep-alive connection
handled honestly, against the real servers: gunicorn with uvicorn workers (ASGI, as
`make run` and production serve: deploy/asgibody.py), gunicorn gthread (WSGI,
deploy/wsgi.py) and runserver. A 3 MB body (over DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB) is drained, so the next
request on the same connection is answered; a body over REQUEST_DRAIN_MAX_BYTES is not
read and the response says `Connection: close` (deploy/bodydrain.py)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from tests.realparts import (
    BIN_DIR,
    ServiceProcess,
    free_port,
    run_manage,
    sqlite_project,
    start_web,
)

pytestmark = pytest.mark.realparts

DRAIN_MAX = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def web_env():
    env = sqlite_project(
        REQUEST_DRAIN_MAX_BYTES=DRAIN_MAX,
        REQUEST_MAX_BYTES=DRAIN_MAX,  # ASGI: refused before it is read
        LOG_LEVEL="WARNING",
    )
    key = json.loads(run_manage(env, "create_account", "drain", "--json"))["api_key"]
    return env, key


def _gunicorn(port: int) -> list[str]:
    return [
        str(BIN_DIR / "gunicorn"),
        "deploy.wsgi",
        "-b",
        f"127.0.0.1:{port}",
        "-w",
        "1",
        "-k",
        "gthread",
        "--threads",
        "2",
    ]


def _runserver(port: int) -> list[str]:
    return [str(BIN_DIR / "python"), "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]


@pytest.fixture(params=["asgi", "gunicorn", "runserver"])
def server(request, web_env):
    env, key = web_env
    port = free_port()
    if request.param == "asgi":
        proc = start_web(env, port, name=f"asgi-{port}")  # a log of its own
        try:
            proc.wait_ready(30)
            yield port, key, proc
        finally:
            proc.stop(5)
        return
    argv = _gunicorn(port) if request.param == "gunicorn" else _runserver(port)
    marker = "Booting worker" if request.param == "gunicorn" else "Quit the server"
    proc = ServiceProcess(
        argv,
        env=env,
        name=request.param,
        log_path=Path(env["VAR_DIR"]) / "log" / f"{request.param}-{port}.log",
        ready_marker=marker,
    )
    try:
        proc.wait_ready(30)
        yield port, key, proc
    finally:
        proc.stop(5)


def _post_quote(conn: http.client.HTTPConnection, key: str, size: int):
    body = b'{"model": "sol", "pad": "' + b"x" * (size - 30) + b'"}'
    conn.request(
        "POST",
        "/api/v1/quotes",
        body=body,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Connection": "keep-alive",
        },
    )
    r = conn.getresponse()
    raw = r.read()
    try:
        return r, json.loads(raw)
    except ValueError:
        raise AssertionError(f"{r.status} {r.getheaders()} {raw[:500]!r}") from None


def test_a_3mb_body_is_a_413_and_the_connection_stays_usable(server):
    port, key, proc = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        r, problem = _post_quote(conn, key, 3 * 1024 * 1024)
        assert r.status == 413, (problem, proc.log_text()[-2000:])
        assert r.getheader("Content-Type") == "application/problem+json"
        assert problem["type"].endswith("/request-too-large")
        said = (r.getheader("Connection") or "keep-alive").lower()
        assert said == "keep-alive"  # HTTP/1.1: keep-alive unless it says close
        sock = conn.sock
        assert sock is not None  # http.client keeps a kept-alive connection open
        # The next request on the very same connection is answered.
        conn.request("GET", "/api/v1/ping")
        second = conn.getresponse()
        assert second.status == 200 and second.read()
        assert conn.sock is sock
    finally:
        conn.close()


def test_a_chunked_body_over_the_limit_is_refused_under_asgi(server):
    port, key, proc = server
    if not proc.name.startswith("asgi"):
        pytest.skip("the ASGI limit (deploy/asgibody.py); WSGI servers: the test above")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    chunks = (b"x" * 65536 for _ in range(DRAIN_MAX // 65536 + 16))
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=chunks,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            encode_chunked=True,
        )
        r = conn.getresponse()
        body = json.loads(r.read())
        assert r.status == 413, body
        assert body["error"]["code"] == "request_too_large"  # OpenAI's envelope on /v1/
        assert (r.getheader("Connection") or "").lower() == "close"
    finally:
        conn.close()


def test_a_body_over_the_drain_limit_says_connection_close(server):
    port, key, proc = server
    if proc.name == "runserver":
        pytest.skip("runserver reads any body to its end itself (Django's ServerHandler)")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        r, problem = _post_quote(conn, key, DRAIN_MAX + 1024 * 1024)
        assert r.status == 413 and problem["type"].endswith("/request-too-large")
        assert (r.getheader("Connection") or "").lower() == "close"
        assert conn.sock is None  # http.client closed it, as the response said
    finally:
        conn.close()

"""Throttle counts are shared by every web process: gunicorn with three worker processes
on the quick start's file cache and on Redis (the cache a redis:// broker brings) lets
exactly the rate through, whichever process answers. (A per-process cache would let
three times as many through.)"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.realparts import (
    BIN_DIR,
    ServiceProcess,
    free_port,
    sqlite_project,
)

pytestmark = pytest.mark.realparts

RATE = 6
WORKERS = 3


@pytest.fixture(params=["file", "redis"])
def web(request):
    broker = (
        request.getfixturevalue("redis_server").url
        if request.param == "redis"
        else "filesystem://localhost//"
    )
    env = sqlite_project(
        broker,
        CACHE_URL=None,
        API_THROTTLE_RATE="1000/day",
        API_THROTTLE_ANON_RATE=f"{RATE}/day",  # a day: the test never straddles a window
    )
    var = Path(env["VAR_DIR"])
    port = free_port()
    log = var / "log" / "web.log"
    proc = ServiceProcess(
        [str(BIN_DIR / "gunicorn"), "deploy.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(WORKERS)],
        env=env,
        name="web",
        log_path=log,
        ready_marker="Booting worker",
    )
    try:
        proc.wait_ready(30)
        deadline = time.monotonic() + 30
        while log.read_text().count("Booting worker") < WORKERS:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()


def get(url: str) -> tuple[int, str | None]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:  # a new connection each time
            return r.status, None
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After")


def test_the_rate_holds_across_web_processes(web):
    answers = [get(f"{web}/api/v1/tiers/") for _ in range(RATE * WORKERS)]
    assert [code for code, _ in answers] == [200] * RATE + [429] * (RATE * (WORKERS - 1))
    assert all(int(retry) >= 1 for code, retry in answers if code == 429)

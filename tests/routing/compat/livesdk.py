"""A live server for the SDK tests, started as deploy/run.sh starts it (gunicorn with
uvicorn workers) on a throwaway SQLite database with the catalog and one account."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from types import SimpleNamespace

from tests.realparts import (
    free_port,
    run_manage,
    sqlite_project,
    start_web,
)


@contextlib.contextmanager
def live_site(account: str, scale: float, **env_extra) -> Iterator[SimpleNamespace]:
    """(base: http://host:port, key, env) while the server runs."""
    env = sqlite_project(
        "filesystem://localhost//",
        catalog=True,
        SIM_TIME_SCALE=scale,
        API_THROTTLE_RATE="100000/s",
        **env_extra,
    )
    created = run_manage(env, "create_account", account, "--json", "--credits", "1000")
    key = json.loads(created)["api_key"]
    port = free_port()
    web = start_web(env, port, workers=1)
    try:
        web.wait_ready(60)
        yield SimpleNamespace(base=f"http://127.0.0.1:{port}", key=key, env=env)
    finally:
        web.kill()

"""`make run`'s service script on a bare machine: SQLite, filesystem broker, web +
worker + beat. Started for real in a temp folder, on a free port, then stopped
(tests/quickstart.py)."""

import json
import time
import urllib.error
import urllib.request

import pytest

from tests.quickstart import QuickStart


@pytest.fixture
def quickstart(tmp_path):
    qs = QuickStart(tmp_path / "var", SIM_TIME_SCALE=50, JOB_SWEEP_SECONDS=1)
    try:
        yield qs
    finally:
        qs.close()
        qs.dump_logs()  # what the web server, worker and beat said (shown on failure)


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, json.loads(r.read())


def post_json(url: str, body: dict, key: str) -> dict:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def wait_succeeded(base: str, key: str, job_id: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with urllib.request.urlopen(
            urllib.request.Request(
                f"{base}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}
            ),
            timeout=5,
        ) as r:
            status = json.loads(r.read())["status"]
        if status == "succeeded":
            return
        assert time.monotonic() < deadline, f"job still {status}"
        time.sleep(0.5)


def test_run_script_serves_the_catalog_with_worker_and_beat(quickstart):
    qs = quickstart
    setup = qs.setup()
    assert "Demo admin created" in setup and "demo api key: mlr_" in setup
    qs.start()
    base, key = qs.base, qs.key
    status, body = get_json(f"{base}/api/v1/models/gpt-5.3-codex-spark/")
    assert status == 200
    assert body["status"] == "retired" and body["successor"] == "gpt-5.6-sol"
    assert get_json(f"{base}/api/v1/health")[1]["status"] == "ok"
    # Printed links and problem types name the port the service runs on.
    assert f"Admin:  {base}/admin/" in setup
    with pytest.raises(urllib.error.HTTPError) as missing:
        get_json(f"{base}/api/v1/models/gpt-9/")
    assert missing.value.code == 404
    assert json.loads(missing.value.read())["type"].startswith(f"{base}/problems/")
    # A job through the filesystem broker and the quick start's worker.
    job = post_json(
        f"{base}/api/v1/jobs",
        {"model": "sol", "input_tokens": 2000, "output_tokens": 1000, "deadline_seconds": 3600},
        key,
    )
    assert job["status"] == "queued"
    wait_succeeded(base, key, job["id"])
    qs.wait_worker_and_beat()
    # The filesystem broker's URL names a host: kombu has nothing to warn about.
    for name in ["run", "worker", "beat"]:
        assert "No hostname was supplied" not in qs.log(name), name
    # A worker killed outright is reported on the console and started again (its log
    # appended to); jobs still run.
    qs.wait_worker_restarted(qs.kill_worker())
    assert "worker exited with status" in qs.log("run")
    job = post_json(
        f"{base}/api/v1/jobs",
        {"model": "sol", "input_tokens": 200, "output_tokens": 50, "deadline_seconds": 3600},
        key,
    )
    wait_succeeded(base, key, job["id"])
    # SIGTERM to the process group stops everything within a few seconds.
    assert qs.stop() < 10

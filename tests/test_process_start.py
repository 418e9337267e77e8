"""A process of the service starts without the heavy imports it rarely needs (issue 28's
twentieth round; bench/bench_startup.py measures the time): jsf and what it pulls in
(Faker, smart_open, boto3) wait for an agent answer with a schema, the engine's
calibration for `manage.py calibrate`, scipy for a quantile. And each is there once
it is used."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.realparts import ROOT, owned_tempdir, project_env

DEFERRED = ["jsf", "faker", "boto3", "smart_open", "scipy", "simengine.calibration"]

START = """
import json, sys
import django
django.setup()
import deploy.asgi, deploy.urls, deploy.celery
from django.utils.module_loading import autodiscover_modules
autodiscover_modules("tasks")
{use}
print(json.dumps(sorted(m for m in {deferred!r} if m in sys.modules)))
"""


def _loaded(use: str = "") -> list[str]:
    var = owned_tempdir("var")
    env = project_env(f"sqlite:///{var / 'db.sqlite3'}", "memory://", var_dir=var)
    out = subprocess.run(
        [sys.executable, "-c", START.format(use=use, deferred=DEFERRED)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_a_web_or_worker_process_starts_without_the_deferred_imports():
    assert _loaded() == []


def test_each_deferred_import_is_there_once_used():
    use = "\n".join(
        [
            "from routing.agents.generate import instance",
            "instance({'type': 'object', 'properties': {'a': {'type': 'integer'}}}, 1, 'x')",
            "import simengine",
            "simengine.calibrate",
            "from simengine.spread import completion_quantile",
            "from simengine.lazy import special",
            "special.ndtri(0.9)",
        ]
    )
    assert _loaded(use) == sorted(DEFERRED)

"""The processes tests start never get the test process's own metrics folder.

routing.core.metrics points PROMETHEUS_MULTIPROC_DIR at VAR_DIR/metrics, one folder for
every test worker, and `make run` (deploy/run.sh) empties the folder it is given at
start. A quick start launched by a test with that variable inherited deleted the test
workers' counters, so tests/routing/api/test_metrics.py's scrapes no longer saw this
process's events (seen when the real-parts tests were first ordered before it: 3
failures in one CI run). Every environment a test builds for a child starts from
tests.realparts.inherited_environ, which leaves it out."""

from __future__ import annotations

import os

from routing.core import metrics
from tests.quickstart import quickstart_env
from tests.realparts import inherited_environ, project_env


def test_the_test_process_has_a_metrics_folder_to_protect():
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(metrics.METRICS_DIR)


def test_no_child_environment_carries_the_test_process_metrics_folder(tmp_path):
    envs = {
        "inherited": inherited_environ(),
        "quick start (make run)": quickstart_env(tmp_path / "qs"),
        "project": project_env("sqlite:///x.sqlite3", "memory://", var_dir=tmp_path / "p"),
    }
    for name, env in envs.items():
        assert "PROMETHEUS_MULTIPROC_DIR" not in env, name
        assert not any(k.startswith("PYTEST_") for k in env), name
    assert envs["quick start (make run)"]["VAR_DIR"] == str(tmp_path / "qs")

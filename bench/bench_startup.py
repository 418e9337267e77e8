"""Benchmark: how long a process of the service takes to start (CPU seconds).

Every web worker, Celery worker, beat and ``manage.py`` command imports the project
before it does anything: Django's setup, the URLconf (what the first request loads),
the Celery app and its tasks. Since issue 28's twentieth round three heavy imports wait
until they are used: jsf (the JSON Schema instance generator, with Faker, smart_open and
boto3 under it: only an agent answer with a schema needs it), the engine's calibration
(the fit, the hold-outs, the spec reader: ``manage.py calibrate`` and the engine's CLI)
and scipy.special (a quantile of a completion time or a wait).

Each measurement is a fresh interpreter doing what a process of the service does at
start; the baseline, run alternately on the same machine, is the same interpreter
importing those three first, as the tree before the round did at start. Figures: the
child's user + system CPU seconds (what a two-core machine running many processes pays;
wall time follows it when the machine is idle), median [min-max] over the runs, and the
ratio. The service's own command ``manage.py check`` is timed the same way.

Usage: .venv/bin/python bench/bench_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What a process of the service imports at start (gunicorn's worker: the ASGI app, then
# the URLconf at the first request; a Celery worker: the app and its tasks).
START = """
import django
django.setup()
import deploy.asgi, deploy.urls, deploy.celery
from django.conf import settings
from django.utils.module_loading import autodiscover_modules
autodiscover_modules("tasks")
"""
# The baseline: the same, with the three deferred imports made first.
EAGER = "import jsf, scipy.special, simengine.calibration\n"


def _cpu_of(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _line(name: str, values: list[float]) -> str:
    return f"{name:<34} {statistics.median(values):6.2f} s [{min(values):.2f}-{max(values):.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each (default 7)")
    args = parser.parse_args(argv)
    var = tempfile.mkdtemp(prefix="bench-startup-")
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="deploy.settings",
        DATABASE_URL=f"sqlite:///{var}/db.sqlite3",
        CELERY_BROKER_URL="memory://",
        VAR_DIR=var,
    )
    py = sys.executable
    cases = {
        "process start (as shipped)": [py, "-c", START],
        "process start (eager baseline)": [py, "-c", EAGER + START],
        "manage.py check (as shipped)": [py, "manage.py", "check"],
        "manage.py check (eager baseline)": [
            py,
            "-c",
            EAGER + "import sys; sys.argv = ['manage.py', 'check']; exec(open('manage.py').read())",
        ],
    }
    for argv_ in cases.values():  # warm the file cache and .pyc files once
        _cpu_of(argv_, env)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for run in range(args.runs):
        for name, argv_ in cases.items():  # alternating: the machine's drift hits both
            times[name].append(_cpu_of(argv_, env))
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    print(f"CPU seconds per start, median [min-max] over {args.runs} runs")
    for name, values in times.items():
        print(_line(name, values))
    for what in ("process start", "manage.py check"):
        new = statistics.median(times[f"{what} (as shipped)"])
        old = statistics.median(times[f"{what} (eager baseline)"])
        print(f"{what}: {new:.2f} s against {old:.2f} s, {old / new:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

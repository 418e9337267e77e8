"""The service's event metrics: counted or observed where the event happens, in any
process (web replicas, Celery workers), and summed over processes at scrape time.

Two kinds of figures, each where it is exact (the `/metrics` view, routing.api.metrics,
serves both):

- *State* (jobs by state, pool utilisation, quota reserved and spent, notices, batches)
  is read from the database when Prometheus scrapes: one truth for every replica, no
  process has to remember anything.
- *Events* (rate-limit refusals and fail-opens, a job's simulated queue wait and completion time when
  it finishes, Celery task latency) are counted here, in prometheus_client's
  multiprocess mode: each process writes its counters to a memory-mapped file under
  METRICS_DIR (VAR_DIR/metrics; a process's values survive its exit), and a scrape sums
  the folder's files. One folder per machine: `make run` (deploy/run.sh) empties it at
  start; a worker-only machine serves its own folder on WORKER_METRICS_PORT
  (deploy/celery.py).

Only counters and histograms here (no live gauges), so a process that exits leaves
correct sums behind and nothing needs `mark_process_dead`.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

# Multiprocess mode is chosen by prometheus_client when its first metric is built, from
# the environment: set it before the import (subprocesses started by this one inherit
# it, which is what a Celery prefork pool wants).
METRICS_DIR = Path(settings.METRICS_DIR)
METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(METRICS_DIR))

from prometheus_client import (  # noqa: E402 (after the environment is set)
    CollectorRegistry,
    Counter,
    Histogram,
)
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

# Simulated seconds: an interactive job waits seconds, a long agent task hours.
SIM_SECONDS_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# Wall seconds a Celery task waits in its queue or runs.
TASK_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

RATE_LIMITED = Counter(
    "routing_rate_limited",
    "API requests refused with 429 by the per-caller rate limits, by limit scope.",
    ["scope"],
)
RATE_LIMIT_FAIL_OPEN = Counter(
    "routing_ratelimit_fail_open",
    "Rate-limit checks let through uncounted because the shared cache (Redis) was "
    "unreachable (rate limits fail open by design), by counter scope: req and tok (an "
    "account's or package's requests and tokens; a key's throttle is req), anon (requests "
    "without a key, per address) and write.",
    ["scope"],
)
JOB_QUEUE_WAIT = Histogram(
    "routing_job_queue_wait_seconds",
    "Simulated seconds a job waited for its slot (acceptance to slot start), per tier; "
    "observed when the job finishes.",
    ["tier"],
    buckets=SIM_SECONDS_BUCKETS,
)
JOB_COMPLETION = Histogram(
    "routing_job_completion_seconds",
    "Simulated seconds from acceptance to result (queue wait + run), per tier; "
    "observed when the job finishes.",
    ["tier"],
    buckets=SIM_SECONDS_BUCKETS,
)
JOB_DEADLINE = Counter(
    "routing_job_deadline",
    "Finished jobs by tier and outcome: met or missed their deadline (simulated "
    "completion against deadline_seconds).",
    ["tier", "outcome"],
)
JOB_PROMISE = Counter(
    "routing_job_promise",
    "Finished jobs by tier: within the P90 completion promised at acceptance or beyond "
    "it (about 9 in 10 within, if the promise is honest).",
    ["tier", "within"],
)
JOB_LATENESS = Histogram(
    "routing_job_lateness_seconds",
    "Simulated seconds a job that missed its deadline was late, per tier.",
    ["tier"],
    buckets=SIM_SECONDS_BUCKETS,
)
TASK_QUEUE_WAIT = Histogram(
    "routing_celery_task_queue_wait_seconds",
    "Wall seconds from a task's publication (or its countdown's end) to a worker "
    "starting it, by queue and task.",
    ["queue", "task"],
    buckets=TASK_SECONDS_BUCKETS,
)
TASK_RUNTIME = Histogram(
    "routing_celery_task_runtime_seconds",
    "Wall seconds a task ran in a worker, by queue and task.",
    ["queue", "task"],
    buckets=TASK_SECONDS_BUCKETS,
)


def event_registry() -> CollectorRegistry:
    """A registry that sums every process's event metrics in METRICS_DIR."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(METRICS_DIR))
    return registry


def observe_job_finished(
    tier: str,
    simulated: dict | None,
    *,
    deadline_met: bool | None = None,
    late_by_seconds: float | None = None,
    within_promise: bool | None = None,
) -> None:
    """A job has finished: its simulated queue wait and completion time, and whether
    it met its deadline (how late, if not) and its promise, per tier."""
    if simulated:
        wait, total = simulated.get("queue_seconds"), simulated.get("total_seconds")
        if wait is not None:
            JOB_QUEUE_WAIT.labels(tier=tier).observe(max(0.0, float(wait)))
        if total is not None:
            JOB_COMPLETION.labels(tier=tier).observe(max(0.0, float(total)))
    if deadline_met is not None:
        JOB_DEADLINE.labels(tier=tier, outcome="met" if deadline_met else "missed").inc()
        if not deadline_met and late_by_seconds is not None:
            JOB_LATENESS.labels(tier=tier).observe(float(late_by_seconds))
    if within_promise is not None:
        JOB_PROMISE.labels(tier=tier, within="true" if within_promise else "false").inc()

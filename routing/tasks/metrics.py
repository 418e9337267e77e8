"""Celery task latency by queue (routing.core.metrics), from Celery's signals: the
publisher stamps each message with its wall time; the worker observes how long it waited
in its queue (from its countdown's end for a delayed task) and how long it ran.
Connected in every process that imports routing.tasks (web and workers: routing.apps)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time

from celery.signals import before_task_publish, task_postrun, task_prerun, worker_ready

from routing.core import metrics


@before_task_publish.connect(dispatch_uid="metrics-stamp")
def stamp_published_at(headers=None, **_kwargs) -> None:
    if headers is not None:
        headers.setdefault("published_at", time.time())


@task_prerun.connect(dispatch_uid="metrics-prerun")
def observe_queue_wait(task=None, **_kwargs) -> None:
    request = task.request
    request.metrics_started = time.time()
    published = getattr(request, "published_at", None)
    if not isinstance(published, int | float):
        return
    due = published
    if request.eta:
        with contextlib.suppress(TypeError, ValueError):
            due = max(due, dt.datetime.fromisoformat(str(request.eta)).timestamp())
    metrics.TASK_QUEUE_WAIT.labels(queue=_queue(request), task=task.name).observe(
        max(0.0, request.metrics_started - due)
    )


@task_postrun.connect(dispatch_uid="metrics-postrun")
def observe_runtime(task=None, **_kwargs) -> None:
    started = getattr(task.request, "metrics_started", None)
    if started is not None:
        metrics.TASK_RUNTIME.labels(queue=_queue(task.request), task=task.name).observe(
            max(0.0, time.time() - started)
        )


def _queue(request) -> str:
    info = request.delivery_info or {}
    return str(info.get("routing_key") or info.get("queue") or "eager")


@worker_ready.connect(dispatch_uid="metrics-worker-port")
def serve_worker_metrics(**_kwargs) -> None:
    """A worker on a machine without a web process serves that machine's event metrics
    (Celery task latency) on WORKER_METRICS_PORT; `make run`'s web process serves them
    at /metrics already."""
    port = os.environ.get("WORKER_METRICS_PORT")
    if port:
        from prometheus_client import start_http_server

        start_http_server(int(port), registry=metrics.event_registry())

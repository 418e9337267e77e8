"""One trace from `POST /api/v1/jobs` through the Celery worker's run and finish to the
settlement (issue 30, deploy/tracing.py): the web side and a Celery worker (a thread of
this process, celery.contrib.testing, on a private in-memory broker) export to one
in-memory exporter; the trace context travels in the task messages' headers."""

from __future__ import annotations

import time

import pytest
from celery import current_app
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.db import connections
from kombu import pools
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from deploy import tracing
from routing.models import Job
from tests.helpers import ApiClient
from tests.stack import SMALL


@pytest.fixture
def exporter():
    spans = InMemorySpanExporter()
    assert tracing.setup("test", exporter=spans)
    try:
        yield spans
    finally:
        tracing.teardown()


@pytest.fixture
def memory_broker():
    """A broker of this test's own: nothing sent by other tests is consumed."""
    app = current_app
    saved = app.conf.CELERY_BROKER_URL

    def use(url: str) -> None:
        app.pool.force_close_all()
        pools.reset()
        app._pool = None
        app.amqp._producer_pool = None
        app.conf.CELERY_BROKER_URL = url  # the Django-namespaced key is the one read

    use("memory://localhost//")
    try:
        yield app
    finally:
        use(saved)


def test_one_trace_from_the_request_to_the_settlement(
    transactional_db, account_with_key, exporter, memory_broker, settings
):
    settings.SIM_TIME_SCALE = 50  # a finish message with a short countdown
    api = ApiClient(account_with_key[1])
    # the worker thread's database connections are its own: closed after each task so
    # none outlives the test database
    task_postrun.connect(_close_connections, dispatch_uid="trace-test-close")
    try:
        _submit_and_wait(api, memory_broker)
    finally:
        task_postrun.disconnect(dispatch_uid="trace-test-close")
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.attributes.get("http.request_id") == "req_trace_1"]
    assert len(requests) == 1, [s.name for s in spans]
    trace_id = requests[0].context.trace_id
    ran = {s.name for s in spans if s.context.trace_id == trace_id and s.name.startswith("run/")}
    assert {"run/routing.run_job", "run/routing.finish_job"} <= ran, [
        (s.name, s.context.trace_id == trace_id) for s in spans
    ]


def _submit_and_wait(api, app) -> None:
    queues = ["interactive", "batch", "housekeeping"]
    with start_worker(app, pool="solo", perform_ping_check=False, queues=queues):
        r = api.post_json("/api/v1/jobs", SMALL, HTTP_X_REQUEST_ID="req_trace_1")
        assert r.status_code == 202, r.content
        job_id = r.json()["id"]
        deadline = time.monotonic() + 60
        while Job.objects.get(pk=job_id).status != "succeeded":
            assert time.monotonic() < deadline, Job.objects.get(pk=job_id).status
            time.sleep(0.1)


def _close_connections(**_kwargs) -> None:
    connections.close_all()

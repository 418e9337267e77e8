"""OpenTelemetry traces (issue 30): one trace from an HTTP request through the Celery
tasks it sends to the settlement, with the maintained instrumentations for Django,
Celery, psycopg and Redis. The Celery instrumentation puts the trace context in each
task message's headers and the worker continues it.

Off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (then spans go there over OTLP/HTTP;
OTEL_SERVICE_NAME and the other OTEL_* variables as the OpenTelemetry SDK reads them):
when off nothing is instrumented, so it costs nothing. Called by the web entry points
(deploy/asgi.py, deploy/wsgi.py) and in each Celery worker process (deploy/celery.py).
The request id (httpedge.requestid) is the request span's `http.request_id` attribute,
so a log line leads to its trace and back."""

from __future__ import annotations

import os

_done = False


def _add_request_id(span, request, response) -> None:
    rid = getattr(request, "request_id", None)
    if rid and span is not None and span.is_recording():
        span.set_attribute("http.request_id", rid)


def setup(service: str, exporter=None) -> bool:
    """Instrument this process; True when tracing is on. `exporter` (a test's in-memory
    one) replaces the OTLP exporter and turns tracing on without the variable."""
    global _done
    if _done:
        return True
    if exporter is None and not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", f"lifecycle-{service}")}
        )
    )
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument(tracer_provider=provider, response_hook=_add_request_id)
    CeleryInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    RedisInstrumentor().instrument(tracer_provider=provider)
    _done = True
    return True


def teardown() -> None:
    """Undo `setup` (tests)."""
    global _done
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    for instrumentor in (
        DjangoInstrumentor(),
        CeleryInstrumentor(),
        PsycopgInstrumentor(),
        RedisInstrumentor(),
    ):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    _done = False

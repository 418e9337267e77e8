"""Observability in process (issue 30): the JSON log format of production settings, the
LOG_FORMAT setting, and the request id stamped on published tasks."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from httpedge import requestid
from routing.tasks.context import stamp_request_id

ROOT = Path(__file__).resolve().parent.parent


def _settings_value(expr: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "LOG_FORMAT"}}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            f"import django; django.setup(); from django.conf import settings; print({expr})",
        ],
        cwd=ROOT,
        env=clean
        | {
            "DJANGO_SETTINGS_MODULE": "deploy.settings",
            "SECRET_KEY": "k" * 50,
            "ALLOWED_HOSTS": "a",
        }
        | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DEBUG": "0"}, "json"),
        ({"DEBUG": "1"}, "console"),
        ({"DEBUG": "0", "LOG_FORMAT": "console"}, "console"),
        ({"DEBUG": "1", "LOG_FORMAT": "json"}, "json"),
    ],
)
def test_log_format_follows_debug_unless_set(env, expected):
    done = _settings_value("settings.LOGGING['handlers']['console']['formatter']", **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_an_unknown_log_format_is_refused():
    done = _settings_value("1", LOG_FORMAT="xml")
    assert done.returncode != 0
    assert "LOG_FORMAT must be console or json" in done.stderr


def test_a_production_log_line_is_json_with_the_request_id(client):
    config = dict(settings.LOGGING["formatters"]["json"])
    factory = config.pop("()")
    config["fmt"] = config.pop("format")  # as logging.config.dictConfig passes it
    module, _, name = factory.rpartition(".")
    formatter = getattr(__import__(module, fromlist=[name]), name)(**config)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.addFilter(requestid.RequestIdFilter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        r = client.get("/api/v1/no-such-thing", HTTP_X_REQUEST_ID="req_from_proxy_1")
    finally:
        logger.removeHandler(handler)
    assert r.status_code == 404
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines, out.getvalue()
    record = lines[-1]
    assert record["request_id"] == "req_from_proxy_1"
    assert record["level"] == "WARNING" and record["logger"] == "django.request"
    assert "/api/v1/no-such-thing" in record["message"] and record["timestamp"]


def test_a_task_sent_in_a_request_carries_its_id_and_one_sent_outside_gets_its_own():
    headers: dict = {}
    tokens = requestid.bind("req_abc")
    try:
        stamp_request_id(headers=headers)
    finally:
        requestid.unbind(tokens)
    assert headers["request_id"] == "req_abc"
    outside: dict = {}
    # a fresh context: no request (beat, a management command)
    assert contextvars.Context().run(requestid.current) == "-"
    contextvars.Context().run(stamp_request_id, headers=outside)
    assert outside["request_id"].startswith("req_") and outside["request_id"] != "req_abc"
    # "-" (the log lines' "no request") is never carried on
    assert requestid.accepted("-") is None and requestid.accepted("req_abc") == "req_abc"


def test_tracing_is_off_without_an_otlp_endpoint(monkeypatch):
    from deploy import tracing

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert tracing.setup("web") is False
    assert not any("opentelemetry" in m for m in settings.MIDDLEWARE)


@pytest.mark.django_db
def test_metrics_have_the_http_latency_and_status_per_route(client):
    from prometheus_client.parser import text_string_to_metric_families

    r = client.get("/api/v1/jobs")  # no key: a 401 from the jobs route
    assert r.status_code == 401
    view = r.resolver_match.view_name
    text = client.get("/metrics").content.decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def value(name: str, **labels) -> float:
        return sum(
            s.value
            for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    latency = "django_http_requests_latency_seconds_by_view_method"
    assert value(f"{latency}_count", view=view, method="GET") >= 1, text
    assert value(f"{latency}_bucket", view=view, method="GET", le="+Inf") >= 1
    responses = "django_http_responses_total_by_status_view_method_total"
    assert value(responses, view=view, method="GET", status="401") >= 1, text

"""The plain-Python validation of quotes and jobs (routing.api.validation) answers
exactly what the DRF serializers declare: the same validated data for every input they
accept, the same errors (messages, fields, order) for every one they refuse. The
plain path is the one taken for ordinary requests."""

import pytest
from rest_framework.exceptions import ValidationError

from routing.api.serializers import (
    JobRequestSerializer,
    RouteRequestSerializer,
    job_request_validator,
    route_request_validator,
)
from routing.core.limits import MAX_TASK_TOKENS

BASE = {"model": "sol", "input_tokens": 2000, "output_tokens": 1000, "deadline_seconds": 600}

VARIANTS = [
    {},
    {"turns": 30, "tool_seconds": 15},
    {"turns": 3, "tool_seconds": 0, "max_cost": None, "tier": None, "task": None},
    {"max_cost": 5},
    {"max_cost": "12.5"},
    {"max_cost": "1.1234567"},
    {"max_cost": -1},
    {"max_cost": ""},
    {"max_cost": True},
    {"tier": "Fast"},
    {"tier": " flex "},
    {"tier": "auto"},
    {"tier": "nope"},
    {"tier": ""},
    {"tier": 3},
    {"task": "swe-bench-pro"},
    {"task": "  "},
    {"task": "x" * 81},
    {"model": "  sol  "},
    {"model": ""},
    {"model": None},
    {"model": 42},
    {"model": 4.5},
    {"model": True},
    {"model": ["sol"]},
    {"model": "x" * 80},
    {"model": "x" * 81},
    {"model": "so\x00l"},
    {"model": "s\ud800"},
    {"model": "modèle"},
    {"input_tokens": "2000"},
    {"input_tokens": 2000.0},
    {"input_tokens": 2000.5},
    {"input_tokens": True},
    {"input_tokens": 0},
    {"input_tokens": -5},
    {"input_tokens": MAX_TASK_TOKENS},
    {"input_tokens": MAX_TASK_TOKENS + 1},
    {"input_tokens": None},
    {"input_tokens": "1" * 1001},
    {"output_tokens": 2, "turns": 3},
    {"output_tokens": 3, "turns": 3},
    {"input_tokens": MAX_TASK_TOKENS - 999, "output_tokens": 1000},
    {"input_tokens": MAX_TASK_TOKENS - 1000, "output_tokens": 1000},
    {"turns": 0},
    {"turns": 10**9},
    {"turns": None},
    {"tool_seconds": 1},
    {"tool_seconds": -0.5},
    {"tool_seconds": "3.5"},
    {"tool_seconds": 10**12},
    {"tool_seconds": False},
    {"deadline_seconds": 0},
    {"deadline_seconds": 1e-9},
    {"deadline_seconds": 400},
    {"deadline_seconds": 1e30},
    {"deadline_seconds": "600"},
    {"deadline_seconds": None},
    {"prompt": ""},
    {"prompt": "   "},
    {"prompt": " Hello, wörld "},
    {"prompt": None},
    {"prompt": 12},
    {"unknown": "ignored"},
]
MISSING = ["model", "input_tokens", "output_tokens", "deadline_seconds"]


def outcome(fn, data):
    try:
        return "ok", fn(data)
    except ValidationError as exc:
        return "refused", exc.detail


def drf_outcome(serializer_class, data):
    ser = serializer_class(data=data)
    if ser.is_valid():
        return "ok", dict(ser.validated_data)
    return "refused", ser.errors


def payloads():
    for v in VARIANTS:
        yield {**BASE, **v}
    for name in MISSING:
        yield {k: v for k, v in BASE.items() if k != name}
    yield []
    yield "a string"
    yield None


@pytest.mark.parametrize(
    ("validator", "serializer_class"),
    [
        (route_request_validator, RouteRequestSerializer),
        (job_request_validator, JobRequestSerializer),
    ],
)
def test_the_plain_path_answers_what_the_serializer_declares(validator, serializer_class):
    plain = validator()
    accepted = 0
    for data in payloads():
        got, want = outcome(plain.validate, data), drf_outcome(serializer_class, data)
        assert got[0] == want[0], data
        if got[0] == "ok":
            accepted += 1
            assert got[1] == want[1], data
            assert [type(v) for v in got[1].values()] == [type(v) for v in want[1].values()]
            assert list(got[1]) == list(want[1]), data  # same fields, same order
        else:
            assert dict(got[1]) == dict(want[1]), data
            assert list(got[1]) == list(want[1]), data
    assert accepted > 20


def test_an_ordinary_request_builds_no_serializer(monkeypatch):
    plain = route_request_validator()

    def no_serializer(*a, **k):
        raise AssertionError("the serializer was built")

    monkeypatch.setattr(plain, "serializer_class", no_serializer)
    data = plain.validate({**BASE, "turns": 3, "tool_seconds": 2.5, "tier": "Fast"})
    assert data["tier"] == "priority" and data["tool_seconds"] == 2.5


def test_the_api_problem_for_bad_fields_is_unchanged(api, builtin_catalog):
    r = api.post_json("/api/v1/quotes", {**BASE, "input_tokens": 0, "turns": "x"})
    assert r.status_code == 400 and r["Content-Type"] == "application/problem+json"
    assert r.json()["errors"] == [
        {"field": "input_tokens", "message": "Ensure this value is greater than or equal to 1."},
        {"field": "turns", "message": "A valid integer is required."},
    ]
    r = api.post_json("/api/v1/jobs", {**BASE, "output_tokens": 2, "turns": 3})
    assert r.status_code == 400
    assert r.json()["errors"] == [
        {"field": "output_tokens", "message": "must be at least `turns` (3): each turn answers."}
    ]

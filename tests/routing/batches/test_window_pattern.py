"""A batch's completion window: the OpenAPI schema's pattern (WINDOW_PATTERN, which the
API's field checks as sent) and the rule behind it (parse_window) accept exactly the same
strings (issue 23: schemathesis found schema-valid windows the API refused)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from routing.api.serializers import BatchCreateSerializer
from routing.batches.errors import BatchError
from routing.batches.params import WINDOW_PATTERN, parse_window
from tests.helpers import file_upload as upload
from tests.helpers import jsonl

PROBLEM = "application/problem+json"


def schema_valid(text: str) -> bool:
    """As a JSON Schema validator reads the field: minLength 1, maxLength 16, pattern."""
    return 1 <= len(text) <= 16 and re.search(WINDOW_PATTERN, text) is not None


def parse_accepts(text: str) -> bool:
    """What parse_window (the rule the CLI, the admin and /v1/batches apply too) reads, at
    most 16 characters."""
    if not text.strip() or len(text) > 16:
        return False
    try:
        parse_window(text)
    except BatchError:
        return False
    return True


def field_accepts(text: str) -> bool:
    """What POST /api/v1/batches's serializer field lets through."""
    try:
        BatchCreateSerializer().fields["completion_window"].run_validation(text)
    except ValidationError:
        return False
    return True


# Near misses: numbers around the bounds, decimals, signs, other units, odd spaces.
NEAR = st.from_regex(
    r"\A[ \t\x0c\u2003]?[0+-]?[0-9]{1,6}(\.[0-9]{1,2})?[ \u00a0]?[smhdSMHDwy]?[ \n]?\Z"
)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.from_regex(WINDOW_PATTERN), NEAR, st.text(max_size=18)))
def test_the_schema_pattern_and_the_api_agree(text):
    assert schema_valid(text) == parse_accepts(text), repr(text)
    assert schema_valid(text) == field_accepts(text), repr(text)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("1m", True),
        ("60s", True),
        ("59s", False),
        ("10080m", True),
        ("10081m", False),
        ("168h", True),
        ("169h", False),
        ("7d", True),
        ("8d", False),
        ("604800s", True),
        ("604801s", False),
        ("0024H", True),
        ("24 h", True),
        ("0m", False),
        ("1.5h", False),  # a whole number (decimals were read before issue 23)
        ("24", False),
    ],
)
def test_bounds(text, ok):
    assert schema_valid(text) == ok and parse_accepts(text) == ok


@pytest.mark.django_db
@pytest.mark.parametrize("window", ["1.5h", "0m", "10081m"])
def test_the_api_refuses_what_the_pattern_refuses(api, account, window):
    f = upload(account, jsonl(1))
    r = api.post_json("/api/v1/batches", {"input_file_id": f.id, "completion_window": window})
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM, r.json()
    assert "completion_window" in json.dumps(r.json())


@pytest.mark.django_db
def test_the_api_accepts_what_the_pattern_accepts(api, account):
    f = upload(account, jsonl(1))
    r = api.post_json("/api/v1/batches", {"input_file_id": f.id, "completion_window": " 0090M "})
    assert r.status_code == 202, r.json()
    assert r.json()["completion_window"] == "0090m" and r.json()["window_seconds"] == 5400

"""Inputs a hostile or careless client sends: each answers a 4xx problem+json, never a
500 (issue 13, "Server errors a client can trigger" and "Other findings")."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from django.test import Client
from django.test.utils import override_settings

from routing.core.limits import MAX_JSON_DEPTH
from tests.helpers import GDPVAL, ApiClient

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


@pytest.fixture
def raising_api(account_with_key):
    """A client that lets a server error escape as an exception (so a 500 fails loudly)."""
    return ApiClient(account_with_key[1], raise_request_exception=True)


def assert_problem(r, status):
    assert r.status_code == status, (r.status_code, r.content[:300])
    assert r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["status"] == status
    return body


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


NUL_CURSOR = b64("o=0&p=a\x00b")  # NUL inside the cursor: PostgreSQL refuses it
NEWEST_FIRST = ["/api/v1/jobs", "/api/v1/batches", "/api/v1/files", "/api/v1/notices"]


@pytest.mark.parametrize("path", [*NEWEST_FIRST, "/api/v1/models/"])
@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        b64("o=1&p=2025-01"),  # reads as a cursor; the position is no date
        b64("o=0&p=x"),
        b64("p=9999-12-31T23:59:59.999999-23:59"),  # past the last datetime
        NUL_CURSOR,
    ],
)
def test_a_forged_cursor_is_a_400(raising_api, path, cursor):
    r = raising_api.get(f"{path}?cursor={quote(cursor)}")
    if path == "/api/v1/models/" and cursor not in ("garbage", NUL_CURSOR):
        # Ordered by slug, any text without NUL is a position: paging from there is fine.
        assert r.status_code in (200, 400), r.content[:300]
        if r.status_code == 200:
            return
    body = assert_problem(r, 400)
    assert body["type"].endswith("/invalid-cursor")
    assert body["parameter"] == "cursor"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs?model=%00",
        "/api/v1/notices?model=%00",
        "/api/v1/models/?family=%00",
        "/api/v1/models/?vendor=%00",
        "/api/v1/jobs?status=a%00b",
        "/api/v1/files?x=%00",
    ],
)
def test_a_nul_in_the_query_is_a_400(raising_api, path):
    body = assert_problem(raising_api.get(path), 400)
    assert body["type"].endswith("/invalid-characters")


def test_a_nul_in_a_header_is_a_400(raising_api):
    r = raising_api.post_json(
        "/api/v1/jobs", GDPVAL | {"deadline_seconds": 600}, HTTP_IDEMPOTENCY_KEY="k\x00"
    )
    body = assert_problem(r, 400)
    assert body["type"].endswith("/invalid-characters")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/models/%00/",
        "/api/v1/files/%00",
        "/api/v1/files/%00/content",
        "/api/v1/jobs/%00",
        "/api/v1/batches/a%00b",
    ],
)
def test_a_nul_in_the_path_is_a_404(raising_api, path):
    assert_problem(raising_api.get(path), 404)


HUGE = "99999999999999999999999"  # past a 64-bit integer


@pytest.mark.parametrize(
    "path",
    [
        f"/api/v1/models/{HUGE}/",
        f"/api/v1/files/{HUGE}",
        f"/api/v1/files/{HUGE}/content",
        f"/api/v1/jobs/{HUGE}",
        f"/api/v1/jobs/-{HUGE}/cancel",
        f"/api/v1/batches/{HUGE}",
        f"/api/v1/{HUGE}",
        f"/api/v1/batches/{'9' * 5000}",
    ],
)
def test_an_overflowing_id_in_the_path_is_a_404(raising_api, path):
    assert_problem(raising_api.get(path), 404)


@pytest.mark.parametrize(
    "path", [f"/v1/models/{HUGE}", f"/v1/files/{HUGE}", f"/v1/batches/{HUGE}", f"/v1/{HUGE}"]
)
def test_an_overflowing_id_on_v1_is_a_404_in_the_envelope(raising_api, path):
    r = raising_api.get(path)
    assert r.status_code == 404 and r["Content-Type"].startswith("application/json")
    assert r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/api/v1/quotes", "/api/v1/jobs", "/api/v1/batches"])
def test_deeply_nested_json_is_a_400(raising_api, path):
    body = "[" * 100_000 + "]" * 100_000
    r = raising_api.post(path, body, content_type="application/json")
    problem = assert_problem(r, 400)
    assert problem["type"].endswith("/malformed-request")
    assert "deep" in problem["detail"]


def test_nesting_up_to_the_limit_still_parses(raising_api):
    nested = {"a": 1}
    for _ in range(MAX_JSON_DEPTH - 2):
        nested = [nested]
    r = raising_api.post_json("/api/v1/quotes", GDPVAL | {"deadline_seconds": 600, "x": nested})
    assert r.status_code == 200, r.json()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_a_400(raising_api, number):
    body = json.dumps(GDPVAL).replace("8000", number)
    r = raising_api.post("/api/v1/quotes", body, content_type="application/json")
    problem = assert_problem(r, 400)
    assert number in problem["detail"]


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/files", "/api/v1/batches"])
def test_options_is_answered(raising_api, path):
    r = raising_api.options(path)
    assert r.status_code in (200, 405), r.content[:300]
    assert r.status_code != 500


def test_retiring_within_a_huge_number_of_days_is_a_400(raising_api):
    body = assert_problem(raising_api.get("/api/v1/models/?retiring_within_days=99999999"), 400)
    assert body.get("parameter") == "retiring_within_days"


def test_a_post_to_an_unknown_api_path_is_a_json_404_not_a_csrf_page():
    client = Client(enforce_csrf_checks=True, raise_request_exception=True)
    r = client.post("/api/v1/nothing-here", "{}", content_type="application/json")
    assert_problem(r, 404)
    r = client.delete("/api/nope")
    assert_problem(r, 404)


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_json_body_over_the_limit_is_a_413(raising_api):
    body = json.dumps(GDPVAL | {"pad": "x" * 2000})
    r = raising_api.post("/api/v1/quotes", body, content_type="application/json")
    problem = assert_problem(r, 413)
    assert problem["type"].endswith("/request-too-large")


def test_a_nul_inside_a_json_string_is_a_400(raising_api):
    body = json.dumps(GDPVAL | {"deadline_seconds": 600, "model": "sol\u0000"})
    problem = assert_problem(
        raising_api.post("/api/v1/jobs", body, content_type="application/json"), 400
    )
    assert "NUL" in problem["detail"]


def test_options_describes_the_resource(raising_api):
    r = raising_api.options("/api/v1/jobs")
    assert r.status_code == 200
    assert r.json()["parses"] == ["application/json"]


# --- Numbers past a double's range, and keys twice (issue 23, finding 6) -----------------


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/api/v1/quotes", json.dumps(GDPVAL).replace("8000", "1e309"), "input_tokens"),
        ("/api/v1/jobs", json.dumps(GDPVAL).replace("15", "-1e400"), "tool_seconds"),
        ("/api/v1/jobs", json.dumps(GDPVAL).replace("30", "1" + "0" * 400), "turns"),
        (
            "/api/v1/batches",
            '{"input_file_id": "file-x", "endpoint": "/v1/jobs", "metadata": {"k": 1e309}}',
            "metadata.k",
        ),
    ],
)
def test_a_number_past_a_doubles_range_is_a_400_naming_the_field(raising_api, path, body, param):
    problem = assert_problem(raising_api.post(path, body, content_type="application/json"), 400)
    assert problem["parameter"] == param and param in problem["detail"]
    assert "outside the range of a double" in problem["detail"]


@pytest.mark.parametrize("path", ["/api/v1/quotes", "/api/v1/jobs", "/api/v1/batches"])
def test_a_key_twice_is_a_400_naming_the_key(raising_api, path):
    body = '{"model": "sol", "model": "luna", "input_tokens": 10}'
    problem = assert_problem(raising_api.post(path, body, content_type="application/json"), 400)
    assert problem["parameter"] == "model"
    assert "'model' appears more than once" in problem["detail"]


def test_batch_metadata_never_stores_inf(raising_api, account):
    from routing.models import Batch
    from tests.helpers import file_upload, jsonl

    f = file_upload(account, jsonl(1))
    body = f'{{"input_file_id": "{f.pk}", "endpoint": "/v1/jobs", "metadata": {{"k": 1e309}}}}'
    for base in ("/api/v1", "/v1"):
        r = raising_api.post(f"{base}/batches", body, content_type="application/json")
        assert r.status_code == 400, r.content
    assert not Batch.objects.exists()


# --- Numbers sent as text (a fuzzer's find: DRF reads "2000" as 2000) ---------------------


@pytest.mark.parametrize("path", ["/api/v1/quotes", "/api/v1/jobs"])
@pytest.mark.parametrize(
    "field, value",
    [
        ("input_tokens", "2000"),
        ("turns", True),
        ("tool_seconds", "3.5"),
        ("deadline_seconds", "600"),
        ("output_tokens", False),
    ],
)
def test_a_number_sent_as_text_or_a_boolean_is_a_400_naming_the_field(
    raising_api, path, field, value
):
    from routing.models import Job

    body = GDPVAL | {"deadline_seconds": 600}
    before = Job.objects.count()
    problem = assert_problem(raising_api.post_json(path, body | {field: value}), 400)
    assert field in problem["detail"]
    assert Job.objects.count() == before
    # The same body with the number as a number is served.
    assert raising_api.post_json(path, body).status_code in (200, 201, 202)

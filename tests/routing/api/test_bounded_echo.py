"""A client's name sent back in an error is bounded (issue 23, finding 6: an unknown
model's 404 echoed a 100 KB name): cut with an ellipsis, on both surfaces, for models,
tiers, ids, files, batches, parameter values and batch lines."""

from __future__ import annotations

import io
import json

import pytest

from routing.core.formats import ECHO_MAX
from routing.models import Batch
from tests.helpers import GDPVAL, batch_make, jsonl

pytestmark = pytest.mark.django_db

LONG = "m" * 100_000  # a 100 KB name
# The largest answer any of these may be: a message plus one cut name, never the name.
BOUND = 2_000


def assert_bounded(r, status: int | tuple[int, ...]):
    """The error answers `status`, and echoes at most ECHO_MAX characters of the name
    (cut with an ellipsis where it echoes it at all)."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status_code in statuses, (r.status_code, r.content[:300])
    assert len(r.content) < BOUND, (len(r.content), r.content[:300])
    text = json.dumps(r.json(), ensure_ascii=False)
    assert "m" * ECHO_MAX not in text
    if "m" * 20 in text:
        assert "m" * (ECHO_MAX - 1) + "…" in text


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/quotes"])
def test_an_unknown_model_is_cut(api, path):
    r = api.post_json(path, GDPVAL | {"deadline_seconds": 600, "model": LONG})
    assert_bounded(r, (400, 404))  # (the native API refuses a model name over 80 first)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_an_unknown_model_is_cut_on_v1(api, path):
    body = {"model": LONG, "messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    if path == "/v1/chat/completions":
        body.pop("input")
    else:
        body.pop("messages")
    r = api.post_json(path, body)
    assert_bounded(r, 404)
    assert r.json()["error"]["code"] == "model_not_found"


def test_an_unknown_tier_is_cut(api):
    r = api.post_json("/api/v1/jobs", GDPVAL | {"deadline_seconds": 600, "tier": LONG})
    assert_bounded(r, 400)
    body = {"model": "sol", "messages": [{"role": "user", "content": "hi"}], "service_tier": LONG}
    assert_bounded(api.post_json("/v1/chat/completions", body), 400)


@pytest.mark.parametrize(
    "path",
    [
        f"/api/v1/models/{LONG}/",
        f"/v1/models/{LONG}",
        f"/api/v1/jobs/{LONG}",
        f"/api/v1/files/{LONG}",
        f"/api/v1/batches/{LONG}",
        f"/v1/files/{LONG}",
        f"/v1/batches/{LONG}",
        f"/api/v1/jobs?status={LONG}",
        f"/api/v1/batches?status={LONG}",
        f"/api/v1/models/?status={LONG}",
    ],
)
def test_an_unknown_id_or_value_in_the_url_is_cut(api, path):
    assert_bounded(api.get(path), (400, 404))


def test_an_unknown_job_output_is_cut(api):
    from routing.models import Job
    from tests.helpers import job_submit

    job_submit(api)
    assert_bounded(api.get(f"/api/v1/jobs/{Job.objects.get().pk}?output={LONG}"), 400)


@pytest.mark.parametrize("base", ["/api/v1", "/v1"])
@pytest.mark.parametrize("field", ["input_file_id", "endpoint", "completion_window"])
def test_a_batch_create_argument_is_cut(api, account, base, field):
    f = api.post("/api/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(1))}).json()
    body = {"input_file_id": f["id"], "endpoint": "/v1/jobs", "completion_window": "24h"}
    assert_bounded(api.post_json(f"{base}/batches", body | {field: LONG}), (400, 404))


@pytest.mark.parametrize("base", ["/api/v1", "/v1"])
def test_an_unknown_purpose_is_cut(api, base):
    r = api.post(f"{base}/files", {"purpose": LONG, "file": io.BytesIO(jsonl(1))})
    assert_bounded(r, 400)


def test_an_unknown_model_on_a_batch_line_is_cut(account):
    line = {"custom_id": "x", "body": {"model": LONG, "input_tokens": 10, "output_tokens": 10}}
    b = batch_make(account, jsonl(1) + b"\n" + json.dumps(line).encode())
    error = Batch.objects.get(pk=b.pk).requests.get(custom_id="x").error
    assert "…" in error["message"] and len(error["message"]) < 300

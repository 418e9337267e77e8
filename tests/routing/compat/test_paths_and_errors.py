"""Both surfaces: every path with and without its trailing slash, `after` paging the
same as the cursor, and errors that are JSON (OpenAI's envelope on /v1/, problem+json on
/api/v1/) for unknown paths, methods and NUL characters: never HTML nor a CSRF page."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from catalog.models import ModelVersion
from routing.accounts.accounts import account_create
from tests.helpers import batch_make, jsonl

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


def envelope(r, status: int, code: str) -> dict:
    assert r.status_code == status, r.content
    assert r["Content-Type"] == "application/json"
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["code"] == code, err
    assert err["message"]
    return err


# --- Trailing slashes -------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/models", "/api/v1/models/", "/v1/models", "/v1/models/"])
def test_model_lists_answer_with_and_without_the_slash(api, path):
    r = api.get(path)
    assert r.status_code == 200 and r.json()["object"] == "list"


@pytest.mark.parametrize("slash", ["", "/"])
def test_native_client_paths_answer_with_and_without_the_slash(api, account, slash):
    b = batch_make(account, jsonl(1))
    for path in (
        "/api/v1/jobs",
        "/api/v1/files",
        "/api/v1/batches",
        f"/api/v1/batches/{b.pk}",
        f"/api/v1/files/{b.input_file_id}/content",
        "/api/v1/quota",
        "/api/v1/tiers",
        f"/api/v1/models/{b.requests.get().model.slug}",
        "/v1/batches",
        f"/v1/batches/{b.pk}",
        f"/v1/files/{b.input_file_id}",
    ):
        assert api.get(path + slash).status_code == 200, path + slash
    r = api.post(f"/api/v1/files{slash}", {"purpose": "batch", "file": io.BytesIO(jsonl(1))})
    assert r.status_code == 201  # a POST too: no redirect that would lose the body


def test_url_names_reverse_as_before():
    assert reverse("model-detail", args=["x"]) == "/api/v1/models/x/"
    assert reverse("model-list") == "/api/v1/models/"
    assert reverse("job-list") == "/api/v1/jobs"
    assert reverse("batch-cancel", args=["b"]) == "/api/v1/batches/b/cancel"


# --- `after` and the cursor -----------------------------------------------------------


@pytest.mark.parametrize("base", ["/api/v1/batches", "/v1/batches"])
def test_after_pages_like_the_cursor_and_ends(api, account, base):
    made = [str(batch_make(account, jsonl(1)).pk) for _ in range(5)]
    by_cursor, url = [], f"{base}?limit=2"
    while url:
        page = api.get(url).json()
        by_cursor.append([b["id"] for b in page["data"]])
        url = page["next"] if page["has_more"] else None
        assert len(by_cursor) < 10
    by_after, after = [], None
    while True:
        page = api.get(f"{base}?limit=2" + (f"&after={after}" if after else "")).json()
        by_after.append([b["id"] for b in page["data"]])
        assert page["first_id"] == page["data"][0]["id"]
        assert page["last_id"] == page["data"][-1]["id"]
        if not page["has_more"]:
            break
        after = page["last_id"]
        assert len(by_after) < 10
    assert by_after == by_cursor == [made[:-3:-1], made[2:0:-1], made[:1]]


def test_after_on_the_native_model_list_is_a_slug(client, builtin_catalog):
    slugs = list(ModelVersion.objects.order_by("slug").values_list("slug", flat=True))
    page = client.get(f"/api/v1/models/?limit=3&after={slugs[2]}").json()
    assert [m["id"] for m in page["data"]] == slugs[3:6]
    last = client.get(f"/api/v1/models/?after={slugs[-1]}").json()
    assert last["data"] == [] and last["has_more"] is False


@pytest.mark.parametrize("after", ["nope", "00000000-0000-0000-0000-000000000000"])
def test_an_after_that_names_nothing_is_a_400(api, account, after):
    batch_make(account, jsonl(1))
    r = api.get(f"/api/v1/batches?after={after}")
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM
    assert r.json()["parameter"] == "after"
    r = api.get(f"/v1/batches?after={after}")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_someone_elses_batch_is_not_an_after(api, account):
    other, _ = account_create(name="other", default_credits=Decimal(1))
    theirs = batch_make(other, jsonl(1))
    batch_make(account, jsonl(1))
    assert api.get(f"/api/v1/batches?after={theirs.pk}").status_code == 400


# --- Errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
def test_unknown_v1_paths_are_a_json_404_for_every_method(method):
    r = getattr(Client(enforce_csrf_checks=True), method)("/v1/embeddings")
    err = envelope(r, 404, "unknown_url")
    assert "/v1/embeddings" in err["message"]


def test_a_wrong_method_on_v1_is_a_json_405(api):
    envelope(api.delete("/v1/batches"), 405, "method_not_allowed")
    envelope(Client(enforce_csrf_checks=True).put("/v1/models"), 405, "method_not_allowed")


def test_a_wrong_method_on_the_native_api_is_problem_json(api):
    r = Client(enforce_csrf_checks=True).delete("/api/v1/models")
    assert r.status_code == 405 and r["Content-Type"] == PROBLEM


def test_no_key_on_v1_is_a_401_envelope(client, builtin_catalog):
    err = envelope(client.get("/v1/batches"), 401, "invalid_api_key")
    assert err["type"] == "authentication_error"


def test_a_bad_batch_body_names_its_param(api):
    err = envelope(api.post_json("/v1/batches", {"endpoint": "/v1/jobs"}), 400, "invalid_request")
    assert err["param"] == "input_file_id"
    err = envelope(
        api.post("/v1/batches", "{nope", content_type="application/json"), 400, "malformed_request"
    )


@pytest.mark.parametrize(
    "path, status, code",
    [
        ("/v1/models/a%00b", 404, "not_found"),
        ("/v1/models?after=%00", 400, "invalid_characters"),
    ],
)
def test_nul_on_v1_is_refused_in_the_envelope(api, path, status, code):
    envelope(api.get(path), status, code)


def test_a_nul_header_on_v1_is_refused_in_the_envelope(api):
    envelope(api.get("/v1/models", HTTP_X_THING="a\x00b"), 400, "invalid_characters")


def test_file_content_answers_any_accept(api, account):
    b = batch_make(account, jsonl(2))
    for base in ("/api/v1", "/v1"):
        for accept in ("application/binary", "text/html", "*/*"):
            r = api.get(f"{base}/files/{b.input_file_id}/content", HTTP_ACCEPT=accept)
            assert r.status_code == 200 and b"".join(r.streaming_content) == jsonl(2)
    r = api.get("/v1/files/file-nope/content", HTTP_ACCEPT="application/binary")
    envelope(r, 404, "file_not_found")


@pytest.mark.parametrize(
    "limit, value, code",
    [("MAX_BATCH_REQUESTS", 10, "too_many_requests"), ("MAX_FILE_BYTES", 100, "file_too_large")],
)
def test_a_too_large_file_is_a_413_invalid_request_error(api, monkeypatch, limit, value, code):
    """Issue 23, finding 7: a file over the line limit was a `rate_limit_error` (the SDK
    raised RateLimitError and retried); OpenAI's type for a bad upload is
    `invalid_request_error`, here with the 413 status."""
    from routing.batches import files

    monkeypatch.setattr(files, limit, value)
    r = api.post("/v1/files", {"purpose": "batch", "file": io.BytesIO(jsonl(11))})
    err = envelope(r, 413, code)
    assert err["type"] == "invalid_request_error"

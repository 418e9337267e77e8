"""Problem `type` URIs resolve: /problems/<slug> is a short page (HTML for people, JSON
for clients) for every slug the code raises; an unknown slug is a 404."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from httpedge import problems
from httpedge.problemtypes import PROBLEM_TYPES
from routing.api import errors as api_errors
from routing.batches.errors import BatchError
from routing.batches.files import FileRejected

ROOT = Path(__file__).resolve().parent.parent
# Calls whose `slug=` (or, for batch and file refusals, `code=`) is a problem slug; also
# any call that passes `status_code=` with `slug=` (helpers that build a problem).
SLUG_CALLS = {"Problem", "problem_response", "problem_body"}
CODE_CALLS = {"BatchError", "BatchNotCancellable", "FileRejected"}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def slugs_in_code() -> dict[str, str]:
    """Every literal problem slug in routing/, deploy/, httpedge/ and catalog/, with where it is."""
    found: dict[str, str] = {}
    for package in ("routing", "deploy", "httpedge", "catalog"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = _name(node.func)
                status = any(kw.arg == "status_code" for kw in node.keywords)
                wanted = (
                    "slug"
                    if name in SLUG_CALLS or status
                    else "code"
                    if name in CODE_CALLS
                    else None
                )
                for kw in node.keywords:
                    if (
                        kw.arg == wanted
                        and isinstance(kw.value, ast.Constant)
                        and isinstance(kw.value.value, str)
                    ):
                        found.setdefault(kw.value.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    for _, (slug, _title) in problems._DRF_TYPES.items():
        found.setdefault(slug, "httpedge/problems.py _DRF_TYPES")
    for _, (_status, slug, _title) in api_errors.FIXED_PROBLEMS.items():
        found.setdefault(slug, "routing/api/errors.py FIXED_PROBLEMS")
    for slug in api_errors.BATCH_STATUS:
        found.setdefault(slug, "routing/api/errors.py BATCH_STATUS")
    for cls in (BatchError, FileRejected):
        default = inspect.signature(cls.__init__).parameters["code"].default
        found.setdefault(default, f"{cls.__name__} default code")
    found.setdefault("error", "httpedge/problems.py fallback")
    return found


def test_the_scan_finds_the_slugs_it_should():
    found = slugs_in_code()
    # A few from each kind of source, so a broken scan cannot pass by finding nothing.
    for slug in ("deadline-infeasible", "job-not-found", "invalid-cursor", "storage-full"):
        assert slug in found
    for slug in ("rate-limited", "idempotency-conflict", "invalid-batch", "invalid-file"):
        assert slug in found
    assert len(found) >= 40


def test_every_slug_used_in_code_has_a_page():
    missing = {s: where for s, where in slugs_in_code().items() if s not in PROBLEM_TYPES}
    assert not missing, (
        f"add these to the PROBLEM_TYPES of httpedge/problemtypes.py (HTTP), catalog/problemtypes.py or routing/api/problemtypes.py: {missing}"
    )


def test_every_entry_says_what_happened_and_what_to_do():
    for slug, p in PROBLEM_TYPES.items():
        assert p.title and p.meaning.strip() and p.action.strip(), slug
        assert 400 <= p.status < 600, slug


@pytest.mark.django_db
def test_a_problem_type_uri_resolves_to_an_html_page(client, settings):
    settings.PUBLIC_BASE_URL = "http://testserver"
    body = client.post(
        "/api/v1/quotes", {"model": "sol"}, content_type="application/json"
    ).json()  # any problem: its `type` is the page
    path = body["type"].removeprefix("http://testserver")
    assert path.startswith("/problems/")
    r = client.get(path, HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/html")
    text = r.content.decode()
    assert PROBLEM_TYPES[path.rsplit("/", 1)[-1]].title in text
    assert "What to do" in text


@pytest.mark.django_db
def test_deadline_infeasible_as_json_for_a_client(client):
    r = client.get("/problems/deadline-infeasible", HTTP_ACCEPT="application/json")
    assert r.status_code == 200 and r["Content-Type"] == "application/json"
    body = r.json()
    assert body["slug"] == "deadline-infeasible" and body["status"] == 422
    assert body["type"].endswith("/problems/deadline-infeasible")
    assert "fastest" in body["meaning"] and body["action"]
    problem_json = client.get(
        "/problems/deadline-infeasible", HTTP_ACCEPT="application/problem+json"
    )
    assert problem_json.json() == body


@pytest.mark.django_db
def test_the_index_lists_every_type(client):
    html = client.get("/problems/").content.decode()
    assert all(f'href="/problems/{s}"' in html for s in PROBLEM_TYPES)
    listed = client.get("/problems", HTTP_ACCEPT="application/json").json()["problem_types"]
    assert {p["slug"] for p in listed} == set(PROBLEM_TYPES)


@pytest.mark.django_db
@pytest.mark.parametrize("accept", ["text/html", "application/json"])
def test_an_unknown_slug_is_a_404(client, accept):
    r = client.get("/problems/no-such-problem", HTTP_ACCEPT=accept)
    assert r.status_code == 404 and r["Content-Type"] == "application/problem+json"
    assert "no-such-problem" in r.json()["detail"]


@pytest.mark.django_db
def test_only_get_and_head(client):
    assert client.post("/problems/not-found").status_code == 405
    assert client.head("/problems/not-found").status_code == 200

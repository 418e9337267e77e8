"""Issue 13: an HTTP method a known API resource does not serve answers 405
problem+json with an Allow header, for every route of the URLconf under /api/
(PATCH, PUT, DELETE, POST, TRACE, PROPFIND, an invented method), with or without an
API key, never a 500, an HTML page or a 403 CSRF page."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

PROBLEM = "application/problem+json"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "TRACE", "PROPFIND", "BREW"]
_ARG = re.compile(r"<(?:\w+:)?(\w+)>")


def api_routes() -> list[tuple[str, object]]:
    """(path with sample arguments, view callback) of every route under /api/ except
    the catch-all (unknown paths are 404, tested elsewhere)."""
    routes = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                if route.startswith("api/") and not route.startswith("^"):
                    routes.append(("/" + _ARG.sub("x", route), p.callback))

    walk(get_resolver().url_patterns, "")
    return routes


ROUTES = api_routes()


def allowed_methods(callback) -> set[str]:
    callback = getattr(callback, "__wrapped__", callback)  # httpedge.paths.both's alias
    cls = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    methods = {m.upper() for m in cls.http_method_names if hasattr(cls, m)} | {"OPTIONS"}
    return methods | ({"HEAD"} if "GET" in methods else set())


@pytest.fixture
def api_key(builtin_catalog):
    from decimal import Decimal

    from routing.accounts.accounts import account_create

    return account_create(name="methods", default_credits=Decimal(1))[1]


def test_the_api_has_routes():
    paths = {p for p, _ in ROUTES}
    assert {"/api/v1/jobs", "/api/v1/models/", "/api/v1/files/x/content"} <= paths
    assert len(ROUTES) >= 15


@pytest.mark.django_db
@pytest.mark.parametrize("path,callback", ROUTES, ids=[p for p, _ in ROUTES])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "nokey"])
def test_an_unserved_method_is_a_json_405_with_allow(path, callback, with_key, api_key):
    allowed = allowed_methods(callback)
    client = Client(enforce_csrf_checks=True, raise_request_exception=True)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_key}"} if with_key else {}
    for method in METHODS:
        if method in allowed:
            continue
        r = client.generic(method, path, **headers)
        assert r.status_code == 405, (method, path, r.status_code, r.content[:200])
        assert r["Content-Type"] == PROBLEM, (method, path, r["Content-Type"])
        body = r.json()
        assert body["status"] == 405 and body["type"].endswith("/method-not-allowed")
        assert method in body["detail"]
        assert {m.strip() for m in r["Allow"].split(",")} == allowed, (method, path)

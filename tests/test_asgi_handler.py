"""deploy.asgihandler.Handler (issue 29): a plain view's request runs its middleware
and view in one thread hop, an async view keeps Django's async chain, and what the
client gets is what Django's own ASGI handler answers: the same status, headers (the
security headers, x-ratelimit-*, the request id's) and body."""

import asyncio
import json

import pytest
from django.core.handlers.asgi import ASGIHandler

from deploy import asgihandler
from deploy.asgihandler import Handler, async_view
from tests.asgicall import call_asgi

VARYING = {b"x-request-id", b"openai-processing-ms", b"x-ratelimit-reset-requests"}


def call(app, method, path, body=b""):
    out = asyncio.run(call_asgi(app, method, path, body))
    out["headers"] = {k: v for k, v in out["headers"].items() if k not in VARYING}
    return out


@pytest.fixture(scope="module")
def handlers():
    return Handler(), ASGIHandler()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/v1/ping", b""),
        ("GET", "/api/v1/nowhere", b""),  # a 404 of no view
        ("POST", "/api/v1/quotes", b"{}"),  # a DRF view's 401
        ("DELETE", "/api/v1/ping", b""),  # 405
        ("POST", "/v1/chat/completions", b"{}"),  # the async view's 401 (OpenAI's envelope)
        ("GET", "/v1/chat/completions", b""),  # its 405
    ],
)
def test_same_answers_as_djangos_handler(handlers, method, path, body):
    ours, django = (call(h, method, path, body) for h in handlers)
    assert ours == django
    assert ours["status"] in (200, 401, 404, 405)
    if ours["status"] == 200:
        assert ours["headers"][b"x-frame-options"] == b"DENY"
        assert ours["headers"][b"x-content-type-options"] == b"nosniff"
        assert json.loads(ours["body"]) == {"ok": True}


def test_a_plain_view_is_one_hop_and_an_async_view_is_not(handlers, monkeypatch):
    assert not async_view("/api/v1/ping") and not async_view("/nowhere")
    assert async_view("/v1/chat/completions") and async_view("/v1/responses/")
    hops = []
    real = asgihandler.sync_to_async

    def counting(fn, **kwargs):
        hops.append(getattr(fn, "__name__", fn))
        return real(fn, **kwargs)

    monkeypatch.setattr(asgihandler, "sync_to_async", counting)
    assert call(handlers[0], "GET", "/api/v1/ping")["status"] == 200
    assert hops == ["serve_sync"]


def test_the_async_chain_calls_the_computing_middleware_inline(handlers, monkeypatch):
    """The chat view's chain: security, common, CSRF, clickjacking and prometheus hooks
    in the event loop; only the x-ratelimit-* headers' hook (a Redis read) hops."""
    from django.utils import deprecation

    hops = []
    real = deprecation.sync_to_async

    def counting(fn, **kwargs):
        hops.append(type(fn.__self__).__name__)
        return real(fn, **kwargs)

    monkeypatch.setattr(deprecation, "sync_to_async", counting)
    ours, django = handlers
    assert call(ours, "POST", "/v1/chat/completions", b"{}")["status"] == 401
    assert set(hops) == {"RateLimitHeadersMiddleware"}
    hops.clear()
    assert call(django, "POST", "/v1/chat/completions", b"{}")["status"] == 401
    assert {"SecurityMiddleware", "CsrfViewMiddleware", "RateLimitHeadersMiddleware"} <= set(hops)

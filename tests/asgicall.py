"""One HTTP request through an ASGI application, without a server: for the tests of
deploy.asgihandler and bench/profile_ping.py."""

from __future__ import annotations

import asyncio


async def call_asgi(app, method: str, path: str, body: bytes = b"", headers=()) -> dict:
    """{"status", "headers" (lower-case names), "body"} of `method path` with `body`
    and `headers` (pairs of bytes) from 127.0.0.1."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            *headers,
            *([(b"content-length", str(len(body)).encode())] if body else []),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    out: dict = {"status": None, "headers": {}, "body": b""}

    async def receive():
        if sent:
            return sent.pop()
        await asyncio.sleep(3600)  # the client stays until the response is complete
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.lower(): v for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out

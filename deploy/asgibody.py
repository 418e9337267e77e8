"""A request body too large for anything this service accepts is refused before it is
read (issue 13), under ASGI.

Django's ASGI handler reads the whole body (spooling to disk past
FILE_UPLOAD_MAX_MEMORY_SIZE) before any view runs, and neither gunicorn nor uvicorn
bounds it: a client could make every web process write gigabytes to disk. Bodies up
to REQUEST_MAX_BYTES (the largest upload, a 200 MB batch file, plus multipart room)
go through as before: Django reads them, so a 413 for a JSON body over
DATA_UPLOAD_MAX_MEMORY_SIZE leaves the keep-alive connection usable. A larger one,
announced by Content-Length or found while streaming a chunked body, is answered at
once with 413 `request-too-large` and `Connection: close` (uvicorn then closes the
connection instead of reading the rest), in the surface's error shape.
"""

from __future__ import annotations

import asyncio
import json
import time

from django.conf import settings

from httpedge.problems import PROBLEM_CONTENT_TYPE, problem_body


def _too_large_body(path: str, limit: int) -> tuple[bytes, bytes]:
    """(body, content type) of the 413: problem+json, or OpenAI's envelope under /v1/."""
    problem = problem_body(
        status_code=413,
        slug="request-too-large",
        title="Request body too large",
        detail=f"The request body is over {limit} bytes, more than any request or upload "
        "this service accepts.",
        instance=path,
        limit_bytes=limit,
    )
    if path.startswith("/v1/"):
        from httpedge.openai_errors import envelope_from_problem

        return json.dumps(envelope_from_problem(problem, 413)).encode(), b"application/json"
    return json.dumps(problem).encode(), PROBLEM_CONTENT_TYPE.encode()


async def _drain(receive, budget: int) -> None:
    """Read and discard the rest of the body: at most `budget` bytes, for at most
    REQUEST_DRAIN_TIMEOUT_SECONDS."""
    deadline = time.monotonic() + settings.REQUEST_DRAIN_TIMEOUT_SECONDS
    while budget > 0:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        if message["type"] != "http.request":
            return  # the client left
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class LimitRequestBody:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app, max_bytes: int | None = None):
        self.app = app
        self.max_bytes = max_bytes

    @property
    def limit(self) -> int:
        return self.max_bytes if self.max_bytes is not None else settings.REQUEST_MAX_BYTES

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit
        declared = next(
            (v for k, v in scope.get("headers", []) if k.lower() == b"content-length"), None
        )
        try:
            too_large = declared is not None and int(declared) > limit
        except ValueError:
            too_large = False  # the server refuses a malformed Content-Length itself
        if too_large:
            if int(declared) <= limit + settings.REQUEST_DRAIN_MAX_BYTES:
                await _drain(receive, settings.REQUEST_DRAIN_MAX_BYTES + limit)
            return await self._refuse(scope, send, limit)

        state = {"received": 0, "over": False, "started": False}

        async def limited_receive():
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > limit:
                    state["over"] = True
                    return {"type": "http.disconnect"}  # Django stops reading: no response
            return message

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if state["over"] and not state["started"]:
            await _drain(receive, settings.REQUEST_DRAIN_MAX_BYTES)
            await self._refuse(scope, send, limit)

    async def _refuse(self, scope, send, limit: int) -> None:
        body, content_type = _too_large_body(scope.get("path", ""), limit)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

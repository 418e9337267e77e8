"""OpenAI's error envelope for the /v1/ surface.

The native API's one exception map (routing.api.errors, httpedge.problems) decides the
status, slug, detail and extension members; httpedge.openai_errors re-renders that
problem as `{"error": {"message", "type", "param", "code", ...extensions}}`, which is
what the SDK reads (`APIStatusError.message`, `.code`, `.param`, `.type`); this module
applies it to the /v1/ views.
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from rest_framework.response import Response

from httpedge.openai_errors import envelope_from_problem, error_body
from httpedge.problems import problem_exception_handler
from routing.core.formats import cut


def openai_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler of the /v1/ views: the native handler, re-rendered."""
    response = problem_exception_handler(exc, context)
    if response is None:
        return None
    response.data = envelope_from_problem(response.data, response.status_code)
    response.content_type = "application/json"
    return response


def error_response(
    status: int, message: str, code: str | None, param: str | None = None, **ext: Any
) -> JsonResponse:
    """An OpenAI error as a plain Django response (catch-all 404/405, middleware)."""
    return JsonResponse(
        error_body(status=status, message=message, code=code, param=param, **ext), status=status
    )


def not_found(request, exception=None):  # noqa: ARG001
    """Unknown paths under /v1/: OpenAI's JSON 404 for every method (no CSRF page)."""
    return error_response(
        404,
        f"Unknown request URL: {cut(request.method, 20)} {cut(request.path)}. "
        "See the compatibility table in the README.",
        "unknown_url",
    )


def exception_response(exc: Exception, request) -> JsonResponse | None:
    """A domain problem or DRF exception raised in a plain (non-DRF) /v1/ view, in
    OpenAI's envelope with the native handler's status and headers (Retry-After, Link,
    WWW-Authenticate). None for anything else: a real bug, left to the 500 handler."""
    response = openai_exception_handler(exc, {"request": request, "view": None})
    if response is None:
        return None
    out = JsonResponse(response.data, status=response.status_code)
    for name, value in response.items():
        if name.lower() != "content-type":
            out[name] = value
    return out

"""OpenAI's error envelope for the /v1/ surface.

The native API's one exception map (routing.api.errors, deploy.problems) decides the
status, slug, detail and extension members; this module only re-renders that problem
as `{"error": {"message", "type", "param", "code", ...extensions}}`, which is what the
SDK reads (`APIStatusError.message`, `.code`, `.param`, `.type`).
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from rest_framework.response import Response

from deploy.problems import problem_exception_handler
from routing.core.formats import cut

# OpenAI's `type` by HTTP status (the SDK picks its exception class by status).
_TYPE_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}
# Problem slugs whose OpenAI `code` (and `type`) differ from the slug with underscores.
_CODE_BY_SLUG = {
    "not-authenticated": ("invalid_api_key", "authentication_error"),
    "authentication-failed": ("invalid_api_key", "authentication_error"),
    "quota-exhausted": ("insufficient_quota", "insufficient_quota"),
    "rate-limited": ("rate_limit_exceeded", "rate_limit_error"),
}
# Problem members that are not extensions (they become message/code, or are dropped).
_PROBLEM_MEMBERS = {"type", "title", "status", "detail", "instance"}


def error_type(status: int) -> str:
    if status >= 500:
        return "server_error"
    return _TYPE_BY_STATUS.get(status, "invalid_request_error")


def error_body(
    *, status: int, message: str, code: str | None, param: str | None = None, **ext: Any
) -> dict:
    err_type = error_type(status)
    return {"error": {"message": message, "type": err_type, "param": param, "code": code, **ext}}


def envelope_from_problem(problem: dict, status: int) -> dict:
    """A problem+json body (deploy.problems.problem_body) as OpenAI's error envelope."""
    slug = str(problem.get("type", "")).rstrip("/").rsplit("/", 1)[-1] or "error"
    code, err_type = _CODE_BY_SLUG.get(slug, (slug.replace("-", "_"), error_type(status)))
    ext = {k: v for k, v in problem.items() if k not in _PROBLEM_MEMBERS}
    param = ext.pop("param", None) or ext.pop("parameter", None)
    errors = ext.get("errors")
    if param is None and isinstance(errors, list) and errors and isinstance(errors[0], dict):
        param = errors[0].get("field")
    message = str(problem.get("detail") or problem.get("title") or "Error")
    return {"error": {"message": message, "type": err_type, "param": param, "code": code, **ext}}


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

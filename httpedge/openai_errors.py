"""OpenAI's error envelope: a problem+json body (httpedge.problems) re-rendered as
`{"error": {"message", "type", "param", "code", ...extensions}}`, the shape the /v1/
surface answers in (its views: routing.compat.errors; the input guard, the body-size
guard and the web server's own refusals under /v1/ too)."""

from __future__ import annotations

from typing import Any

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
    """A problem+json body (httpedge.problems.problem_body) as OpenAI's error envelope."""
    slug = str(problem.get("type", "")).rstrip("/").rsplit("/", 1)[-1] or "error"
    code, err_type = _CODE_BY_SLUG.get(slug, (slug.replace("-", "_"), error_type(status)))
    ext = {k: v for k, v in problem.items() if k not in _PROBLEM_MEMBERS}
    param = ext.pop("param", None) or ext.pop("parameter", None)
    errors = ext.get("errors")
    if param is None and isinstance(errors, list) and errors and isinstance(errors[0], dict):
        param = errors[0].get("field")
    message = str(problem.get("detail") or problem.get("title") or "Error")
    return {"error": {"message": message, "type": err_type, "param": param, "code": code, **ext}}

"""RFC 9457 problem details: the one shape every API error takes.

Views raise `Problem` (or any DRF exception); the DRF exception handler and the
plain-Django 404/500 handlers below all render through `problem_response`, so a
client never sees an HTML error page or a bare `{"detail": ...}`.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import Http404, HttpResponse, JsonResponse
from django.utils.html import format_html
from kombu.exceptions import OperationalError as BrokerOperationalError
from rest_framework import exceptions, status
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler, set_rollback

from httpedge.text import cut

logger = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
# The longest request path a problem's `instance` repeats (a URI: cut, it would name
# another resource, so a longer one is left out).
INSTANCE_MAX = 2000


def problem_type_uri(slug: str) -> str:
    return f"{settings.PUBLIC_BASE_URL}/problems/{slug}"


class Problem(exceptions.APIException):
    """An error with a stable `type` slug, a title, a detail and extension members."""

    def __init__(
        self,
        *,
        status_code: int,
        slug: str,
        title: str,
        detail: str,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail=detail)
        self.status_code = status_code
        self.slug = slug
        self.title = title
        self.extensions = extensions
        self.extra_headers = headers or {}


# Default slugs and titles for DRF's own exceptions.
_DRF_TYPES: dict[type, tuple[str, str]] = {
    exceptions.ParseError: ("malformed-request", "Malformed request"),
    exceptions.ValidationError: ("invalid-request", "Invalid request"),
    exceptions.NotAuthenticated: ("not-authenticated", "Authentication required"),
    exceptions.AuthenticationFailed: ("authentication-failed", "Authentication failed"),
    exceptions.PermissionDenied: ("forbidden", "Forbidden"),
    exceptions.NotFound: ("not-found", "Not found"),
    exceptions.MethodNotAllowed: ("method-not-allowed", "Method not allowed"),
    exceptions.NotAcceptable: ("not-acceptable", "Not acceptable"),
    exceptions.UnsupportedMediaType: ("unsupported-media-type", "Unsupported media type"),
    # Not "too-many-requests": that is a batch file with too many lines (413).
    exceptions.Throttled: ("rate-limited", "Rate limit exceeded"),
}


def problem_body(
    *, status_code: int, slug: str, title: str, detail: str, instance: str | None, **ext: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": problem_type_uri(slug),
        "title": title,
        "status": status_code,
        "detail": detail,
    }
    if instance and len(instance) <= INSTANCE_MAX:  # (a longer path is not echoed back)
        body["instance"] = instance
    body.update(ext)
    return body


def _flatten_validation(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """DRF's nested error dict as a flat list of {field, message} for clients."""
    errors: list[dict[str, str]] = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            errors.extend(_flatten_validation(value, name))
    elif isinstance(detail, list):
        for item in detail:
            errors.extend(_flatten_validation(item, prefix))
    else:
        errors.append({"field": prefix or "non_field_errors", "message": str(detail)})
    return errors


# The database or the broker is away (or refused for a moment: a lost connection, a
# lock or statement timeout): not the client's fault nor a bug, so 503 and a hint when
# to try again, never a 500. The one list, used by the DRF handler, the middleware for
# plain views under /api/ (httpedge.middleware) and the 500 handler.
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    DatabaseOperationalError,
    DatabaseInterfaceError,
    BrokerOperationalError,  # kombu's "cannot reach the broker"
    ConnectionError,  # a socket refused or reset on the way to either
)
RETRY_AFTER_SECONDS = 5


def unavailable_problem(exc: BaseException, path: str | None) -> tuple[dict[str, Any], dict]:
    """The 503 body and headers for a dependency that is away (logged here, once; the
    error's own text, which may name hosts or users, stays in the log)."""
    logger.error("service unavailable at %s: %s", path, exc, exc_info=exc)
    body = problem_body(
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        slug="service-unavailable",
        title="Service unavailable",
        detail="A service this API depends on is unreachable for the moment; "
        f"retry in {RETRY_AFTER_SECONDS} seconds.",
        instance=path,
        retry_after_seconds=RETRY_AFTER_SECONDS,
    )
    return body, {"Retry-After": str(RETRY_AFTER_SECONDS)}


def unavailable_response(exc: BaseException, path: str | None) -> JsonResponse:
    """`unavailable_problem` as a plain Django response (middleware, 500 handler)."""
    body, headers = unavailable_problem(exc, path)
    response = JsonResponse(
        body, status=status.HTTP_503_SERVICE_UNAVAILABLE, content_type=PROBLEM_CONTENT_TYPE
    )
    for name, value in headers.items():
        response[name] = value
    return response


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    if isinstance(exc, UNAVAILABLE_ERRORS):
        set_rollback()
        body, headers = unavailable_problem(exc, request.path if request is not None else None)
        return Response(
            body,
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers=headers,
            content_type=PROBLEM_CONTENT_TYPE,
        )
    if isinstance(exc, RequestDataTooBig):
        # Django raises it from request.body: a 413 also with DEBUG on (no debug page).
        return Response(
            too_big_body(request.path if request is not None else None),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            content_type=PROBLEM_CONTENT_TYPE,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    response = exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django's 500 handler answer (also problem+json)
    instance = request.path if request is not None else None
    if isinstance(exc, Problem):
        body = problem_body(
            status_code=exc.status_code,
            slug=exc.slug,
            title=exc.title,
            detail=str(exc.detail),
            instance=instance,
            **exc.extensions,
        )
        for name, value in exc.extra_headers.items():
            response[name] = value
    else:
        slug, title = next(
            (v for k, v in _DRF_TYPES.items() if isinstance(exc, k)), ("error", "Error")
        )
        if isinstance(exc, exceptions.ValidationError):
            errors = _flatten_validation(exc.detail)
            detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
            body = problem_body(
                status_code=response.status_code,
                slug=slug,
                title=title,
                detail=detail,
                instance=instance,
                errors=errors,
            )
        elif isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            wait = max(1, math.ceil(exc.wait))
            body = problem_body(
                status_code=response.status_code,
                slug=slug,
                title=title,
                detail=f"Too many requests; try again in {wait} seconds.",
                instance=instance,
                retry_after_seconds=wait,
            )
            response["Retry-After"] = str(wait)
        else:
            body = problem_body(
                status_code=response.status_code,
                slug=slug,
                title=title,
                detail=str(getattr(exc, "detail", exc)),
                instance=instance,
            )
    response.data = body
    response.content_type = PROBLEM_CONTENT_TYPE
    if request is not None and not isinstance(
        getattr(request, "accepted_renderer", None), JSONRenderer | BrowsableAPIRenderer
    ):
        # A view that renders something else (the schema's YAML, the docs' HTML page)
        # answers its errors in JSON too (DRF renders with what the request negotiated).
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = "application/json"
    return response


def problem_response(
    *, status_code: int, slug: str, title: str, detail: str, instance: str | None = None, **ext
) -> JsonResponse:
    return JsonResponse(
        problem_body(
            status_code=status_code,
            slug=slug,
            title=title,
            detail=detail,
            instance=instance,
            **ext,
        ),
        status=status_code,
        content_type=PROBLEM_CONTENT_TYPE,
    )


def plain_page(status_code: int, title: str, detail: str) -> HttpResponse:
    """A plain HTML error page, for the admin (a browser's surface, not the API's)."""
    page = format_html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{} {}</title>'
        "</head><body><h1>{} {}</h1><p>{}</p></body></html>",
        status_code,
        title,
        status_code,
        title,
        detail,
    )
    return HttpResponse(page, status=status_code, content_type="text/html; charset=utf-8")


def handler404(request, exception=None):  # noqa: ARG001
    if request.path.startswith("/admin/"):
        return plain_page(404, "Not found", "Nothing at this address.")
    return problem_response(
        status_code=status.HTTP_404_NOT_FOUND,
        slug="not-found",
        title="Not found",
        detail=f"Nothing at {cut(request.path)}.",
        instance=request.path,
    )


def handler500(request):
    exc = sys.exc_info()[1]  # Django calls this while handling the uncaught exception
    if isinstance(exc, UNAVAILABLE_ERRORS):
        return unavailable_response(exc, request.path)
    return internal_error_response(request.path)


def internal_error_response(path: str | None) -> JsonResponse:
    return problem_response(
        status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
        slug="internal-error",
        title="Internal server error",
        detail="The server failed to answer; the error was logged.",
        instance=path,
    )


def too_big_body(path: str | None) -> dict[str, Any]:
    """The 413 problem for a body over DATA_UPLOAD_MAX_MEMORY_SIZE (Django's
    RequestDataTooBig); the connection is then drained or closed by deploy.bodydrain."""
    return problem_body(
        status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        slug="request-too-large",
        title="Request body too large",
        detail=f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes; "
        "upload large inputs as a file (POST /api/v1/files).",
        instance=path,
        limit_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    )


def handler400(request, exception=None):
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(
            too_big_body(request.path),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            content_type=PROBLEM_CONTENT_TYPE,
        )
    if request.path.startswith("/admin/"):
        return plain_page(400, "Bad request", "The request could not be understood.")
    return problem_response(
        status_code=status.HTTP_400_BAD_REQUEST,
        slug="malformed-request",
        title="Bad request",
        detail="The request could not be understood.",
        instance=request.path,
    )

"""Refuse, before any view or query runs, requests on any path whose path, query or
headers hold a NUL character (PostgreSQL refuses NUL in text, so it could only ever end
in a 500), or whose path names an integer id past a 64-bit integer (no row has it; the
admin's lookups would overflow). A NUL or an overflowing id in the path names nothing
(404); a NUL in the query or a header, or an overflowing integer in an admin query
(its date hierarchy's `?created_at__year=`), is bad input (400). The answer takes each
surface's shape: problem+json on /api/ (and other non-browser paths), OpenAI's error
envelope on /v1/, a plain page on /admin/. (JSON bodies: routing.api.parsers.)
And answer 503 for a plain view under /api/ whose database or broker is away
(ServiceUnavailableMiddleware)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote_to_bytes

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from django.utils.deprecation import MiddlewareMixin
from rest_framework import status
from whitenoise.middleware import WhiteNoiseMiddleware

from httpedge.openai_errors import envelope_from_problem
from httpedge.problems import (
    UNAVAILABLE_ERRORS,
    plain_page,
    problem_body,
    problem_response,
    unavailable_response,
)

# The widest integer column (bigint): an id past it names no row anywhere.
INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"[+-]?\d+")
# Free text in an admin query (its search box, the login's next page): never a number.
_FREE_TEXT_PARAMS = {"q", "next"}


def _refusal(request, **problem) -> HttpResponse:
    """The problem, in OpenAI's envelope under /v1/, as a plain page under /admin/,
    else as problem+json."""
    if request.path.startswith("/v1/"):
        body = problem_body(**{"instance": None, **problem})
        status_code = problem["status_code"]
        return JsonResponse(envelope_from_problem(body, status_code), status=status_code)
    if request.path.startswith("/admin/"):
        return plain_page(problem["status_code"], problem["title"], problem["detail"])
    return problem_response(**problem)


@sync_and_async_middleware
def api_input_guard(get_response):
    # Sync and async: under ASGI a sync-only middleware costs every request thread hops.
    if iscoroutinefunction(get_response):

        async def amiddleware(request):
            return _refused(request) or await get_response(request)

        return amiddleware

    def middleware(request):
        return _refused(request) or get_response(request)

    return middleware


def overflows(text: str) -> bool:
    """Whether `text` is an integer outside a signed 64-bit integer's range (of any
    length: no int() of thousands of digits)."""
    if len(text) < 19 or not _INTEGER.fullmatch(text):
        return False
    digits = text.lstrip("+-").lstrip("0")
    return len(digits) > 19 or not -INT64_MAX - 1 <= int(text) <= INT64_MAX


def _refused(request):
    """The 404/400 refusal of a request holding a NUL character or an overflowing id,
    else None."""
    if "\x00" in request.path:
        return _refusal(
            request,
            status_code=status.HTTP_404_NOT_FOUND,
            slug="not-found",
            title="Not found",
            detail="Nothing at a path that holds a NUL character.",
            instance=request.path.replace("\x00", "\\u0000"),
        )
    if any(overflows(part) for part in request.path.split("/")):
        return _refusal(
            request,
            status_code=status.HTTP_404_NOT_FOUND,
            slug="not-found",
            title="Not found",
            detail="Nothing at a path whose id is past a 64-bit integer.",
            instance=request.path,
        )
    query = request.META.get("QUERY_STRING", "")
    if query and b"\x00" in unquote_to_bytes(query.replace("+", " ")):
        return _refusal(
            request,
            status_code=status.HTTP_400_BAD_REQUEST,
            slug="invalid-characters",
            title="Invalid characters",
            detail="A query parameter holds a NUL character (%00).",
            instance=request.path,
        )
    if query and request.path.startswith("/admin/"):
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name not in _FREE_TEXT_PARAMS and overflows(value):
                return _refusal(
                    request,
                    status_code=status.HTTP_400_BAD_REQUEST,
                    slug="invalid-parameter",
                    title="Invalid parameter",
                    detail=f"The query parameter {name[:100]} is past a 64-bit integer.",
                    instance=request.path,
                )
    if any(
        "\x00" in value
        for name, value in request.META.items()
        if name.startswith("HTTP_") and isinstance(value, str)
    ):
        return _refusal(
            request,
            status_code=status.HTTP_400_BAD_REQUEST,
            slug="invalid-characters",
            title="Invalid characters",
            detail="A request header holds a NUL character.",
            instance=request.path,
        )
    return None


class ServiceUnavailableMiddleware(MiddlewareMixin):
    """A plain (non-DRF) view under /api/ whose database or broker is away answers the
    same 503 problem as the DRF views (httpedge.problems.UNAVAILABLE_ERRORS), even with
    DEBUG on; DRF views answer it from their exception handler. (MiddlewareMixin: sync
    and async.)"""

    def process_exception(self, request, exception):
        if request.path.startswith("/api/") and isinstance(exception, UNAVAILABLE_ERRORS):
            return unavailable_response(exception, request.path)
        return None


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise (the admin's static files), sync and async: WhiteNoise itself is
    sync-only, which under ASGI would cost every request two thread hops."""

    sync_capable = async_capable = True

    def __init__(self, get_response):
        super().__init__(get_response)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request):
        path = request.path_info
        found = self.find_file(path) if self.autorefresh else self.files.get(path)
        if found is not None:
            return await sync_to_async(self.serve)(found, request)
        return await self.get_response(request)


# --- The browser's middleware, skipped on the API -----------------------------------------
# Sessions, CSRF, Django's user and messages serve the admin and its login page. The API (/api/, and the OpenAI-compatible /v1/) authenticates with a
# bearer key (DRF, routing.accounts.auth), sets no cookie and is CSRF-exempt, so on its
# paths these pass the request straight on (issue 16: about 0.1 ms a request). The
# security headers, the input guard, the 503 answer, X-Frame-Options and the
# x-ratelimit-* headers stay on every path.
API_PATHS = ("/api/", "/v1/")


def browser_only(base: type) -> type:
    """`base` (a sync-and-async middleware) for every path but the API's."""

    def __call__(self, request):
        if request.path.startswith(API_PATHS):
            return self.get_response(request)  # a coroutine in async mode: awaited upstream
        return base.__call__(self, request)

    attrs = {"__call__": __call__, "__doc__": f"{base.__name__}, not on {API_PATHS}."}
    if hasattr(base, "process_view"):

        def process_view(self, request, view_func, view_args, view_kwargs):
            if request.path.startswith(API_PATHS):
                return None
            return base.process_view(self, request, view_func, view_args, view_kwargs)

        attrs["process_view"] = process_view
    return type(f"Browser{base.__name__}", (base,), attrs)


def _browser_middleware():
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.contrib.messages.middleware import MessageMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware
    from django_otp.middleware import OTPMiddleware

    return (
        browser_only(SessionMiddleware),
        browser_only(AuthenticationMiddleware),
        browser_only(OTPMiddleware),
        browser_only(MessageMiddleware),
    )


(
    BrowserSessionMiddleware,
    BrowserAuthenticationMiddleware,
    BrowserOTPMiddleware,
    BrowserMessageMiddleware,
) = _browser_middleware()

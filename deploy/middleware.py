"""Refuse, before any view or query runs, API requests (/api/, and the OpenAI-compatible
/v1/ in OpenAI's error envelope) whose path, query or headers hold a NUL character:
PostgreSQL refuses NUL in text, so it could only ever end in a 500. A NUL in the path
names nothing (404); in the query or a header it is bad input (400).
(JSON bodies: routing.api.parsers.) And answer 503 for a plain view under /api/ whose
database or broker is away (ServiceUnavailableMiddleware)."""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from django.http import JsonResponse
from rest_framework import status

from deploy.problems import (
    UNAVAILABLE_ERRORS,
    problem_body,
    problem_response,
    unavailable_response,
)
from routing.compat.errors import envelope_from_problem


def _refusal(request, **problem) -> JsonResponse:
    """The problem, as problem+json under /api/ or OpenAI's envelope under /v1/."""
    if request.path.startswith("/v1/"):
        body = problem_body(**{"instance": None, **problem})
        status_code = problem["status_code"]
        return JsonResponse(envelope_from_problem(body, status_code), status=status_code)
    return problem_response(**problem)


def api_input_guard(get_response):
    def middleware(request):
        if request.path.startswith(("/api/", "/v1/")):
            if "\x00" in request.path:
                return _refusal(
                    request,
                    status_code=status.HTTP_404_NOT_FOUND,
                    slug="not-found",
                    title="Not found",
                    detail="Nothing at a path that holds a NUL character.",
                    instance=request.path.replace("\x00", "\\u0000"),
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
        return get_response(request)

    return middleware


class ServiceUnavailableMiddleware:
    """A plain (non-DRF) view under /api/ whose database or broker is away answers the
    same 503 problem as the DRF views (deploy.problems.UNAVAILABLE_ERRORS), even with
    DEBUG on; DRF views answer it from their exception handler."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if request.path.startswith("/api/") and isinstance(exception, UNAVAILABLE_ERRORS):
            return unavailable_response(exception, request.path)
        return None

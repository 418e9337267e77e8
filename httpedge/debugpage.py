"""Django's debug pages (DEBUG on, as `make run` has it) only for the machine itself,
and never with credentials in them (issue 13).

- `debug_page_local_only`: a client that is not loopback (127.0.0.0/8, ::1) nor in
  INTERNAL_IPS, or that came through a proxy (X-Forwarded-For), gets the same answer
  as with DEBUG off (the problem+json of httpedge.problems) instead of the technical 500
  or 404 page, which shows code, settings and the request's environment.
- `CredentialsFilter` (DEFAULT_EXCEPTION_REPORTER_FILTER): the debug page and error
  reports hide, besides what Django hides (names with KEY, PASS, SECRET, TOKEN...), every
  value holding a URL with a password (DATABASE_URL, CELERY_BROKER_URL, in settings, in
  the request's environment and in local variables) and the passwords in DATABASES.
"""

from __future__ import annotations

import ipaddress
import re
import sys

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.signals import got_request_exception
from django.utils.decorators import sync_and_async_middleware
from django.views.debug import SafeExceptionReporterFilter
from rest_framework.response import Response

from httpedge import problems

# scheme://user:password@host: a URL that carries a password (the user may be empty).
URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.\-]*://[^/@\s:]*:[^/@\s]+@", re.IGNORECASE)


def is_local_client(request) -> bool:
    """A request from this machine (loopback) or from INTERNAL_IPS, not proxied."""
    if request.META.get("HTTP_X_FORWARDED_FOR"):
        return False
    addr = request.META.get("REMOTE_ADDR", "")
    if addr in getattr(settings, "INTERNAL_IPS", ()):
        return True
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def _remember_exception(sender, request=None, **kwargs):  # noqa: ARG001
    """Django sends this just before it renders the 500 (technical or not): keep the
    exception so the middleware can answer what handler500 would."""
    if request is not None:
        request._uncaught_exception = sys.exc_info()[1]


got_request_exception.connect(_remember_exception, dispatch_uid="httpedge.debugpage")


@sync_and_async_middleware
def debug_page_local_only(get_response):
    # Sync and async: a sync-only middleware in Django's async chain (the chat views)
    # turns the chain around it into thread hops (issue 29).
    if iscoroutinefunction(get_response):

        async def amiddleware(request):
            return _local_only(request, await get_response(request))

        return amiddleware

    def middleware(request):
        return _local_only(request, get_response(request))

    return middleware


def _local_only(request, response):
    """`response`, or what the handlers answer with DEBUG off (httpedge.problems) in
    place of Django's debug page for a client that is not local."""
    if not settings.DEBUG or is_local_client(request) or not _is_debug_page(response):
        return response
    if response.status_code == 404:
        return problems.handler404(request)
    if response.status_code == 400:  # a SuspiciousOperation (Django logged it)
        return problems.handler400(request)
    exc = getattr(request, "_uncaught_exception", None)
    if isinstance(exc, problems.UNAVAILABLE_ERRORS):
        return problems.unavailable_response(exc, request.path)
    return problems.internal_error_response(request.path)


def _is_debug_page(response) -> bool:
    """Django's technical 400/404/500 pages are HTML or plain text; every error this
    service answers itself is problem+json (DRF's, also in the browsable API's HTML)."""
    if isinstance(response, Response):
        return False
    kind = response.get("Content-Type", "")
    return response.status_code in (400, 404, 500) and kind.startswith(("text/html", "text/plain"))


class CredentialsFilter(SafeExceptionReporterFilter):
    """Django's filter, also hiding URLs with a password and DATABASES passwords."""

    def cleanse_setting(self, key, value):
        cleansed = super().cleanse_setting(key, value)
        # str(): a lazy object (django-axes' settings) passes isinstance but is no str
        if isinstance(cleansed, str) and URL_WITH_PASSWORD.search(str(cleansed)):
            return self.cleansed_substitute
        if isinstance(key, str) and key.upper() == "DATABASES" and isinstance(cleansed, dict):
            # Django already hides PASSWORD; OPTIONS may hold a libpq "password" or a DSN.
            return {alias: self._cleanse_database(db) for alias, db in cleansed.items()}
        return cleansed

    def _cleanse_database(self, db):
        if not isinstance(db, dict):
            return db
        db = dict(db)
        if db.get("PASSWORD"):
            db["PASSWORD"] = self.cleansed_substitute
        return db

    def get_traceback_frame_variables(self, request, tb_frame):
        return [
            (name, self._cleanse_local(value))
            for name, value in super().get_traceback_frame_variables(request, tb_frame)
        ]

    def _cleanse_local(self, value):
        if isinstance(value, str | bytes):
            text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            if URL_WITH_PASSWORD.search(text):
                return self.cleansed_substitute
        return value

"""Django's ASGI handler with one thread hop for a request to a plain (sync) view
(issue 29).

Django's own handler, for every request:
- enters a ThreadSensitiveContext, which starts a thread for the request's sync code
  (and stops it at the end);
- sends request_started and request_finished through sync_to_async (two hops);
- runs the middleware chain in async mode, where each middleware built on
  MiddlewareMixin (security headers, CSRF, common, clickjacking, the x-ratelimit-*
  headers, django-prometheus) calls its process_request and process_response through
  sync_to_async, and a sync view (every DRF view) is one more hop.
That made about 16 thread hops and 2 new threads for GET /api/v1/ping: most of its 3.5
ms (README "Bare request and chat path (issue 29)").

Here a request whose view is sync (every view but /v1/chat/completions and
/v1/responses) runs request_started, the same middleware in the same order loaded in
sync mode (what WSGI and Django's test client run), its view, and (for a response
already in memory) the response's close with request_finished, in ONE call on a
thread of a reused pool (`SYNC_THREADS`, WEB_SYNC_THREADS, default 32 a process); then
the bytes are sent from the event loop. The database connection is opened and given
back to the pool within that one call, so it never crosses threads. A streamed response
of a sync view (a file's content) gives its connection back before it streams and is
closed after it, as Django closes it.

A request whose view is a coroutine function (chat completions and responses: they
hold a coroutine while they wait, never a thread) keeps Django's async chain, with one
change: the middleware in `INLINE` (their process_request, process_view and
process_response only compute: headers, a cookie's look, metric counters) are called in
the event loop instead of through sync_to_async, about 10 thread hops fewer. The
x-ratelimit-* headers (a Redis read) keep their hop."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache, lru_cache

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.db import close_old_connections
from django.http import FileResponse
from django.urls import get_resolver, set_script_prefix

SYNC_THREADS = ThreadPoolExecutor(
    max_workers=int(os.environ.get("WEB_SYNC_THREADS", "32")), thread_name_prefix="sync-view"
)


# Middleware whose hooks do no I/O: called in the event loop in the async chain.
INLINE = frozenset(
    {
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
        "django_prometheus.middleware.PrometheusBeforeMiddleware",
        "django_prometheus.middleware.PrometheusAfterMiddleware",
    }
)


async def _inline_acall(self, request):
    """MiddlewareMixin.__acall__ without its sync_to_async."""
    response = None
    if hasattr(self, "process_request"):
        response = self.process_request(request)
    response = response or await self.get_response(request)
    if hasattr(self, "process_response"):
        response = self.process_response(request, response)
    return response


@cache
def inline(cls: type) -> type:
    """`cls` (a MiddlewareMixin) with its hooks called in the event loop."""
    attrs = {"__acall__": _inline_acall, "__doc__": cls.__doc__}
    if hasattr(cls, "process_view"):

        async def process_view(self, request, view_func, view_args, view_kwargs):
            return cls.process_view(self, request, view_func, view_args, view_kwargs)

        attrs["process_view"] = process_view
    return type(cls.__name__, (cls,), attrs)


@lru_cache(maxsize=4096)
def async_view(path: str) -> bool:
    """Whether the view `path` resolves to is a coroutine function (False for a path
    no view serves, or one whose resolving fails: the sync chain answers it as Django
    would)."""
    try:
        match = get_resolver().resolve(path)
    except Exception:  # noqa: BLE001 - Resolver404, or anything the sync chain answers
        return False
    return iscoroutinefunction(match.func)


def path_info(scope) -> str:
    """The request's path within the application, as Django's ASGIRequest reads it."""
    path = scope["path"]
    root = scope.get("root_path", "")
    return (path.removeprefix(root) if root and path.startswith(root) else path) or "/"


class Handler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()  # the async chain, for the async views
        self.sync_handler = BaseHandler()
        self.sync_handler.load_middleware(is_async=False)

    def load_middleware(self, is_async=False):
        """Django's, the `INLINE` middleware swapped for their `inline` form (the
        names stay in settings.MIDDLEWARE: check --deploy looks for them there)."""
        real = base.import_string

        def import_string(path):
            found = real(path)
            return inline(found) if is_async and path in INLINE else found

        base.import_string = import_string  # while the chain is built (start-up only)
        try:
            super().load_middleware(is_async)
        finally:
            base.import_string = real

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not async_view(path_info(scope)):
            await self.handle_sync(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    def serve_sync(self, scope, body_file):
        """Everything of a plain view's request but the sending, in one thread."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.sync_handler.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if response.streaming:
            close_old_connections()  # the connection back before the body streams
        else:
            response.close()  # request_finished: in this thread, the bytes in hand
        return response

    async def handle_sync(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(
                self.serve_sync, thread_sensitive=False, executor=SYNC_THREADS
            )(scope, body_file)
            try:
                await self.send_response(response, send)
            finally:
                if response.streaming:
                    await sync_to_async(
                        response.close, thread_sensitive=False, executor=SYNC_THREADS
                    )()
        finally:
            body_file.close()

"""Every response's request id and processing time, as OpenAI sends them:
`x-request-id` (what the SDK shows as `request_id` / `_request_id`) and
`openai-processing-ms` (milliseconds from the request's arrival to its response's
headers: for a stream, until the first byte is ready).

The id is `req_` and 32 hex digits, or the caller's own `X-Request-Id` when it is a
plain token of at most 64 characters (a proxy's id carries through). It is in the log
lines written while the request is served (`request_id` on every log record, through a
context variable that follows the request into sync_to_async threads), so a client's
report names the log lines to read. The same id follows the request's Celery tasks
(routing.tasks.context puts it in the task message's headers and restores it here in the
worker with `bind`, with the task's id and name as further log fields).

Outermost middleware: sync and async, so under ASGI it costs no thread hop."""

from __future__ import annotations

import contextvars
import logging
import re
import time
import uuid

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

_current: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
# Further fields for every log record while a unit of work runs (a Celery task's id and
# name), as (name, value) pairs.
_fields: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "log_fields", default=()
)
# At least one letter or digit: "-" is the log lines' "no request".
_TOKEN = re.compile(r"(?=[._:-]*[A-Za-z0-9])[A-Za-z0-9._:-]{1,64}")


def current() -> str:
    """The id of the request being served ('-' outside a request)."""
    return _current.get()


def new_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def accepted(sent: object) -> str | None:
    """`sent` when it is an id we carry on (a plain token of at most 64 characters)."""
    return sent if isinstance(sent, str) and _TOKEN.fullmatch(sent) else None


def bind(rid: str, **fields: str) -> tuple[contextvars.Token, contextvars.Token]:
    """Make `rid` (and `fields`) the current log context, e.g. in a worker for the
    duration of a task; `unbind` the result afterwards."""
    return _current.set(rid), _fields.set(tuple(fields.items()))


def unbind(tokens: tuple[contextvars.Token, contextvars.Token]) -> None:
    rid_token, fields_token = tokens
    _fields.reset(fields_token)
    _current.reset(rid_token)


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every log record (the LOGGING formatter prints it), and
    while a task runs its `task_id` and `task_name`."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _current.get()
        for name, value in _fields.get():
            setattr(record, name, value)
        return True


def _begin(request) -> tuple[str, float]:
    rid = accepted(request.headers.get("X-Request-Id", "")) or new_id()
    request.request_id = rid
    # Not reset when the response leaves this middleware: Django logs a 4xx/5xx
    # (django.request) after the middleware chain, and that line belongs to this
    # request too. The next request sets its own (under ASGI each has its own context).
    _current.set(rid)
    _fields.set(())
    return rid, time.perf_counter()


def _end(response, rid: str, started: float):
    response["x-request-id"] = rid
    response["openai-processing-ms"] = str(max(0, round((time.perf_counter() - started) * 1000)))
    return response


@sync_and_async_middleware
def request_id(get_response):
    if iscoroutinefunction(get_response):

        async def amiddleware(request):
            rid, started = _begin(request)
            return _end(await get_response(request), rid, started)

        return amiddleware

    def middleware(request):
        rid, started = _begin(request)
        return _end(get_response(request), rid, started)

    return middleware

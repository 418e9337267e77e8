"""A request body the application did not read must not break keep-alive (issue 13).

Django refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE (413 `request-too-large`, and
likewise a 401 or 404 answered before the body is read) without reading it. gunicorn
then says `Connection: keep-alive`, drains at most 64 KB of what is left after the
response, and closes the connection when more is left: the client's next request on
that connection fails. This WSGI middleware settles it before the response starts:

- a body of at most `REQUEST_DRAIN_MAX_BYTES` left unread is read and discarded, so the
  connection stays usable and keep-alive is true;
- a larger one (or one whose reading stalls for `REQUEST_DRAIN_TIMEOUT_SECONDS`) is left
  unread and the response says `Connection: close`: under gunicorn by telling its
  response object to close (an application may not send hop-by-hop headers itself,
  PEP 3333; gunicorn drops them). Django's runserver drains any body itself.
"""

from __future__ import annotations

import logging
import socket
import time

from django.conf import settings

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class _CountingInput:
    """wsgi.input, counting the bytes the application reads."""

    def __init__(self, stream):
        self._stream = stream
        self.consumed = 0

    def read(self, *args):
        data = self._stream.read(*args)
        self.consumed += len(data)
        return data

    def readline(self, *args):
        data = self._stream.readline(*args)
        self.consumed += len(data)
        return data

    def readlines(self, *args):
        lines = self._stream.readlines(*args)
        self.consumed += sum(len(line) for line in lines)
        return lines

    def __iter__(self):
        for line in self._stream:
            self.consumed += len(line)
            yield line

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _content_length(environ) -> int | None:
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    return length if length >= 0 else None


def _drain(stream, remaining: int | None, *, limit: int, sock, timeout: float) -> bool:
    """Read and discard what is left of the body (`remaining` bytes, or to the end of a
    body the server delimits when None); False when that is over `limit` bytes or
    does not arrive within `timeout` seconds (then the connection must close)."""
    if remaining is not None and remaining > limit:
        return False
    deadline = time.monotonic() + timeout
    prior = sock.gettimeout() if sock is not None else None
    drained = 0
    try:
        while remaining is None or drained < remaining:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if sock is not None:
                sock.settimeout(left)
            want = _CHUNK if remaining is None else min(_CHUNK, remaining - drained)
            data = stream.read(want)
            if not data:
                return remaining is None  # the end of a delimited body, or a cut-off one
            drained += len(data)
            if drained > limit:
                return False
        return True
    except (OSError, ValueError):  # socket timeouts are OSErrors
        return False
    finally:
        if sock is not None:
            try:
                sock.settimeout(prior)
            except OSError:
                pass


class DrainUnreadBody:
    """Wraps the WSGI application (deploy.wsgi)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        length = _content_length(environ)
        # Without a length, only a server that delimits the body itself (chunked, under
        # gunicorn: wsgi.input_terminated) lets it be read to its end safely.
        if length is None and not environ.get("wsgi.input_terminated"):
            return self.app(environ, start_response)
        if length == 0:
            return self.app(environ, start_response)
        counting = _CountingInput(environ["wsgi.input"])
        environ["wsgi.input"] = counting
        closing = []  # the socket to close gracefully once the response is written

        def settled_start_response(status, headers, exc_info=None):
            remaining = None if length is None else length - counting.consumed
            if remaining is None or remaining > 0:
                drained = _drain(
                    counting,
                    remaining,
                    limit=settings.REQUEST_DRAIN_MAX_BYTES,
                    sock=environ.get("gunicorn.socket"),
                    timeout=settings.REQUEST_DRAIN_TIMEOUT_SECONDS,
                )
                if not drained:
                    server_response = getattr(start_response, "__self__", None)
                    force_close = getattr(server_response, "force_close", None)
                    if callable(force_close):  # gunicorn: it then says Connection: close
                        force_close()
                        if environ.get("gunicorn.socket") is not None:
                            closing.append(environ["gunicorn.socket"])
                    logger.info(
                        "%s %s: request body left unread, closing the connection",
                        environ.get("REQUEST_METHOD"),
                        environ.get("PATH_INFO"),
                    )
            if exc_info is None:
                return start_response(status, headers)
            return start_response(status, headers, exc_info)

        response = self.app(environ, settled_start_response)
        return _LingeringClose(response, closing)


class _LingeringClose:
    """The response iterable; when the connection is to close with body bytes still
    coming, `close()` (called by the server once the response is written) ends the
    response with a FIN and reads what the client still sends for a moment before the
    server closes: closing with unread bytes would send a TCP reset, and a client still
    sending its body would see "connection reset" instead of the 413."""

    def __init__(self, response, closing: list):
        self.response, self.closing = response, closing

    def __iter__(self):
        return iter(self.response)

    def close(self):
        try:
            if hasattr(self.response, "close"):
                self.response.close()
        finally:
            for sock in self.closing:
                _linger(sock, settings.REQUEST_DRAIN_TIMEOUT_SECONDS)

    def __getattr__(self, name):  # e.g. a FileResponse's file wrapper attributes
        return getattr(self.response, name)


def _linger(sock, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        sock.shutdown(socket.SHUT_WR)
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(_CHUNK):
                return
    except OSError:  # reset, timed out: the server closes it now anyway
        return

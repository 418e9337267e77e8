"""The web server as deployed: gunicorn with uvicorn workers (deploy/gunicorn.conf.py
names `Worker` below; deploy/run.sh, the tests and the benchmarks start gunicorn with
`-c deploy/gunicorn.conf.py`), with the edges plain uvicorn leaves open closed (issue 23).

- Client addresses: the server never rewrites the client address or the scheme from
  X-Forwarded-For / X-Forwarded-Proto (uvicorn's `proxy_headers` off; it trusted
  127.0.0.1 by default, so a client could pick its address). The one rule is
  httpedge.clientip.client_ip (TRUSTED_PROXY_COUNT), used by the throttle, the admin
  login lockout (django-axes) and /metrics alike.
- Timeouts (uvicorn times out only an idle connection after a response):
  * idle: a connection with no request under way (new, or after a response) is closed
    after WEB_KEEPALIVE_SECONDS (75: longer than the usual client pools' idle time, so a
    client polling every few seconds never meets a closed connection);
  * header: a request line and headers not complete WEB_HEADER_TIMEOUT_SECONDS after
    their first byte get a 408 and the connection is closed (a slow drip does not
    extend it);
  * body: a request body that stops for WEB_BODY_TIMEOUT_SECONDS (no byte arrives while
    the application is ready to read) closes the connection; the view sees the client
    gone.
- Size: a request line and headers over WEB_MAX_HEADER_BYTES are answered 414 (the
  request line alone is too long) or 431 in problem+json (OpenAI's envelope under /v1/),
  instead of uvicorn's text 400; any other unparsable request is a 400 problem. The
  connection is then closed gracefully: our side is shut, and what the client still
  sends is read and dropped for up to WEB_LINGER_SECONDS, so a client that is still
  writing reads the answer instead of a TCP reset.

Settings are environment variables, read here (the gunicorn master and its workers;
Django's settings are not loaded in the master).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn_worker import UvicornWorker


def _seconds(name: str, default: float) -> float:
    value = float(os.environ.get(name, str(default)))
    if value <= 0:
        raise RuntimeError(f"{name} must be a number of seconds over 0")
    return value


@dataclass(frozen=True)
class Limits:
    keepalive_seconds: float
    header_timeout_seconds: float
    body_timeout_seconds: float
    linger_seconds: float
    max_header_bytes: int


def limits() -> Limits:
    """The web server's timeouts and header limit, from the environment."""
    max_header = int(os.environ.get("WEB_MAX_HEADER_BYTES", str(64 * 1024)))
    if max_header < 1024:
        raise RuntimeError("WEB_MAX_HEADER_BYTES must be at least 1024")
    return Limits(
        keepalive_seconds=_seconds("WEB_KEEPALIVE_SECONDS", 75),
        header_timeout_seconds=_seconds("WEB_HEADER_TIMEOUT_SECONDS", 15),
        body_timeout_seconds=_seconds("WEB_BODY_TIMEOUT_SECONDS", 30),
        linger_seconds=_seconds("WEB_LINGER_SECONDS", 5),
        max_header_bytes=max_header,
    )


def _refusal(status: int, target: bytes) -> tuple[bytes, bytes]:
    """(body, content type) of a request refused before it reached Django: problem+json,
    OpenAI's envelope when the path is under /v1/."""
    from httpedge.problems import PROBLEM_CONTENT_TYPE, problem_body  # Django is set up

    slug, title, detail = {
        400: ("malformed-request", "Malformed request", "The HTTP request could not be parsed."),
        408: (
            "request-timeout",
            "Request timeout",
            "The request line and headers did not arrive in time.",
        ),
        414: (
            "uri-too-long",
            "URI too long",
            f"The request line is over {limits().max_header_bytes} bytes.",
        ),
        431: (
            "headers-too-large",
            "Request headers too large",
            f"The request line and headers are over {limits().max_header_bytes} bytes.",
        ),
    }[status]
    path = target.split(b"?", 1)[0].decode("latin-1")[:200] if target else None
    problem = problem_body(status_code=status, slug=slug, title=title, detail=detail, instance=path)
    if path and path.startswith("/v1/"):
        from httpedge.openai_errors import envelope_from_problem

        return json.dumps(envelope_from_problem(problem, status)).encode(), b"application/json"
    return json.dumps(problem).encode(), PROBLEM_CONTENT_TYPE.encode()


def _request_target(head: bytes) -> bytes:
    """The target of a (possibly partial) request line: b'' when it is not there."""
    line = head.split(b"\n", 1)[0]
    parts = line.split(b" ")
    return parts[1] if len(parts) > 1 and parts[1].startswith(b"/") else b""


class Protocol(H11Protocol):
    """uvicorn's h11 protocol with header and body timeouts, an idle timeout from the
    connection's start, answers in problem+json for requests it cannot parse, and a
    lingering close after them (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits()
        self.timeout_keep_alive = self.limits.keepalive_seconds
        self.header_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.lingering = False

    # --- the connection's life ----------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Idle until its first byte: the keep-alive timeout (uvicorn: none at all).
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def _cancel_timers(self) -> None:
        for name in ("header_timer", "body_timer"):
            timer = getattr(self, name)
            if timer is not None:
                timer.cancel()
                setattr(self, name, None)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # dropped: the answer is sent, our side is shut
        if self.conn.their_state is h11.IDLE and self.header_timer is None:
            self.header_timer = self.loop.call_later(
                self.limits.header_timeout_seconds, self._header_timed_out
            )
        super().data_received(data)
        self._follow_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_request()

    def _follow_request(self) -> None:
        """Header timer while a request head is incomplete; body timer while its body is."""
        if self.transport.is_closing():
            self._cancel_timers()
            return
        state = self.conn.their_state
        if state is not h11.IDLE and self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        if state is h11.SEND_BODY:
            if self.body_timer is not None:
                self.body_timer.cancel()
            self.body_timer = self.loop.call_later(
                self.limits.body_timeout_seconds, self._body_timed_out
            )
        elif self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _header_timed_out(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        self.logger.warning("Request headers not complete in time: closed")
        head, _closed = self.conn.trailing_data
        self._refuse(408, _request_target(head))

    def _body_timed_out(self) -> None:
        self.body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.flow.read_paused:  # the application is not reading: not the client's fault
            self._follow_request()
            return
        self.logger.warning("Request body stalled: connection closed")
        self.transport.close()  # the application sees http.disconnect

    # --- requests that cannot be parsed ------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """h11 refused the request (uvicorn's answer is a text 400): a problem instead;
        414/431 when the head is over WEB_MAX_HEADER_BYTES."""
        head, _closed = self.conn.trailing_data
        status = 400
        if len(head) > self.limits.max_header_bytes:
            status = 414 if b"\n" not in head[: self.limits.max_header_bytes] else 431
        self._refuse(status, _request_target(head))

    def _refuse(self, status: int, target: bytes) -> None:
        self._cancel_timers()
        self._unset_keepalive_if_required()
        try:
            body, content_type = _refusal(status, target)
        except Exception:  # noqa: BLE001 - the answer must go out whatever happens
            body, content_type = b'{"status": %d}' % status, b"application/problem+json"
        reason = {400: b"Bad Request", 408: b"Request Timeout", 414: b"URI Too Long"}.get(
            status, b"Request Header Fields Too Large"
        )
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, content_type, len(body), body)
        )
        self._linger()

    def _linger(self) -> None:
        """Shut our side and read (and drop) what the client still sends, until it closes
        or WEB_LINGER_SECONDS pass: closing with unread data would reset the connection
        and the client would lose the answer."""
        self.lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(self.limits.linger_seconds, self.transport.close)
        else:
            self.transport.close()

    def eof_received(self) -> bool | None:
        if self.lingering:
            self.transport.close()
        return None


class Worker(UvicornWorker):
    """gunicorn's worker class for the service: uvicorn with `Protocol` (h11), never
    rewriting the client address from forwarded headers. The keep-alive timeout is
    WEB_KEEPALIVE_SECONDS (Protocol), not gunicorn's `keepalive`."""

    CONFIG_KWARGS = {"loop": "auto", "http": Protocol, "proxy_headers": False}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.config.h11_max_incomplete_event_size = limits().max_header_bytes

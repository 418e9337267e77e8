"""Outbound URLs the service calls on a client's or an admin's say (webhooks): one rule,
checked when the URL is saved and again when it is called, and the one way to call it.

The rule: `https` only (`http` too when the setting WEBHOOK_ALLOW_HTTP is on), and a
host whose every address (after DNS resolution) is public: no private, loopback,
link-local, multicast, reserved, shared or unspecified address, in IPv4 or IPv6
(an IPv6 address holding an IPv4 one - mapped, 6to4, Teredo - judged as that). The call follows no
redirect, honours no proxy variable, and checks the address it actually connected to
(a name that resolved to a public address at the check and to a private one at the
connection is refused).

The one opt-in exception is the operator's: `allow_hosts` (the setting
WEBHOOK_ALLOW_HOSTS, empty by default) names exact `host` or `host:port` entries whose
addresses need not be public (an internal receiver, a test's). Everything else holds
for them too (scheme, no redirect, no proxy).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings


class UnsafeURL(ValueError):
    """The URL is not one the service may call; the message says why."""


def address_public(address: str) -> bool:
    """True when `address` (an IP literal) is a public unicast address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if ip.version == 6:  # an IPv4 address inside (mapped, 6to4, Teredo) is judged as one
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            ip = embedded
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as exc:
        raise UnsafeURL(f"The host {host!r} does not resolve ({exc}).") from exc
    return sorted({info[4][0] for info in infos})


def host_allowed(host: str, port: int, allow_hosts) -> bool:
    """Whether `host` (and `port`) is on the operator's allow-list: an entry `host`
    allows every port, `host:port` that one."""
    if not allow_hosts:
        return False
    host = host.lower().strip("[]")
    return host in allow_hosts or f"{host}:{port}" in allow_hosts


def webhook_url_check(url: str, *, allow_http: bool = False, allow_hosts=()) -> list[str]:
    """The addresses `url` resolves to, all public (unless its host is in
    `allow_hosts`); UnsafeURL (with the reason) if the scheme is not https (or http
    with `allow_http`), there is no host, or any address is not public."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL(f"Not a valid URL ({exc}).") from exc
    allowed = ("https", "http") if allow_http else ("https",)
    if parts.scheme.lower() not in allowed:
        raise UnsafeURL(
            f"The URL must use {' or '.join(allowed)}"
            + ("" if allow_http else " (http needs WEBHOOK_ALLOW_HTTP)")
            + f", not {parts.scheme or 'no scheme'!r}."
        )
    host = parts.hostname
    if not host:
        raise UnsafeURL("The URL has no host.")
    port = port or (443 if parts.scheme.lower() == "https" else 80)
    addresses = _resolve(host, port)
    if not addresses:
        raise UnsafeURL(f"The host {host!r} does not resolve.")
    if host_allowed(host, port, allow_hosts):
        return addresses
    refused = [a for a in addresses if not address_public(a)]
    if refused:
        raise UnsafeURL(
            f"The host {host!r} resolves to a non-public address ({', '.join(refused)}): "
            "private, loopback, link-local, multicast and reserved destinations are refused."
        )
    return addresses


# --- The call ---------------------------------------------------------------------------


def _check_peer(conn: http.client.HTTPConnection) -> None:
    peer = conn.sock.getpeername()[0] if conn.sock is not None else ""
    if host_allowed(conn.host, conn.port, getattr(conn, "allow_hosts", ())):
        return
    if not address_public(peer):
        conn.close()
        raise UnsafeURL(f"Connected to a non-public address ({peer}): refused.")


class _PublicHTTPConnection(http.client.HTTPConnection):
    def connect(self):
        super().connect()
        _check_peer(self)


class _PublicHTTPSConnection(http.client.HTTPSConnection):
    def connect(self):
        super().connect()
        _check_peer(self)


class _PublicHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, allow_hosts=()):
        super().__init__()
        self.allow_hosts = frozenset(allow_hosts)

    def http_open(self, req):
        return self.do_open(self._connection, req)

    def _connection(self, *args, **kwargs):
        conn = _PublicHTTPConnection(*args, **kwargs)
        conn.allow_hosts = self.allow_hosts
        return conn


class _PublicHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, allow_hosts=()):
        super().__init__()
        self.allow_hosts = frozenset(allow_hosts)

    def https_open(self, req):
        return self.do_open(self._connection, req, context=self._context)

    def _connection(self, *args, **kwargs):
        conn = _PublicHTTPSConnection(*args, **kwargs)
        conn.allow_hosts = self.allow_hosts
        return conn


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx answer is the answer: an HTTPError, never a second request."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def public_opener(allow_hosts=()) -> urllib.request.OpenerDirector:
    """An opener for http(s) only: no proxy (ProxyHandler({}) ignores the environment),
    no redirects, and only public peers (or hosts in `allow_hosts`)."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler({}),
        urllib.request.UnknownHandler(),
        _PublicHTTPHandler(allow_hosts),
        _PublicHTTPSHandler(allow_hosts),
        _NoRedirect(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


# --- The service's rule, from its settings ----------------------------------------------


def configured_check(url: str) -> list[str]:
    """`webhook_url_check` under the operator's settings (WEBHOOK_ALLOW_HTTP,
    WEBHOOK_ALLOW_HOSTS): what every webhook URL is held to, at save and at call."""
    return webhook_url_check(
        url, allow_http=settings.WEBHOOK_ALLOW_HTTP, allow_hosts=settings.WEBHOOK_ALLOW_HOSTS
    )


def configured_opener() -> urllib.request.OpenerDirector:
    """`public_opener` under the operator's WEBHOOK_ALLOW_HOSTS."""
    return public_opener(settings.WEBHOOK_ALLOW_HOSTS)

"""The client's address, one rule for the API throttle (routing.api.throttling), the
admin login lockout (django-axes' AXES_CLIENT_IP_CALLABLE) and /metrics."""

from __future__ import annotations

import ipaddress

from django.conf import settings


def client_ip(request) -> str | None:
    """The client's address: REMOTE_ADDR, or, behind TRUSTED_PROXY_COUNT proxies, the
    address the outermost trusted proxy put in X-Forwarded-For (entries further left
    are the client's own word); None when there is no valid address (django-axes stores
    it in an address column). Also the address of the admin login lockout."""
    address = request.META.get("REMOTE_ADDR")
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies > 0:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [a for a in forwarded if a]
        if len(forwarded) >= proxies:
            address = forwarded[-proxies]
    try:
        return str(ipaddress.ip_address(address or ""))
    except ValueError:
        return None

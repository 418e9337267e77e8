"""API request throttling: per account (per client address without a key), and a
stricter rate for writes; the client address behind trusted proxies; the 429 in the
OpenAPI schema.

Counts are fixed windows in the default cache (one counter per account, scope and
window, `cache.add` + `cache.incr`: atomic on Redis; on the file cache of the quick start
two requests at the same instant may count once). A throttle is not quota: credits are
debited by the ledger, never here. Rates: settings.API_THROTTLE_RATES, read per request.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from routing.core import metrics

logger = logging.getLogger(__name__)

PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def parse_rate(rate: str) -> tuple[int, int]:
    """'1200/min' -> (1200, 60)."""
    count, period = rate.split("/")
    return int(count), PERIOD_SECONDS[period[0]]


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


def now() -> float:
    return time.time()


class RateThrottle(BaseThrottle):
    """At most N requests per period for each caller (an account, else an address)."""

    scope = "account"

    def applies(self, request) -> bool:
        return True

    def caller(self, request) -> tuple[str, str]:
        """(scope, who): the account for a key, the client address without one."""
        account = getattr(request.user, "account", None)
        if account is not None:
            return self.scope, f"account-{account.pk}"
        return (
            "anon" if self.scope == "account" else self.scope,
            f"ip-{client_ip(request) or 'unknown'}",
        )

    def allow_request(self, request, view) -> bool:
        if not self.applies(request):
            return True
        scope, who = self.caller(request)
        rate = settings.API_THROTTLE_RATES.get(scope)
        if not rate:
            return True
        limit, period = parse_rate(rate)
        at = now()
        window = int(at // period)
        key = f"throttle:{scope}:{who}:{period}:{window}"
        try:
            cache.add(key, 0, timeout=period + 1)
            try:
                count = cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.set(key, 1, timeout=period + 1)
                count = 1
        except (OSError, RedisError) as exc:
            # The cache is away: serve rather than refuse everyone (throttling is a
            # safeguard, not accounting).
            logger.warning("throttle cache unavailable, not throttling: %s", exc)
            return True
        self.wait_seconds = max(1, math.ceil((window + 1) * period - at))
        if count > limit:
            metrics.RATE_LIMITED.labels(scope=scope).inc()
            return False
        return True

    def wait(self) -> float | None:
        return getattr(self, "wait_seconds", None)


class RequestRateThrottle(RateThrottle):
    """Every request: API_THROTTLE_RATE per account, API_THROTTLE_ANON_RATE per address."""

    scope = "account"


class WriteRateThrottle(RateThrottle):
    """Requests that change something (POST, PUT, PATCH, DELETE): API_THROTTLE_WRITE_RATE
    per account (or address)."""

    scope = "write"

    def applies(self, request) -> bool:
        return request.method not in SAFE_METHODS


RATE_LIMITED_DESCRIPTION = (
    "too many requests from this caller (an account; without a key, an address): "
    "`rate-limited` problem, Retry-After says when to try again"
)


def document_rate_limits(result, generator, request, public):
    """drf-spectacular postprocessing hook: a 429 on every throttled operation (the
    quota 429 of quotes and jobs keeps its text, with the rate limit added)."""
    throttled = {
        (path, method.lower())
        for path, _regex, method, view in getattr(generator, "endpoints", None) or []
        if getattr(view.cls, "throttle_classes", None)
    }
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if (path, method) not in throttled or not isinstance(operation, dict):
                continue
            responses = operation.setdefault("responses", {})
            response = responses.setdefault("429", {"description": ""})
            if RATE_LIMITED_DESCRIPTION not in response["description"]:
                response["description"] = (
                    f"{response['description']}; or {RATE_LIMITED_DESCRIPTION}"
                    if response["description"]
                    else RATE_LIMITED_DESCRIPTION[0].upper() + RATE_LIMITED_DESCRIPTION[1:]
                )
            response.setdefault("headers", {})["Retry-After"] = {
                "schema": {"type": "integer", "minimum": 1},
                "description": "Seconds to wait before trying again",
            }
            # The problem body documented for the operation's other errors, if any.
            problem = next(
                (
                    r["content"]
                    for code, r in sorted(responses.items())
                    if code.startswith("4") and code != "429" and "content" in r
                ),
                None,
            )
            if problem and "content" not in response:
                response["content"] = problem
    return result

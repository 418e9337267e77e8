"""API request throttling: per account (per client address without a key, the address
of httpedge.clientip), and a stricter rate for writes; the same throttles for the DRF
views and the /v1/ views outside DRF (check_throttles); the 429 in the OpenAPI schema.

Counts are fixed windows in the shared cache (routing.core.ratelimit: one Lua script on
Redis, atomic across replicas; on the file cache of the quick start two requests at the
same instant may count once). A refused request is not counted. An account's request
rate is its own `requests_per_minute` when set (routing.quota.ratelimits), else
settings.API_THROTTLE_RATES, read per request. A throttle is not quota: credits are
debited by the ledger, never here. Every /api/v1/ and /v1/ response carries OpenAI's
x-ratelimit-* headers (RateLimitHeadersMiddleware).
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.utils.deprecation import MiddlewareMixin
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from httpedge.clientip import client_ip
from routing.accounts.auth import request_principal
from routing.core import metrics, ratelimit
from routing.core.ratelimit import Counter
from routing.quota import ratelimits

logger = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


parse_rate = ratelimits.parse_rate  # '1200/min' -> (1200, 60)


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

    def counter(self, request) -> Counter | None:
        """The limit this request counts against (None: no limit)."""
        account = getattr(request.user, "account", None)
        if account is not None and self.scope == "account":
            return ratelimits.request_counter(account)  # the account's own, else the default
        scope, who = self.caller(request)
        rate = settings.API_THROTTLE_RATES.get(scope)
        if not rate:
            return None
        limit, period = parse_rate(rate)
        return Counter(f"{scope}:{who}", limit, period)

    def allow_request(self, request, view) -> bool:
        if not self.applies(request):
            return True
        counter = self.counter(request)
        if counter is None:
            return True
        at = now()
        # Atomic across replicas (one Lua script on Redis): a refused request is not
        # counted, so the accepted ones are exactly the limit per window.
        taken = ratelimit.take([(counter, 1)], at)
        self.wait_seconds = taken.retry_after or max(1, math.ceil(counter.reset_seconds(at)))
        if self.scope == "account":
            used = taken.counts[0] if taken.counts else 0
            remember_requests(request, counter, used, at)
        if not taken.ok:
            # account, write, or anon for a request without a key
            metrics.RATE_LIMITED.labels(scope=self.caller(request)[0]).inc()
        return taken.ok

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


class _Caller:
    """What a throttle reads of a request (DRF's Request has it too), for a view outside
    DRF: the principal, the method, the environment and the Django request."""

    def __init__(self, request, principal) -> None:
        self.user = principal
        self.method = request.method
        self.META = request.META
        self._request = request


def check_throttles(request, principal) -> None:
    """The API's throttles (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES) for a view outside
    DRF (the /v1/ chat completions and responses), as DRF's APIView.check_throttles
    runs them: every one counts, and any refusal raises Throttled with the longest wait."""
    caller = _Caller(request, principal)
    waits = []
    for throttle_class in api_settings.DEFAULT_THROTTLE_CLASSES:
        throttle = throttle_class()
        if not throttle.allow_request(caller, None):
            waits.append(throttle.wait())
    if waits:
        raise Throttled(wait=max((w for w in waits if w is not None), default=None))


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


# --- OpenAI's x-ratelimit-* headers on every API response -------------------------------

RATE_LIMITED_PATHS = ("/api/v1/", "/v1/")


def reset_text(seconds: float) -> str:
    """OpenAI's duration text: '1s', '6m0s', '1h0m0s' (whole seconds, rounded up)."""
    total = max(0, math.ceil(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def remember_requests(request, counter: Counter, used: int, at: float) -> None:
    """What the request throttle counted, for the headers of the response."""
    django_request = getattr(request, "_request", request)
    django_request.ratelimit_requests = ratelimits.Standing(
        counter.limit, max(0, counter.limit - used), counter.reset_seconds(at)
    )
    django_request.ratelimit_account = getattr(request.user, "account", None)


def _caller_account(request):
    """The account of the request's key when no throttle ran (a URL that matches no view,
    a view without authentication): None without a valid key."""
    try:
        principal = request_principal(request)
    except AuthenticationFailed:
        return None
    return principal.account if principal is not None else None


def _standings(request):
    account = getattr(request, "ratelimit_account", None)
    requests = getattr(request, "ratelimit_requests", None)
    if account is None and not hasattr(request, "ratelimit_account"):
        account = _caller_account(request)
    if requests is None:  # no throttle ran (401, 404 of an unknown path, 405): a look only
        if account is not None:
            counter = ratelimits.request_counter(account)
        else:
            rate = settings.API_THROTTLE_RATES.get("anon")
            counter = None
            if rate:
                limit, period = parse_rate(rate)
                counter = Counter(f"anon:ip-{client_ip(request) or 'unknown'}", limit, period)
        if counter is not None:
            requests = ratelimits.request_standing(counter, now())
    tokens = ratelimits.token_standing(account, now()) if account is not None else None
    return requests, tokens


class RateLimitHeadersMiddleware(MiddlewareMixin):
    """x-ratelimit-limit-requests, -remaining-requests, -reset-requests (the caller's
    request rate: the account's, or the client address's without a key) and the -tokens
    ones (the account's tokens per minute) on every response under /api/v1/ and /v1/,
    as OpenAI sends them; a limit that is off sends none of its headers. (MiddlewareMixin:
    sync and async.)"""

    def process_response(self, request, response):
        if not request.path.startswith(RATE_LIMITED_PATHS):
            return response
        try:
            requests, tokens = _standings(request)
        except Exception as exc:  # noqa: BLE001 - headers must never break a response
            logger.warning("rate-limit headers left out: %s", exc)
            return response
        for kind, standing in (("requests", requests), ("tokens", tokens)):
            if standing is None:
                continue
            response[f"x-ratelimit-limit-{kind}"] = str(standing.limit)
            response[f"x-ratelimit-remaining-{kind}"] = str(standing.remaining)
            response[f"x-ratelimit-reset-{kind}"] = reset_text(standing.reset_seconds)
        return response

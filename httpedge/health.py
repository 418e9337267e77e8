"""Is the service able to work: database, broker and cache reachable; and the probes
(/livez, /readyz) that orchestrators ask."""

from __future__ import annotations

import logging
import uuid

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

logger = logging.getLogger(__name__)


def database_ok() -> tuple[bool, str]:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
        return True, "ok"
    except Exception as exc:  # any driver error means "down" here
        logger.warning("health: database check failed: %s", exc)
        return False, f"unreachable: {exc.__class__.__name__}"


def broker_ok(timeout: float = 2.0) -> tuple[bool, str]:
    from celery import current_app as app  # the project's app (deploy.celery), set current
    from django.conf import settings

    try:
        # The URL from settings (what the app was configured with), read at call time.
        with app.connection_for_write(url=settings.CELERY_BROKER_URL) as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
        return True, "ok"
    except Exception as exc:  # kombu raises many kinds; all mean "down"
        logger.warning("health: broker check failed: %s", exc)
        return False, f"unreachable: {exc.__class__.__name__}"


def health_report() -> dict[str, str]:
    db_ok, db_state = database_ok()
    mq_ok, mq_state = broker_ok()
    return {
        "status": "ok" if db_ok and mq_ok else "degraded",
        "database": db_state,
        "broker": mq_state,
    }


def cache_ok() -> tuple[bool, str]:
    """The shared cache (Redis in production) stores and returns a value."""
    from django.core.cache import cache

    token = uuid.uuid4().hex
    try:
        cache.set("health:probe", token, timeout=30)
        if cache.get("health:probe") == token:
            return True, "ok"
        return False, "unreachable: value not stored"
    except Exception as exc:  # any backend error means "down" here
        logger.warning("health: cache check failed: %s", exc)
        return False, f"unreachable: {exc.__class__.__name__}"


def readiness_report() -> dict[str, str]:
    """What /readyz answers: the database, the broker and the shared cache."""
    report = health_report()
    cache_state = cache_ok()[1]
    report["cache"] = cache_state
    if cache_state != "ok":
        report["status"] = "degraded"
    return report


# --- Probes for orchestrators (Kubernetes, compose, the image's HEALTHCHECK) ----------
# /livez: the process serves requests (no dependency is consulted: a database outage must
# not get every web replica restarted). /readyz: it can do its work (database, broker and
# cache reachable; 503 otherwise, so it is taken out of the load balancer). Answered by
# the first middleware, before the host check (a kubelet probes the pod's IP, which is
# not in ALLOWED_HOSTS), the HTTPS redirect (probes speak plain HTTP inside the pod),
# sessions and rate limits. GET and HEAD only; anything else goes on to a 404.
PROBE_PATHS = ("/livez", "/readyz")


def _probe_response(report: dict[str, str] | None) -> HttpResponse:
    if report is None:
        return JsonResponse({"status": "ok"})
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)


def _is_probe(request) -> bool:
    return request.path in PROBE_PATHS and request.method in ("GET", "HEAD")


@sync_and_async_middleware
def probes(get_response):
    if iscoroutinefunction(get_response):

        async def amiddleware(request):
            if not _is_probe(request):
                return await get_response(request)
            if request.path == "/livez":
                return _probe_response(None)
            return _probe_response(await sync_to_async(readiness_report)())

        return amiddleware

    def middleware(request):
        if not _is_probe(request):
            return get_response(request)
        report = None if request.path == "/livez" else readiness_report()
        return _probe_response(report)

    return middleware

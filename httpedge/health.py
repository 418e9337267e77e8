"""Is the service able to work: database and broker reachable."""

from __future__ import annotations

import logging

from django.db import connection

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

"""Send a Celery task by its registered name (routing.core.tasknames); the senders of
each domain (routing.batches.send, routing.jobs.submit/worker, routing.retirement.notices)
wrap it, and a service sends after its commit with transaction.on_commit(lambda: ...).

Services never import `routing.tasks`: they name the task here, so the dependency runs
one way (tasks -> services). A broker that is away loses nothing: the database row is
the source of truth and a beat sweep sends the step again, so a failed send is logged
and swallowed.
"""

from __future__ import annotations

import logging

from celery import current_app

logger = logging.getLogger(__name__)


def send_now(task_name: str, *args, countdown: float = 0.0, retry: bool | None = None) -> bool:
    """Send `task_name(*args)` now; False (and a warning) when the broker is away.
    `retry` None keeps the app's publish-retry setting."""
    options = {"countdown": max(0.0, countdown)}
    if retry is not None:
        options["retry"] = retry
    # The registered task (not send_task), so CELERY_TASK_ALWAYS_EAGER still applies; an
    # unknown name is a programming error and raises here (routing.apps registers them).
    task = current_app.tasks[task_name]
    try:
        task.apply_async(args=list(args), **options)
        return True
    except Exception as exc:  # kombu/redis raise many kinds when the broker is away
        logger.warning("%s%s not sent (%s); a sweep will send it", task_name, list(args), exc)
        return False

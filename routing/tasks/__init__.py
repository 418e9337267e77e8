"""Celery tasks: thin callers of the services, one module per kind of work. Each takes
ids and is idempotent; the database row is the truth and results are ignored. Services
never import this package: they send tasks by name (routing.core.dispatch)."""

from routing.tasks.batches import (
    advance_batch,
    finalize_batch,
    start_scheduled_batch,
    sweep_batches,
    validate_batch,
)
from routing.tasks.context import stamp_request_id  # noqa: F401 (connects the signals)
from routing.tasks.housekeeping import (
    announce_notices,
    apply_retirements,
    deliver_notice,
    reset_quota_periods,
)
from routing.tasks.jobs import finish_job, run_job, sweep_jobs
from routing.tasks.metrics import stamp_published_at  # noqa: F401 (connects the signals)
from routing.tasks.webhooks import deliver_webhook, sweep_webhooks

__all__ = [
    "advance_batch",
    "announce_notices",
    "apply_retirements",
    "deliver_notice",
    "deliver_webhook",
    "finalize_batch",
    "finish_job",
    "reset_quota_periods",
    "run_job",
    "start_scheduled_batch",
    "sweep_batches",
    "sweep_jobs",
    "sweep_webhooks",
    "validate_batch",
]

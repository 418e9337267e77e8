"""The Celery app. Workers: `celery -A deploy worker`; beat: `celery -A deploy beat`."""

import os

from celery import Celery
from celery.signals import setup_logging, worker_process_init
from kombu.transport import TRANSPORT_ALIASES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
# filesystem:// (the quick start's embedded broker) is kombu's filesystem transport made
# safe for several processes: whole messages only, one reader per message.
TRANSPORT_ALIASES["filesystem"] = "deploy.fsbroker:Transport"

app = Celery("deploy")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def keep_django_logging(**_kwargs) -> None:
    """Workers and beat log through the project's LOGGING (deploy/settings.py, applied by
    django.setup()) rather than Celery's own root handler: the same format as the web
    process, with the request id (and task id and name) on every line. The level is
    LOG_LEVEL, not `--loglevel`."""


@app.task(name="deploy.noop", ignore_result=True)
def noop() -> None:
    """Does nothing: the broker's own task throughput, the jobs benchmark's baseline."""


@worker_process_init.connect
def start_tracing(**_kwargs) -> None:
    """Each worker process (after the fork: the span exporter's thread does not survive
    one) traces its tasks when OTEL_EXPORTER_OTLP_ENDPOINT is set (deploy/tracing.py)."""
    from deploy import tracing

    tracing.setup("worker")

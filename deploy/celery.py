"""The Celery app. Workers: `celery -A deploy worker`; beat: `celery -A deploy beat`."""

import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
# filesystem:// (the quick start's embedded broker) is kombu's filesystem transport made
# safe for several processes: whole messages only, one reader per message.
TRANSPORT_ALIASES["filesystem"] = "deploy.fsbroker:Transport"

app = Celery("deploy")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="deploy.noop", ignore_result=True)
def noop() -> None:
    """Does nothing: the broker's own task throughput, the jobs benchmark's baseline."""

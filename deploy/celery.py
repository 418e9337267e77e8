"""The Celery app. Workers: `celery -A deploy worker`; beat: `celery -A deploy beat`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")

app = Celery("deploy")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="deploy.noop", ignore_result=True)
def noop() -> None:
    """Does nothing: the broker's own task throughput, the jobs benchmark's baseline."""

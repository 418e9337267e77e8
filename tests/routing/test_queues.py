"""Queues by kind of work (issue 17): job steps, batch links and housekeeping each on a
queue of their own, so a worker can be given to each; one worker can take them all."""

from __future__ import annotations

import pytest
from django.conf import settings

from deploy.celery import app
from tests import realparts

KINDS = {
    "interactive": {"routing.run_job", "routing.finish_job"},
    "batch": {
        "routing.validate_batch",
        "routing.advance_batch",
        "routing.finalize_batch",
        "routing.start_scheduled_batch",
    },
    "housekeeping": {
        "routing.sweep_jobs",
        "routing.sweep_batches",
        "routing.reset_quota_periods",
        "routing.apply_retirements",
        "routing.announce_notices",
        "routing.deliver_notice",
        "routing.deliver_webhook",
        "routing.sweep_webhooks",
        "routing.expire_files",
        "routing.reconcile_occupancy",
    },
}


def queue_of(task_name: str) -> str:
    return app.amqp.router.route({}, task_name)["queue"].name


@pytest.mark.parametrize(
    ("task_name", "queue"), [(t, q) for q, names in KINDS.items() for t in sorted(names)]
)
def test_each_task_goes_to_the_queue_of_its_kind(task_name, queue):
    assert queue_of(task_name) == queue


def test_every_task_of_the_service_has_a_kind():
    registered = {name for name in app.tasks if name.startswith("routing.")}
    assert registered == set().union(*KINDS.values())
    assert set(settings.CELERY_TASK_ROUTES) >= registered


def test_beat_sends_housekeeping_to_its_queue():
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert queue_of(entry["task"]) == "housekeeping"


def test_one_worker_for_all_queues_consumes_every_queue():
    queues = set(settings.CELERY_QUEUES_ALL.split(","))
    assert queues == set(KINDS) == set(realparts.ALL_QUEUES.split(","))
    assert settings.CELERY_TASK_DEFAULT_QUEUE in queues  # a task without a route runs too
    # make run's one worker (deploy/run.sh) consumes them all
    run_sh = (realparts.ROOT / "deploy" / "run.sh").read_text()
    assert f"WORKER_QUEUES:-{settings.CELERY_QUEUES_ALL}" in run_sh

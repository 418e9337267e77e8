"""Job steps: run (claim, simulate, book a slot), finish (settle), and beat's sweep."""

from __future__ import annotations

from celery import shared_task

from routing.core import tasknames
from routing.jobs.sweep import jobs_sweep
from routing.jobs.worker import job_finish_when_due, job_run
from routing.tasks.base import RETRY, reset_connections


@shared_task(name=tasknames.RUN_JOB, ignore_result=True, **RETRY)
def run_job(job_id: str) -> None:
    reset_connections()
    job_run(job_id)


@shared_task(name=tasknames.FINISH_JOB, ignore_result=True, **RETRY)
def finish_job(job_id: str) -> None:
    reset_connections()
    job_finish_when_due(job_id)


@shared_task(name=tasknames.SWEEP_JOBS, ignore_result=True, **RETRY)
def sweep_jobs() -> dict:
    reset_connections()
    return jobs_sweep()

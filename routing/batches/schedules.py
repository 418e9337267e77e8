"""Recurring batches: a BatchSchedule kept in step with its django-celery-beat periodic
task, and the batch of each firing (once per firing, whatever beat redelivers)."""

from __future__ import annotations

import datetime as dt
import json

from django.db import IntegrityError, transaction
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from routing.batches.create import batch_create
from routing.core import tasknames
from routing.models import Batch, BatchSchedule

SCHEDULE_TASK = tasknames.START_SCHEDULED_BATCH


def schedule_sync(schedule: BatchSchedule) -> None:
    """Keep the schedule's django-celery-beat periodic task in step with it (name,
    crontab, enabled); ops may also edit the periodic task itself in the admin."""
    name = f"batch schedule {schedule.pk}: {schedule.name}"[:200]
    kwargs = json.dumps({"schedule_id": schedule.pk})
    task = schedule.periodic_task
    if task is None:
        task = PeriodicTask(task=SCHEDULE_TASK)
    task.name, task.crontab, task.kwargs, task.enabled = (
        name,
        schedule.crontab,
        kwargs,
        schedule.enabled,
    )
    task.interval = task.clocked = task.solar = None
    task.description = f"Starts a batch of {schedule.input_file.filename} for {schedule.account}, window {schedule.completion_window}."
    task.save()
    if schedule.periodic_task_id != task.pk:
        BatchSchedule.objects.filter(pk=schedule.pk).update(periodic_task=task)
        schedule.periodic_task = task


def schedule_delete(*, schedule: BatchSchedule) -> None:
    """Delete a schedule and its periodic task (beat's change signal fires for it), so
    beat starts no more batches of it; its batches stay (their `schedule` is cleared)."""
    with transaction.atomic():
        task = schedule.periodic_task
        schedule.delete()
        if task is not None:
            task.delete()


def last_firing(schedule: BatchSchedule, at: dt.datetime, lookback=dt.timedelta(days=31)):
    """The schedule's crontab time at or before `at` (to the minute): the key of one
    firing, so a message redelivered minutes later still finds its batch."""
    cron = schedule.crontab.schedule  # celery crontab, in the crontab's time zone
    local = at.astimezone(cron.tz).replace(second=0, microsecond=0)
    stop = local - lookback
    while local > stop:
        if (
            local.minute in cron.minute
            and local.hour in cron.hour
            and local.day in cron.day_of_month
            and local.month in cron.month_of_year
            and local.isoweekday() % 7 in cron.day_of_week
        ):
            return local.astimezone(dt.UTC)
        local -= dt.timedelta(minutes=1)
    return at.replace(second=0, microsecond=0)


def batch_from_schedule(schedule_id: int, *, at: dt.datetime | None = None) -> Batch | None:
    """The batch of one firing of a schedule (beat's periodic task). Once per firing:
    a repeated message for the same minute finds the batch already made."""
    at = at or timezone.now()
    schedule = (
        BatchSchedule.objects.select_related("account", "crontab")
        .filter(pk=schedule_id, enabled=True)
        .first()
    )
    if schedule is None:
        return None
    firing = last_firing(schedule, at)
    existing = Batch.objects.filter(schedule=schedule, scheduled_for=firing).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return batch_create(
                account=schedule.account,
                input_file_id=schedule.input_file_id,
                completion_window=schedule.completion_window,
                metadata={**schedule.metadata, "schedule": schedule.name},
                schedule=schedule,
                scheduled_for=firing,
                at=at,
            )
    except IntegrityError:
        return Batch.objects.filter(schedule=schedule, scheduled_for=firing).first()

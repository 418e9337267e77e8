"""Sending a batch's next step to the workers, by task name (routing.core.dispatch):
the batch services never import routing.tasks. A broker that is away loses nothing:
the batch row is the truth and beat's sweep (routing.batches.sweep) takes the step
later."""

from __future__ import annotations

from django.conf import settings

from routing.core import tasknames
from routing.core.dispatch import send_now


def send_validate(batch_id) -> None:
    send_now(tasknames.VALIDATE_BATCH, str(batch_id), retry=True)


def send_advance(batch_id, delay: float = 0.0) -> None:
    # No broker holds a countdown message for hours (deploy/settings.py): a far next
    # link is a nearer look, which schedules the next one.
    delay = min(delay, settings.BROKER_MAX_COUNTDOWN_SECONDS)
    send_now(tasknames.ADVANCE_BATCH, str(batch_id), countdown=delay, retry=True)


def send_finalize(batch_id) -> None:
    send_now(tasknames.FINALIZE_BATCH, str(batch_id), retry=True)

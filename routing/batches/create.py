"""Creating a batch (its arguments checked, the validation task sent after commit), and
the rules a recurring schedule must satisfy for its batches to be accepted."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from routing.batches.errors import BatchError
from routing.batches.params import check_endpoint, check_metadata, parse_start, parse_window
from routing.batches.send import send_validate
from routing.core.clock import wall
from routing.core.formats import cut
from routing.models import Account, Batch, BatchSchedule, File


def batch_create(
    *,
    account: Account,
    input_file_id: str,
    endpoint: str = "/v1/jobs",
    completion_window: str | None = "24h",
    start_at=None,
    metadata: dict | None = None,
    schedule: BatchSchedule | None = None,
    scheduled_for: dt.datetime | None = None,
    retry_of: Batch | None = None,
    at: dt.datetime | None = None,
    api_key_id: int | None = None,
) -> Batch:
    """Write a batch in `validating`; the validation task runs after commit. Raises
    BatchError for a bad argument (the file is someone else's or not a batch input, an
    unknown endpoint, a bad window or start).

    The file is checked again in the transaction under its row lock (the lock
    `file_delete` takes): a delete that wins the race leaves no file to find (the create
    is a `file-not-found`), a create that wins leaves a batch the delete sees
    (`file-in-use`). Never a foreign-key violation at commit."""
    at = at or timezone.now()
    f = File.objects.filter(pk=input_file_id, account=account).first()
    if f is None:
        raise BatchError(
            f"No file {cut(input_file_id)}.", param="input_file_id", code="file-not-found"
        )
    if f.purpose != File.Purpose.BATCH:
        raise BatchError(
            f"File {f.id} has purpose {f.purpose!r}; a batch needs a file uploaded with purpose 'batch'.",
            param="input_file_id",
        )
    check_endpoint(endpoint)
    window_text, window = parse_window(completion_window)
    start = parse_start(start_at, at)
    check_metadata(metadata)
    with transaction.atomic():
        if not list(File.objects.select_for_update().filter(pk=f.pk).values_list("pk")):
            raise BatchError(
                f"No file {cut(input_file_id)}.", param="input_file_id", code="file-not-found"
            )
        batch = Batch.objects.create(
            account=account,
            input_file=f,
            endpoint=endpoint,
            completion_window=window_text,
            window_seconds=window,
            metadata=metadata or {},
            api_key_id=api_key_id,
            schedule=schedule,
            scheduled_for=scheduled_for,
            retry_of=retry_of,
            start_at=start,
            expires_at=start + wall(window),
            total=f.lines,
        )
        transaction.on_commit(lambda: send_validate(batch.pk))
    return batch


def schedule_check(*, account: Account, input_file: File, completion_window: str, metadata) -> None:
    """What a recurring schedule must satisfy for its nightly batches to be accepted (the
    admin's form calls it): the account's own batch input, a valid window, metadata
    with room for the `schedule` key every run adds."""
    if input_file.account_id != account.pk:
        raise BatchError("The input file belongs to another account.", param="input_file")
    if input_file.purpose != File.Purpose.BATCH:
        raise BatchError(
            "The input file must be a batch input (purpose 'batch').", param="input_file"
        )
    parse_window(completion_window)
    check_metadata(metadata or {}, max_keys=15)

"""Files: batch inputs uploaded by clients, and the output/error files of batches.

Stored in Django's default storage (MEDIA_ROOT on one machine; any shared storage
backend in a deployment with several hosts). The limits are the ones people know from
the OpenAI Batch API: 200 MB and 50,000 requests a file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import tempfile
from collections.abc import Iterable, Iterator

from django.conf import settings
from django.core.files import File as DjangoFile
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from routing.core.formats import echo, iso
from routing.models import Account, Batch, File

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_BATCH_REQUESTS = 50_000
_CHUNK = 1 << 20


class FileRejected(Exception):
    """The upload is refused; `code` is the problem slug (the API maps it to a status)."""

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid-file"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def _chunks(stream) -> Iterator[bytes]:
    if hasattr(stream, "chunks"):
        yield from stream.chunks(_CHUNK)
        return
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return
        yield chunk


def _measure(stream, *, max_bytes: int, max_lines: int | None) -> tuple[int, int, str]:
    """Bytes, non-empty lines and SHA-256 of a stream, refusing it past the limits."""
    digest = hashlib.sha256()
    size = lines = 0
    pending_content = False  # the current line has a non-space byte
    for chunk in _chunks(stream):
        size += len(chunk)
        if size > max_bytes:
            raise FileRejected(
                f"The file is over {max_bytes // (1024 * 1024)} MB.",
                code="file-too-large",
            )
        digest.update(chunk)
        parts = chunk.split(b"\n")
        for i, part in enumerate(parts):
            if part.strip():
                pending_content = True
            if i < len(parts) - 1:  # a newline ends the line
                lines += pending_content
                pending_content = False
        if max_lines is not None and lines > max_lines:
            raise FileRejected(
                f"The file has more than {max_lines} requests.",
                code="too-many-requests",
            )
    lines += pending_content
    if max_lines is not None and lines > max_lines:
        raise FileRejected(
            f"The file has {lines} requests; at most {max_lines}.",
            code="too-many-requests",
        )
    return size, lines, digest.hexdigest()


def file_create(
    *,
    account: Account,
    purpose: str,
    upload,
    filename: str | None = None,
    api_key_id: int | None = None,
) -> File:
    """Store an uploaded file (a Django UploadedFile or any binary stream). A batch input
    is refused at once when it is over 200 MB or 50,000 non-empty lines, or empty; its
    lines are checked when a batch is created from it."""
    if purpose != File.Purpose.BATCH:
        raise FileRejected(
            f"Unknown purpose {echo(purpose)}; clients upload files with purpose 'batch'.",
            code="invalid-purpose",
        )
    name = (filename or getattr(upload, "name", None) or "input.jsonl")[:255]
    size, lines, sha = _measure(upload, max_bytes=MAX_FILE_BYTES, max_lines=MAX_BATCH_REQUESTS)
    if lines == 0:
        raise FileRejected("The file has no requests (one JSON object a line).", code="empty-file")
    _check_room(account, size)  # early, before the content is written
    upload.seek(0)
    return _store(
        account, purpose, name, upload, size, lines, sha, capped=True, api_key_id=api_key_id
    )


def files_bytes(account: Account) -> int:
    """The bytes the account's files take (inputs and batch outputs; an expired file
    whose content is deleted takes none)."""
    qs = File.objects.filter(account=account).exclude(content="")
    return qs.aggregate(n=Sum("bytes"))["n"] or 0


def _check_room(account: Account, size: int) -> None:
    cap = settings.FILES_MAX_BYTES_PER_ACCOUNT
    if cap and files_bytes(account) + size > cap:
        raise FileRejected(
            f"The account's files would take over {cap} bytes "
            f"(FILES_MAX_BYTES_PER_ACCOUNT); delete files it no longer needs.",
            code="storage-full",
        )


EXPIRING_PURPOSES = (File.Purpose.BATCH_OUTPUT, File.Purpose.BATCH_ERROR)


def output_expires_at(at=None):
    """When a batch output or error file written now expires (None: never)."""
    days = settings.BATCH_OUTPUT_EXPIRES_DAYS
    return (at or timezone.now()) + dt.timedelta(days=days) if days > 0 else None


def file_write(*, account: Account, purpose: str, filename: str, lines: Iterable[bytes]) -> File:
    """Write a file the service produces (a batch's output or errors, which expire after
    BATCH_OUTPUT_EXPIRES_DAYS; a retry's input, which does not), line by line."""
    with tempfile.TemporaryFile() as tmp:
        digest = hashlib.sha256()
        size = count = 0
        for line in lines:
            data = line if line.endswith(b"\n") else line + b"\n"
            tmp.write(data)
            digest.update(data)
            size += len(data)
            count += 1
        tmp.seek(0)
        expires_at = output_expires_at() if purpose in EXPIRING_PURPOSES else None
        return _store(
            account, purpose, filename, tmp, size, count, digest.hexdigest(), expires_at=expires_at
        )


def _store(
    account,
    purpose,
    name,
    stream,
    size,
    lines,
    sha,
    *,
    capped: bool = False,
    expires_at=None,
    api_key_id=None,
) -> File:
    """With `capped` (a client's upload), the account's storage cap is checked again
    under a lock on the account, so concurrent uploads cannot pass it together."""
    f = File(
        account=account,
        api_key_id=api_key_id,
        purpose=purpose,
        filename=name,
        bytes=size,
        lines=lines,
        sha256=sha,
        expires_at=expires_at,
    )
    # The content is written before the row; a rollback leaves an orphan file on disk
    # (harmless: its name is the unique id), never a row without content.
    f.content.save(f"{f.id}.jsonl", DjangoFile(stream), save=False)
    try:
        with transaction.atomic():
            if capped:
                Account.objects.select_for_update().filter(pk=account.pk).first()
                _check_room(account, size)
            f.save(force_insert=True)
    except FileRejected:
        _remove_content(f.content.storage, f.content.name)
        raise
    return f


def file_delete(f: File) -> None:
    """Delete one of the account's files, row and stored content. Refused
    (FileRejected, code `file-in-use`) while it is the input of a batch that has not
    ended or of a schedule; a batch's output or error file may go (the batch then shows no file), and so may the
    input of batches that have all ended (their `input_file_id` becomes null, as OpenAI
    allows; issue 26). The content is removed once the row's deletion is committed (a
    rollback keeps both)."""
    with transaction.atomic():
        row = File.objects.select_for_update().filter(pk=f.pk).first()
        if row is None:
            return  # deleted meanwhile: the same end
        running = row.batches.exclude(status__in=Batch.TERMINAL).values_list("pk", flat=True)
        if busy := running.first():
            raise FileRejected(
                f"The file is the input of batch {busy}, which has not ended; "
                "cancel the batch or wait for it to end.",
                code="file-in-use",
            )
        if schedule := row.schedules.values_list("name", flat=True).first():
            raise FileRejected(
                f"The file is the input of the schedule {schedule!r}.", code="file-in-use"
            )
        name, storage = row.content.name, row.content.storage
        row.delete()
        transaction.on_commit(lambda: _remove_content(storage, name))


def files_expire_due(at: dt.datetime | None = None, *, limit: int = 1000) -> int:
    """Delete the content of files past their `expires_at` (batch outputs and errors);
    the row stays, so the file and its batch still show it, and GET of its content is
    a 410 `file-expired`. Each file in a transaction of its own, under its row lock; the
    content goes once that commits. Idempotent: a file whose content is gone is not
    taken again. At most `limit` files a run (beat runs it every hour); the count."""
    at = at or timezone.now()
    due = File.objects.filter(expires_at__lte=at).exclude(content="")
    done = 0
    for pk in list(due.values_list("pk", flat=True)[:limit]):
        with transaction.atomic():
            row = due.select_for_update().filter(pk=pk).first()
            if row is None:
                continue  # deleted or expired meanwhile
            name, storage = row.content.name, row.content.storage
            row.content = ""
            row.save(update_fields=["content"])
            transaction.on_commit(lambda s=storage, n=name: _remove_content(s, n))
            done += 1
    if done:
        logger.info("expired the content of %d file(s)", done)
    return done


def _remove_content(storage, name: str) -> None:
    if not name:
        return  # an expired file: its content is already gone
    try:
        storage.delete(name)
    except OSError:  # the row is gone; an orphan on disk is harmless (a unique name)
        logger.warning("could not remove the content of a deleted file: %s", name, exc_info=True)


def file_lines(f: File) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, raw bytes without the newline) of a stored file."""
    with f.content.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            yield number, raw.rstrip(b"\r\n")


def file_json(f: File) -> dict:
    return {
        "id": f.id,
        "object": "file",
        "purpose": f.purpose,
        "filename": f.filename,
        "bytes": f.bytes,
        "lines": f.lines,
        "sha256": f.sha256,
        "created_at": iso(f.created_at),
        "expires_at": iso(f.expires_at) if f.expires_at else None,
    }

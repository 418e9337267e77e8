"""The native objects in OpenAI's shapes: the same dicts the native API answers with
(routing.batches.files.file_json, routing.api.shapes.batch_json), with OpenAI's Unix
timestamps and the members the SDK's models expect. Our extra members stay."""

from __future__ import annotations

from routing.api.shapes import batch_json
from routing.batches.files import file_json
from routing.core.openai_shapes import unix
from routing.models import Batch, File

# Every time a batch carries (OpenAI's, plus our start, validation and predicted finish).
BATCH_TIMES = (
    "created_at",
    "start_at",
    "validated_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
    "predicted_finish_at",
)


def file_object(f: File) -> dict:
    """An OpenAI File: `created_at` in Unix seconds; a stored file is `processed`."""
    return {
        **file_json(f),
        "created_at": unix(f.created_at),
        "status": "processed",
        "status_details": None,
        "expires_at": None,  # files are kept until deleted
    }


def file_deleted(file_id: str) -> dict:
    return {"id": file_id, "object": "file", "deleted": True}


def batch_object(b: Batch) -> dict:
    """An OpenAI Batch: Unix timestamps, `request_counts`, `errors` as a list object;
    our plan, predicted cost and finish, and cost as extra members."""
    body = {**batch_json(b), **{name: unix(getattr(b, name)) for name in BATCH_TIMES}}
    # OpenAI's status (a batch waiting for its start is `validating`, as OpenAI has no
    # other word for it); `scheduled_start_at` says when it starts.
    body["status"] = b.status
    body["scheduled_start_at"] = unix(b.start_at) if body["scheduled_start_at"] else None
    return body

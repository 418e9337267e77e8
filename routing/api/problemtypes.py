"""Routing's problem types (their pages at /problems/<slug>: httpedge.problemtypes),
beside the one map that raises them (routing/api/errors.py) and the batch and file
refusals' codes; registered in RoutingConfig.ready."""

from __future__ import annotations

from httpedge.problemtypes import ProblemType as P

PROBLEM_TYPES: dict[str, P] = {
    # --- models and routing ---------------------------------------------------------
    "model-retired": P(
        "Model retired",
        410,
        "The model no longer serves new work; `successor` and `successor_tier` name its "
        "replacement.",
        "Send the request to the successor (or opt the account in to automatic migration).",
    ),
    "model-not-serving": P(
        "Model not serving",
        422,
        "The model exists but no tier is deployed for it (not released yet, or no pool).",
        "Use another model; GET /api/v1/models/{slug}/ shows its tiers.",
    ),
    "deadline-infeasible": P(
        "Deadline cannot be met",
        422,
        "No tier of the model is predicted to finish within `deadline_seconds`; `fastest` "
        "names the fastest option and its predicted time.",
        "Allow at least the fastest option's time, shrink the task, or pick a faster model.",
    ),
    "max-cost-exceeded": P(
        "Over max_cost",
        422,
        "Every tier that meets the deadline costs more than `max_cost`.",
        "Raise `max_cost`, allow a longer deadline (slower tiers are cheaper), or shrink the task.",
    ),
    "context-window-exceeded": P(
        "Over the context window",
        422,
        "The task's tokens do not fit the model's context window.",
        "Shorten the input or the output, or use a model with a larger window.",
    ),
    "no-model-for-task": P(
        "No model for the task",
        422,
        "With `model: auto`, no serving model meets the deadline for this task class.",
        "Allow a longer deadline or name a model.",
    ),
    "quota-exhausted": P(
        "Quota exhausted",
        429,
        "No quota package of the account can pay for the work; `next_reset` says when "
        "credits come back.",
        "Wait for the reset (`Retry-After`), choose a cheaper tier or a longer deadline, or "
        "ask an admin for more credits.",
    ),
    # --- jobs -----------------------------------------------------------------------
    "job-not-found": P(
        "Unknown job",
        404,
        "The account has no job with this id.",
        "List the account's jobs with GET /api/v1/jobs.",
    ),
    "job-not-cancellable": P(
        "Job cannot be cancelled",
        409,
        "The job has already finished (succeeded, failed or cancelled).",
        "Nothing to do: a finished job is settled.",
    ),
    "idempotency-conflict": P(
        "Duplicate request in progress",
        409,
        "Another request with the same Idempotency-Key is being processed.",
        "Wait a moment and send again with the same key: you get that request's job.",
    ),
    "idempotency-key-reused": P(
        "Idempotency-Key reused",
        422,
        "The Idempotency-Key was used before with a different body.",
        "Use a new key for a new request; reuse a key only to retry the same request.",
    ),
    "cannot-run": P(
        "The simulated engine cannot run this request",
        422,
        "The engine cannot place or run this task on the chosen hardware.",
        "Shrink the task or pick another model or tier.",
    ),
    # --- files ----------------------------------------------------------------------
    "file-not-found": P(
        "Unknown file",
        404,
        "The account has no file with this id.",
        "List the account's files with GET /api/v1/files.",
    ),
    "invalid-file": P(
        "Invalid file",
        400,
        "The upload is missing or is not a JSONL file of requests.",
        "Send the file as multipart field `file` with `purpose=batch`.",
    ),
    "invalid-purpose": P(
        "Invalid purpose",
        400,
        "The file's `purpose` is not one the API accepts.",
        "Send `purpose=batch`.",
    ),
    "empty-file": P(
        "Empty file",
        400,
        "The file has no requests.",
        "Put one JSON object a line in the file.",
    ),
    "file-too-large": P(
        "File too large",
        413,
        "The file is over the size limit for one upload.",
        "Split the requests over several files and batches.",
    ),
    "too-many-requests": P(
        "Too many requests in the file",
        413,
        "The file holds more requests than one batch accepts.",
        "Split the requests over several files and batches.",
    ),
    "storage-full": P(
        "Storage full",
        413,
        "The account's files would take more than its storage allowance.",
        "Delete files you no longer need (DELETE /api/v1/files/{id}) and upload again.",
    ),
    "file-in-use": P(
        "File in use",
        409,
        "The file is the input of a batch that has not ended, or of a schedule.",
        "Wait for the batch to end (or cancel it), or delete the schedule, then delete the file.",
    ),
    "file-expired": P(
        "File expired",
        410,
        "The file's retention has passed; its content is gone.",
        "Upload it again.",
    ),
    "file-gone": P(
        "File content gone",
        410,
        "The file's record exists but its content is no longer stored.",
        "Upload it again.",
    ),
    # --- batches --------------------------------------------------------------------
    "batch-not-found": P(
        "Unknown batch",
        404,
        "The account has no batch with this id.",
        "List the account's batches with GET /api/v1/batches.",
    ),
    "invalid-batch": P(
        "Invalid batch request",
        400,
        "A batch argument (window, start, endpoint, metadata, input file) is not accepted; "
        "`parameter` names it.",
        "Fix the named argument: `completion_window` from 1m to 7d, `start_at` `now` or "
        "an ISO time at most 31 days ahead.",
    ),
    "batch-not-cancellable": P(
        "Batch cannot be cancelled",
        409,
        "The batch has already ended (completed, failed or expired).",
        "Nothing to cancel; its output and error files are final.",
    ),
    "batch-not-ended": P(
        "Batch not ended",
        409,
        "The batch is still running, so its failed requests cannot be retried yet.",
        "Wait until it ends (or cancel it), then retry.",
    ),
    "nothing-to-retry": P(
        "Nothing to retry",
        409,
        "Every request of the batch completed.",
        "Nothing to do.",
    ),
    # --- webhooks ------------------------------------------------------------------
    "webhook-not-found": P(
        "Unknown webhook endpoint",
        404,
        "No webhook endpoint of this account has that id.",
        "List the account's endpoints with GET /api/v1/webhooks.",
    ),
    "unsafe-url": P(
        "URL not allowed",
        400,
        "The service does not call this URL: it is not https (or http where the operator "
        "allows it), does not resolve, or resolves to a private, loopback, link-local, "
        "multicast or reserved address.",
        "Use an https URL on a public address.",
    ),
    "unknown-event-type": P(
        "Unknown event type",
        400,
        "An event type named is not one the service sends.",
        "Use the types listed in the README's Webhooks section.",
    ),
    "too-many-endpoints": P(
        "Too many endpoints",
        409,
        "The account has as many webhook endpoints as it may have (20).",
        "Delete one, or subscribe one endpoint to more event types.",
    ),
}

"""What each problem `type` URI ({PUBLIC_BASE_URL}/problems/<slug>, deploy.problems)
resolves to: one registry of slugs with a title, what happened and what to do, served as
a short HTML page for people and as JSON for clients that ask for it (Accept). An
unknown slug is a 404. tests/test_problem_types.py checks that every slug the
code raises has an entry here."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpResponse, JsonResponse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_safe

from deploy.problems import problem_response, problem_type_uri


@dataclass(frozen=True)
class ProblemType:
    title: str
    status: int  # the usual HTTP status of this problem
    meaning: str  # what happened
    action: str  # what the client can do about it


P = ProblemType
PROBLEM_TYPES: dict[str, ProblemType] = {
    # --- requests in general --------------------------------------------------------
    "malformed-request": P(
        "Malformed request",
        400,
        "The request body could not be parsed (not JSON, bad multipart, too deeply nested, "
        "a number that is not finite, a NUL character).",
        "Send a valid JSON object with Content-Type: application/json.",
    ),
    "key-read-only": P(
        "Not allowed for this key",
        403,
        "The API key is read-only: it may only read (GET).",
        "Use a key that may write, or ask an admin key's holder to make one (POST /api/v1/keys).",
    ),
    "key-model-not-allowed": P(
        "Not allowed for this key",
        403,
        "The API key may only use the models it lists (`models`), and this is not one of them.",
        "Use one of the key's models, or a key allowed this one.",
    ),
    "key-tier-not-allowed": P(
        "Not allowed for this key",
        403,
        "The API key may only use the tiers it lists (`tiers`).",
        "Ask for one of the key's tiers, or let the router choose.",
    ),
    "key-batches-not-allowed": P(
        "Not allowed for this key",
        403,
        "The API key may not create batches (`batches: false`).",
        "Use a key that may create batches.",
    ),
    "key-not-admin": P(
        "Not allowed for this key",
        403,
        "Managing keys (create, rotate, revoke, list) takes a key with the admin role.",
        "Use an admin key of the account.",
    ),
    "key-spend-limit": P(
        "Not allowed for this key",
        403,
        "The request would take the API key past its spending cap for the period "
        "(`spend_limit` per `spend_period`).",
        "Wait for the next period, raise the key's cap, or use another key.",
    ),
    "key-revoked": P(
        "Key revoked",
        409,
        "A revoked key cannot be rotated.",
        "Make a new key with POST /api/v1/keys.",
    ),
    "key-not-found": P(
        "Unknown key",
        404,
        "No key of this account has that id.",
        "List the account's keys with GET /api/v1/keys.",
    ),
    "invalid-request": P(
        "Invalid request",
        400,
        "A field of the request is missing or has a value the API does not accept; "
        "`errors` lists each field and why.",
        "Fix the fields named in `errors` (the schema at /api/v1/schema/ gives each "
        "field's type and range) and send again.",
    ),
    "invalid-parameter": P(
        "Invalid query parameter",
        400,
        "A query parameter has a value the API does not accept, or is given twice; "
        "`parameter` names it.",
        "Give the parameter once, with one of the values the detail lists.",
    ),
    "invalid-cursor": P(
        "Invalid cursor",
        400,
        "The `cursor` is not one this API handed out (edited or from another list).",
        "Follow the `next` link of the previous page as it is, or start from the first page.",
    ),
    "invalid-characters": P(
        "Invalid characters",
        400,
        "A query parameter or a request header holds a NUL character (%00).",
        "Remove the NUL characters from the URL and headers.",
    ),
    "invalid-idempotency-key": P(
        "Invalid Idempotency-Key",
        400,
        "The Idempotency-Key header is empty or longer than 255 characters.",
        "Send 1 to 255 characters, e.g. a UUID, the same on every retry of one request.",
    ),
    "not-authenticated": P(
        "Authentication required",
        401,
        "The request carries no API key.",
        "Send `Authorization: Bearer <key>` (an admin creates keys; "
        "`manage.py create_account` prints one).",
    ),
    "authentication-failed": P(
        "Authentication failed",
        401,
        "The API key is unknown or revoked.",
        "Check the key, or ask an admin for a new one.",
    ),
    "forbidden": P(
        "Forbidden",
        403,
        "The key is valid but may not do this.",
        "Use a key of an account allowed to do it.",
    ),
    "not-found": P(
        "Not found",
        404,
        "Nothing exists at this path.",
        "Check the path against the API reference at /api/docs/.",
    ),
    "method-not-allowed": P(
        "Method not allowed",
        405,
        "The path exists but does not accept this HTTP method.",
        "Use a method the `Allow` header lists.",
    ),
    "not-acceptable": P(
        "Not acceptable",
        406,
        "The API cannot answer in a media type the Accept header allows.",
        "Accept application/json.",
    ),
    "unsupported-media-type": P(
        "Unsupported media type",
        415,
        "The body's Content-Type is not one this endpoint reads.",
        "Send application/json (files: multipart/form-data).",
    ),
    "request-too-large": P(
        "Request body too large",
        413,
        "The body is larger than the service accepts in one request.",
        "Upload large inputs as a file (POST /api/v1/files) and refer to it.",
    ),
    "request-timeout": P(
        "Request timeout",
        408,
        "The request line and headers did not arrive within the web server's header "
        "timeout (WEB_HEADER_TIMEOUT_SECONDS); the connection was closed.",
        "Send the whole request at once; a slow network needs a retry.",
    ),
    "uri-too-long": P(
        "URI too long",
        414,
        "The request line is longer than the web server accepts (WEB_MAX_HEADER_BYTES).",
        "Send long inputs in a JSON body, not in the query string.",
    ),
    "headers-too-large": P(
        "Request headers too large",
        431,
        "The request line and headers together are larger than the web server accepts "
        "(WEB_MAX_HEADER_BYTES).",
        "Send fewer or shorter headers (cookies included); put data in the body.",
    ),
    "rate-limited": P(
        "Rate limit exceeded",
        429,
        "The account (or, without a key, the client address) sent more requests than its "
        "rate allows.",
        "Wait `Retry-After` seconds, then send again; spread requests out.",
    ),
    "service-unavailable": P(
        "Service unavailable",
        503,
        "The database or the broker is unreachable for the moment; nothing was done.",
        "Retry after `Retry-After` seconds (with the same Idempotency-Key for a job).",
    ),
    "internal-error": P(
        "Internal server error",
        500,
        "The server failed to answer; the error was logged.",
        "Retry later; if it persists, report the time and `instance` to the operators.",
    ),
    "error": P(
        "Error",
        400,
        "An error without a more specific type.",
        "Read `detail`.",
    ),
    # --- models and routing ---------------------------------------------------------
    "model-not-found": P(
        "Unknown model",
        404,
        "No model version, family alias or `auto` matches the name given.",
        "List models with GET /api/v1/models/ and use a slug or family alias from it.",
    ),
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
}


def problem_type_json(slug: str, p: ProblemType) -> dict:
    return {
        "type": problem_type_uri(slug),
        "slug": slug,
        "title": p.title,
        "status": p.status,
        "meaning": p.meaning,
        "action": p.action,
    }


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:42rem;margin:2rem auto;padding:0 1rem}}
code{{background:#f3f3f3;padding:0 .2em}}</style></head>
<body><p><a href="{index}">Problem types</a></p>
<h1>{title}</h1>
<p>HTTP status <strong>{status}</strong>, type <code>{slug}</code></p>
<h2>What happened</h2><p>{meaning}</p>
<h2>What to do</h2><p>{action}</p>
</body></html>
"""


def _wants_json(request) -> bool:
    return request.get_preferred_type(
        ["text/html", "application/json", "application/problem+json"]
    ) in ("application/json", "application/problem+json")


@require_safe
def problem_type_view(request, slug: str):
    """GET /problems/<slug>: HTML for a browser, JSON when the client prefers it."""
    p = PROBLEM_TYPES.get(slug)
    if p is None:
        return problem_response(
            status_code=404,
            slug="not-found",
            title="Unknown problem type",
            detail=f"No problem type {slug!r}; the index is at /problems/.",
            instance=request.path,
        )
    if _wants_json(request):
        return JsonResponse(problem_type_json(slug, p))
    html = format_html(
        _PAGE,
        title=p.title,
        index="/problems/",
        status=p.status,
        slug=slug,
        meaning=p.meaning,
        action=p.action,
    )
    return HttpResponse(html, content_type="text/html; charset=utf-8")


@require_safe
def problem_index_view(request):
    """GET /problems/: every problem type (HTML list, or JSON)."""
    if _wants_json(request):
        return JsonResponse(
            {"problem_types": [problem_type_json(s, p) for s, p in sorted(PROBLEM_TYPES.items())]}
        )
    items = format_html_join(
        "\n",
        '<li><a href="/problems/{}">{}</a> ({}, <code>{}</code>)</li>',
        ((s, p.title, p.status, s) for s, p in sorted(PROBLEM_TYPES.items())),
    )
    html = format_html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<title>Problem types</title></head><body style="font:16px/1.5 system-ui,'
        'sans-serif;max-width:42rem;margin:2rem auto"><h1>Problem types</h1>'
        "<p>Every error of the API is an RFC 9457 problem whose <code>type</code> is one "
        "of these pages.</p><ul>{}</ul></body></html>",
        items,
    )
    return HttpResponse(html, content_type="text/html; charset=utf-8")

"""What each problem `type` URI ({PUBLIC_BASE_URL}/problems/<slug>, httpedge.problems)
resolves to: one registry of slugs with a title, what happened and what to do, served as
a short HTML page for people and as JSON for clients that ask for it (Accept). An
unknown slug is a 404. The problems of HTTP itself are written here; a domain's beside
the errors that raise them (catalog/problemtypes.py, routing/api/problemtypes.py),
registered from its AppConfig.ready. tests/test_problem_types.py checks that every slug
the code raises has an entry."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpResponse, JsonResponse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_safe

from httpedge.problems import problem_response, problem_type_uri


@dataclass(frozen=True)
class ProblemType:
    title: str
    status: int  # the usual HTTP status of this problem
    meaning: str  # what happened
    action: str  # what the client can do about it


P = ProblemType
# Every registered problem type (the ones below, and each app's: `register`).
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
}


def register(types: dict[str, ProblemType]) -> None:
    """Add an app's problem types (from its AppConfig.ready); a slug is registered once."""
    clash = {slug for slug, p in types.items() if PROBLEM_TYPES.get(slug, p) != p}
    if clash:
        raise ValueError(f"problem types registered twice, differently: {sorted(clash)}")
    PROBLEM_TYPES.update(types)


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
        meaning=code_spans(p.meaning),
        action=code_spans(p.action),
    )
    return HttpResponse(html, content_type="text/html; charset=utf-8")


def code_spans(text: str):
    """The text, escaped, its Markdown `code` spans as <code> (the JSON keeps them as
    written): the HTML page shows `Retry-After` as code, not with its backticks."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: the text as it is
        return text
    return format_html_join(
        "",
        "{}",
        (
            (format_html("<code>{}</code>", part) if i % 2 else part,)
            for i, part in enumerate(parts)
        ),
    )


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

"""The one map from domain exceptions to RFC 9457 problems (httpedge.problems.Problem).

Services raise exceptions that say what went wrong (and, for batches and files, a
problem slug in `code`); which HTTP status that is gets decided here and nowhere
else. Views wrap a service call in `domain_problems(...)`. Problems that belong to
the HTTP surface itself (an unknown id in the URL, a bad header or query parameter)
are raised by the views directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse

from httpedge.problems import Problem
from routing.accounts.scopes import KeyNotAllowed
from routing.api.base import key_problem, model_url
from routing.api.shapes import candidate_brief, candidate_json
from routing.batches.errors import BatchError
from routing.batches.files import FileRejected
from routing.core.formats import echo
from routing.jobs.errors import (
    IdempotencyConflict,
    IdempotencyMismatch,
    InteractiveFailed,
    JobNotCancellable,
    NoTierChosen,
)
from routing.quota import QuotaExhausted, RateLimited
from routing.router.quotes import AutoNeedsTask, Quote
from routing.router.resolve import ModelNotServing, ModelRetired, ModelUnknown

# The problems of the quote and job endpoints, for the OpenAPI schema.
PROBLEM_RESPONSES = {
    code: OpenApiResponse(description=desc)
    for code, desc in {
        400: "Invalid request (problem+json)",
        401: "Missing, invalid or revoked API key",
        404: "Unknown model",
        410: "Model retired; `successor` names the replacement",
        422: "No tier meets the deadline (`fastest`), over `max_cost`, or over the context window",
        429: "No quota package can pay; `next_reset` and Retry-After",
    }.items()
}

# Exceptions whose problem is fixed: (status, slug, title); the detail is the message.
FIXED_PROBLEMS: dict[type[Exception], tuple[int, str, str]] = {
    AutoNeedsTask: (400, "invalid-request", "Invalid request"),
    IdempotencyConflict: (409, "idempotency-conflict", "Duplicate request in progress"),
    IdempotencyMismatch: (422, "idempotency-key-reused", "Idempotency-Key reused"),
    JobNotCancellable: (409, "job-not-cancellable", "Job cannot be cancelled"),
    InteractiveFailed: (422, "cannot-run", "The simulated engine cannot run this request"),
}

# Batch and file refusals carry their slug in `code`: the status by slug (any other
# slug is a 400), and the title by status.
BATCH_STATUS: dict[str, int] = {
    "file-not-found": 404,
    "batch-not-cancellable": 409,
    "batch-not-ended": 409,
    "nothing-to-retry": 409,
    "file-in-use": 409,
    "file-too-large": 413,
    "too-many-requests": 413,
    "storage-full": 413,
}
BATCH_TITLE: dict[int, str] = {404: "Not found", 409: "Conflict", 413: "Too large"}


def key_not_allowed(exc: KeyNotAllowed, request, model: str) -> Problem:
    return key_problem(exc)


def model_unknown(exc: ModelUnknown, request, model: str) -> Problem:
    return Problem(
        status_code=404,
        slug="model-not-found",
        title="Unknown model",
        detail=f"No model {echo(model)}: see GET /api/v1/models/ (or use 'auto').",
    )


def model_retired(exc: ModelRetired, request, model: str) -> Problem:
    """410 naming the successor (detail, `successor` member and a Link header)."""
    successor = exc.successor.slug if exc.successor else None
    detail = f"{exc.model.slug} was retired on {exc.model.retires_on}."
    headers = {}
    if successor:
        detail += f" Use {successor}" + (f" on {exc.tier.slug}." if exc.tier else ".")
        detail += " Accounts that opt in to automatic migration are moved there."
        headers["Link"] = f'<{model_url(request, successor)}>; rel="successor-version"'
    return Problem(
        status_code=410,
        slug="model-retired",
        title="Model retired",
        detail=detail,
        headers=headers,
        model=exc.model.slug,
        retired_on=str(exc.model.retires_on),
        successor=successor,
        successor_tier=exc.tier.slug if exc.tier else None,
    )


def model_not_serving(exc: ModelNotServing, request, model: str) -> Problem:
    lifecycle_status = exc.status  # the model's lifecycle status, not an HTTP one
    return Problem(
        status_code=422,
        slug="model-not-serving",
        title="Model not serving",
        detail=f"{exc.model.slug} is {lifecycle_status} and has no tier serving yet.",
    )


def quota_problem(next_reset, at, **ext) -> Problem:
    """429 with the next reset (member and Retry-After) when one is known."""
    headers = {}
    if next_reset:
        headers["Retry-After"] = str(max(1, int((next_reset - at).total_seconds())))
    return Problem(
        status_code=429,
        slug="quota-exhausted",
        title="No quota package can pay",
        detail="No quota package covering this work has enough credits"
        + (f"; the next reset is at {next_reset.isoformat()}." if next_reset else "."),
        headers=headers,
        next_reset=next_reset.isoformat() if next_reset else None,
        **ext,
    )


def quota_exhausted(exc: QuotaExhausted, request, model: str) -> Problem:
    return quota_problem(exc.next_reset_at, timezone.now())


def rate_limited(exc: RateLimited, request, model: str) -> Problem:
    """429 rate-limited: the account's or the paying package's requests or tokens per
    minute (routing.quota.ratelimits), with Retry-After."""
    return Problem(
        status_code=429,
        slug="rate-limited",
        title="Rate limit exceeded",
        detail=str(exc),
        headers={"Retry-After": str(exc.retry_after)},
        retry_after_seconds=exc.retry_after,
    )


def quote_refused(quote: Quote) -> Problem:
    """The problem for a quote whose router found no tier, by the router's outcome."""
    d, req = quote.decision, quote.request
    cands = [candidate_json(c) for c in d.candidates]
    if d.outcome == "deadline":
        f = d.fastest
        detail = (
            f"Fastest option: {f.tier}, {f.total_seconds:.0f} s predicted; "
            f"deadline {req.deadline_seconds:g} s."
            if f
            else "No tier can run this task now."
        )
        if req.tiers and not req.tier:
            detail += f" This API key restricts the tiers to {', '.join(req.tiers)}."
        return Problem(
            status_code=422,
            slug="deadline-infeasible",
            title="No tier meets the deadline",
            detail=detail,
            fastest=candidate_brief(f),
            candidates=cands,
        )
    if d.outcome == "max_cost":
        c = d.fastest
        return Problem(
            status_code=422,
            slug="max-cost-exceeded",
            title="No tier meets the deadline within max_cost",
            detail=f"Cheapest tier that meets the deadline: {c.tier} at {c.cost} credits; "
            f"max_cost {req.max_cost}.",
            cheapest=candidate_brief(c),
            candidates=cands,
        )
    if d.outcome == "context":
        window = quote.resolved.model.context_window if quote.resolved else None
        return Problem(
            status_code=422,
            slug="context-window-exceeded",
            title="Task larger than the context window",
            detail=f"{req.input_tokens + req.output_tokens} tokens do not fit "
            + (f"the {window}-token context window." if window else "any candidate model."),
            context_window=window,
        )
    if d.outcome == "quota":
        return quota_problem(d.next_reset_at, quote.at, candidates=cands)
    if quote.resolved is None:  # model "auto"
        return Problem(
            status_code=422,
            slug="no-model-for-task",
            title="No model for this task class",
            detail=f"No serving model has a published {req.task!r} result to choose by.",
        )
    return Problem(
        status_code=422,
        slug="model-not-serving",
        title="Model not serving",
        detail="No tier is deployed for this model.",
    )


def no_tier_chosen(exc: NoTierChosen, request, model: str) -> Problem:
    return quote_refused(exc.quote)


def batch_refused(exc: BatchError | FileRejected, request, model: str) -> Problem:
    """A batch or file refusal: the status from its slug; `parameter` names the field."""
    status = BATCH_STATUS.get(exc.code, 400)
    param = getattr(exc, "param", None)
    return Problem(
        status_code=status,
        slug=exc.code,
        title=BATCH_TITLE.get(status, "Invalid batch request"),
        detail=str(exc),
        **({"parameter": param} if param else {}),
    )


def fixed_problem(exc: Exception, request, model: str) -> Problem:
    status, slug, title = next(FIXED_PROBLEMS[c] for c in type(exc).__mro__ if c in FIXED_PROBLEMS)
    return Problem(status_code=status, slug=slug, title=title, detail=str(exc))


# Exception class -> the function that builds its problem (looked up along the MRO, so
# a subclass such as BatchNotCancellable takes its base class's entry).
PROBLEM_BUILDERS: dict[type[Exception], Callable[[Exception, object, str], Problem]] = {
    KeyNotAllowed: key_not_allowed,
    ModelUnknown: model_unknown,
    ModelRetired: model_retired,
    ModelNotServing: model_not_serving,
    QuotaExhausted: quota_exhausted,
    RateLimited: rate_limited,
    NoTierChosen: no_tier_chosen,
    BatchError: batch_refused,
    FileRejected: batch_refused,
    **dict.fromkeys(FIXED_PROBLEMS, fixed_problem),
}
DOMAIN_ERRORS = tuple(PROBLEM_BUILDERS)


def problem_for(exc: Exception, *, request, model: str = "") -> Problem:
    """The problem for a domain exception; `model` is the model the client asked for."""
    for cls in type(exc).__mro__:
        if cls in PROBLEM_BUILDERS:
            return PROBLEM_BUILDERS[cls](exc, request, model)
    raise TypeError(f"No problem is mapped for {type(exc).__name__}") from exc


@contextmanager
def domain_problems(request, *, model: str = "") -> Iterator[None]:
    """Turn a domain exception raised inside the block into its problem."""
    try:
        yield
    except DOMAIN_ERRORS as exc:
        raise problem_for(exc, request=request, model=model) from exc

"""The answer of an interactive request (routing.agents) and the stored responses.

- `plan`: the answer for a checked request (params.Interactive + honour.Honoured),
  decided before the job is booked so its output tokens are what is generated;
- `with_previous`: a Responses request continuing a stored response
  (`previous_response_id`): that response's conversation (its input and its output) is
  prepended to the new input and counted as input tokens, as OpenAI counts it;
- stored responses: `store` (default true) keeps a response retrievable
  (GET /v1/responses/{id}) and continuable for RETENTION; DELETE forgets it at once.
  Retention is bounded: a response older than RETENTION is answered 404 as OpenAI
  answers an expired one (the job row itself follows the jobs' own retention).
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.utils import timezone

from routing.agents.answer import Answer, AnswerRequest, request_seed
from routing.agents.answer import plan as plan_answer
from routing.agents.schemas import SchemaError
from routing.compat import honour
from routing.compat.params import Interactive, invalid
from routing.core import openai_shapes
from routing.core.limits import MAX_PROMPT_CHARS
from routing.jobs.output import synthetic_output
from routing.models import Account, Job

RETENTION = dt.timedelta(days=30)


def plan(req: Interactive, h: honour.Honoured, after_tool: bool, job_id: uuid.UUID) -> Answer:
    """The answer to this request; the request's output tokens become its length."""
    if not req.limit_sent and h.verbosity:
        req.output_tokens = honour.VERBOSITY_TOKENS[h.verbosity]
    seed = request_seed(req.model, req.prompt, h.fingerprint())
    ask = AnswerRequest(
        limit=req.output_tokens,
        limit_sent=req.limit_sent,
        seed=seed,
        # the text by the request's words and seed only: a stop or a limit cuts the
        # same text, as a model's sampled tokens do not depend on when it is stopped
        text_seed=request_seed(req.model, req.prompt, h.seed) if h.deterministic else job_id.int,
        tools=h.tools,
        tool_choice=h.tool_choice,
        parallel=h.parallel and (h.max_tool_calls or 2) > 1,
        after_tool=after_tool,
        json_schema=h.json_schema,
        json_where=h.json_where,
        stop=h.stop,
    )
    try:
        answer = plan_answer(ask)
    except SchemaError as exc:
        raise invalid(str(exc), exc.path) from None
    req.output_tokens = answer.tokens
    return answer


def stored_answer(answer: Answer, endpoint: str, h: honour.Honoured, echo: dict) -> dict:
    """What the job keeps: the answer, and for a response whether it is stored and what
    its object echoes."""
    out = answer.stored()
    out["endpoint"] = endpoint
    out["echo"] = echo
    if endpoint == "responses":
        out["store"] = h.store
    return out


def response_echo(body: dict, h: honour.Honoured) -> dict:
    """The request's members a Responses object repeats (OpenAI's object shows them)."""
    tools = body.get("tools") or []
    text = body.get("text") or {"format": {"type": "text"}}
    return {
        "instructions": body.get("instructions"),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": tools,
        "parallel_tool_calls": h.parallel,
        "max_tool_calls": h.max_tool_calls,
        "text": text,
        "truncation": "disabled",
        "previous_response_id": h.previous_response_id,
        "store": h.store,
        "user": h.echo.get("user"),
        "safety_identifier": h.echo.get("safety_identifier"),
        "prompt_cache_key": h.echo.get("prompt_cache_key"),
    }


def job_id_of(response_id: str) -> uuid.UUID | None:
    if not isinstance(response_id, str) or not response_id.startswith("resp_"):
        return None
    try:
        return uuid.UUID(hex=response_id.removeprefix("resp_"))
    except ValueError:
        return None


def stored_response(account: Account, response_id: str, at=None) -> Job | None:
    """The account's stored response `response_id` within RETENTION, else None."""
    pk = job_id_of(response_id)
    if pk is None:
        return None
    at = at or timezone.now()
    job = (
        Job.objects.select_related("model", "tier")
        .filter(pk=pk, account=account, created_at__gte=at - RETENTION)
        .first()
    )
    answer = (job.answer or {}) if job else {}
    if answer.get("endpoint") != "responses" or not answer.get("store"):
        return None
    return job


def forget(job: Job) -> None:
    """DELETE /v1/responses/{id}: no longer retrievable nor continuable."""
    answer = dict(job.answer or {})
    answer["store"] = False
    Job.objects.filter(pk=job.pk).update(answer=answer)


def with_previous(account: Account, req: Interactive, h: honour.Honoured) -> None:
    """Prepend the previous response's conversation to the request (input tokens)."""
    if not h.previous_response_id:
        return
    prev = stored_response(account, h.previous_response_id)
    if prev is None or prev.status != Job.Status.SUCCEEDED:
        raise invalid(
            f"Previous response with id '{h.previous_response_id[:80]}' not found (it was "
            "not stored, was deleted, has not completed, or is older than 30 days).",
            "previous_response_id",
        )
    prompt = prev.prompt + synthetic_output(prev) + req.prompt
    if len(prompt) > MAX_PROMPT_CHARS:
        raise invalid(
            f"The conversation with the previous response would exceed {MAX_PROMPT_CHARS} "
            "characters (truncation is disabled).",
            "previous_response_id",
        )
    req.prompt = prompt
    req.input_tokens = openai_shapes.tokens_of(req.prompt)

"""POST /v1/chat/completions and POST /v1/responses: async views (served under ASGI, so
a slow stream holds a coroutine, not a thread or a process).

Each request is a real job (routing.jobs.interactive): quoted, reserved, its slot
booked, visible in GET /api/v1/jobs, settled when the answer ends. The view waits
(non-streaming) or streams (server-sent events) along the job's simulated timeline; a
client that leaves early is charged only for what was generated before it left.

Database work runs in a thread (sync_to_async) and gives its connection back at once,
so hundreds of open streams do not hold hundreds of database connections.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import NotAuthenticated

from routing.accounts.auth import BearerKeyAuthentication, HasAccount
from routing.api.base import client_deprecation_headers
from routing.api.errors import domain_problems
from routing.compat import params
from routing.compat.errors import error_response, exception_response
from routing.core import openai_shapes
from routing.core.formats import cut
from routing.core.openai_shapes import service_tier_word, unix
from routing.jobs.interactive import (
    Interactive,
    interactive_abandon,
    interactive_finish,
    interactive_start,
)
from routing.jobs.output import synthetic_output
from routing.models import Job

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
# At most one server-sent event per stream per STREAM_TICK_SECONDS (wall): the tokens
# due meanwhile travel together, so pacing costs the same at 30 or 3,000 tokens/s.
STREAM_TICK_SECONDS = 0.1


def _db(fn: Callable) -> Callable:
    """`fn` run in a thread (thread-sensitive, like Django's own sync code), its
    database connection closed afterwards: an open stream holds no connection."""

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:  # (a test's transaction stays open)
                connection.close()

    return sync_to_async(run)


def _account(request):
    auth = BearerKeyAuthentication()
    found = auth.authenticate(request)
    if found is None:
        raise NotAuthenticated(HasAccount.message)
    return found[0].account


def _begin(request, endpoint: str):
    """Authenticate, read the body, start the job. (request, Interactive, headers), or
    an error response in OpenAI's envelope."""
    try:
        account = _account(request)
        body = params.body_of(request.body, request.content_type or "")
        read = params.chat_request if endpoint == CHAT else params.responses_request
        req = read(body, request.headers)
        with domain_problems(request, model=req.model):
            started = interactive_start(
                account=account,
                model=req.model,
                request=req.route_request(),
                prompt=req.prompt,
                payload=req.payload(endpoint),
            )
        headers = client_deprecation_headers(started.job.model, request)
        headers["X-Job-Id"] = str(started.job.pk)
        return req, started, headers
    except Exception as exc:
        response = exception_response(exc, request)
        if response is None:
            raise
        return response


def _words(job: Job) -> list[str]:
    return synthetic_output(job).split(" ") if job.output_tokens else []


def _ids(job: Job) -> tuple[str, int]:
    return job.pk.hex, unix(job.created_at)


def _method_not_allowed(request) -> JsonResponse:
    response = error_response(
        405,
        f"{cut(request.method, 20)} is not allowed on {cut(request.path)}; use POST.",
        "method_not_allowed",
    )
    response["Allow"] = "POST"
    return response


def _set_headers(response: HttpResponse, headers: dict) -> HttpResponse:
    for name, value in headers.items():
        response[name] = value
    return response


async def _serve(request, endpoint: str) -> HttpResponse:
    if request.method != "POST":
        return _method_not_allowed(request)
    begun = await _db(_begin)(request, endpoint)
    if isinstance(begun, HttpResponse):
        return begun
    req, started, headers = begun
    if req.stream:
        events = _chat_events if endpoint == CHAT else _response_events
        response = StreamingHttpResponse(
            _guarded(started, events(req, started)), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return _set_headers(response, headers)
    try:
        await _sleep_until(started.timeline.finishes_at)
        job = await _db(_finish)(started.job.pk)
    except asyncio.CancelledError:
        await _db(interactive_abandon)(started.job.pk)
        raise
    if job.status != Job.Status.SUCCEEDED:
        return error_response(
            409, f"The request's job {job.pk} ended {job.status}: {job.error}", "job_" + job.status
        )
    build = _chat_body if endpoint == CHAT else _response_body
    return _set_headers(JsonResponse(build(req, job)), headers)


def _finish(job_id) -> Job:
    interactive_finish(job_id)
    return Job.objects.select_related("model", "tier").get(pk=job_id)


async def _sleep_until(at) -> None:
    delay = (at - timezone.now()).total_seconds()
    if delay > 0:
        await asyncio.sleep(delay)


def _chat_body(req: params.Interactive, job: Job) -> dict:
    cid, created = _ids(job)
    return openai_shapes.chat_completion(
        id=f"chatcmpl-{cid}",
        created=created,
        model=job.model.slug,
        service_tier=service_tier_word(job.tier.slug),
        text=synthetic_output(job),
        prompt_tokens=job.input_tokens,
        completion_tokens=job.output_tokens,
        tier=job.tier.slug,
        job_id=str(job.pk),
        metadata=req.metadata or None,
    )


def _response_body(req: params.Interactive, job: Job, status: str = "completed") -> dict:
    rid, created = _ids(job)
    done = status == "completed"
    return openai_shapes.response_object(
        id=f"resp_{rid}",
        created=created,
        model=job.model.slug,
        service_tier=service_tier_word(job.tier.slug),
        text=synthetic_output(job) if done else "",
        input_tokens=job.input_tokens,
        output_tokens=job.output_tokens if done else 0,
        status=status,
        tier=job.tier.slug,
        job_id=str(job.pk),
        metadata=req.metadata or {},
        max_output_tokens=job.output_tokens,
    )


def _sse(data: dict | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


async def _paced(started: Interactive) -> AsyncIterator[str]:
    """The answer's text in pieces as the timeline generates it: at most one piece per
    STREAM_TICK_SECONDS, each holding every token due by then."""
    tl = started.timeline
    words = _words(started.job)
    sent, n = 0, len(words)
    while sent < n:
        now = timezone.now()
        due = min(n, tl.tokens_by(now))
        if due <= sent:
            wake = tl.token_at(sent + 1)
            delay = max((wake - now).total_seconds(), STREAM_TICK_SECONDS if sent else 0.0)
            await asyncio.sleep(delay)
            continue
        piece = " ".join(words[sent:due])
        yield piece if sent == 0 else " " + piece
        sent = due
        if sent < n:
            await asyncio.sleep(STREAM_TICK_SECONDS)


async def _guarded(started: Interactive, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The stream's events; if the client leaves before the end (the server cancels or
    closes the iterator), the job is charged for what was generated by then."""
    complete = False
    try:
        async for chunk in events:
            yield chunk
        complete = True
    finally:
        if not complete:
            await asyncio.shield(_db(interactive_abandon)(started.job.pk))


async def _chat_events(req: params.Interactive, started: Interactive) -> AsyncIterator[bytes]:
    job = started.job
    cid, created = _ids(job)
    common = {
        "id": f"chatcmpl-{cid}",
        "created": created,
        "model": job.model.slug,
        "service_tier": service_tier_word(job.tier.slug),
    }
    first = True
    async for piece in _paced(started):
        delta = {"role": "assistant", "content": piece} if first else {"content": piece}
        first = False
        yield _sse(openai_shapes.chat_chunk(**common, delta=delta))
    done = await _db(_finish)(job.pk)
    yield _sse(openai_shapes.chat_chunk(**common, delta={}, finish_reason="stop"))
    if req.include_usage:
        usage = openai_shapes.usage_chat(done.input_tokens, done.output_tokens)
        yield _sse(openai_shapes.chat_chunk(**common, delta={}, usage=usage, choices=False))
    yield _sse("[DONE]")


async def _response_events(req: params.Interactive, started: Interactive) -> AsyncIterator[bytes]:
    job = started.job
    seq = 0

    def event(kind: str, **fields) -> bytes:
        nonlocal seq
        seq += 1
        return _sse({"type": kind, "sequence_number": seq - 1, **fields}, event=kind)

    pending = _response_body(req, job, status="in_progress")
    item = pending["output"][0]
    item_id = item["id"]
    pending.update(output=[], usage=None)
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    yield event(
        "response.output_item.added",
        output_index=0,
        item={**item, "status": "in_progress", "content": []},
    )
    empty = {"type": "output_text", "text": "", "annotations": []}
    yield event("response.content_part.added", **where, part=empty)
    async for piece in _paced(started):
        yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
    done = await _db(_finish)(job.pk)
    final = _response_body(req, done)
    text = final["output"][0]["content"][0]["text"]
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part=final["output"][0]["content"][0])
    yield event("response.output_item.done", output_index=0, item=final["output"][0])
    yield event("response.completed", response=final)


@csrf_exempt
async def chat_completions(request):
    return await _serve(request, CHAT)


@csrf_exempt
async def responses(request):
    return await _serve(request, RESPONSES)

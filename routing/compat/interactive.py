"""POST /v1/chat/completions and POST /v1/responses: async views (served under ASGI, so
a slow stream holds a coroutine, not a thread or a process).

Each request is a real job (routing.jobs.interactive): quoted, reserved, its slot
booked, visible in GET /api/v1/jobs, settled when the answer ends. The view waits
(non-streaming) or streams (server-sent events) along the job's simulated timeline.
A stream records each event's tokens on the job before sending them and only while
the job runs: once the job is cancelled (POST /api/v1/jobs/{id}/cancel) or has failed,
it sends no more tokens and ends with a final chunk saying so (chat: `finish_reason`
"cancelled" or "failed", then usage and [DONE]; responses: `response.incomplete` or
`response.failed`), and the job is charged for what was delivered; a client that
leaves early likewise. A non-streaming client that leaves early is charged for what was
generated before it left, unless it sent an Idempotency-Key: then the job runs to its
end, so that its retry gets the answer, charged once.

Idempotency-Key (the native jobs' rule, routing.jobs.submit): a repeat of a request with
the same key and body answers from the same job (`Idempotent-Replayed: true`, nothing
charged again): the same completion or response (a stream: replayed at once), after
waiting for the job's end if it is still running (a streamed one still streaming: 409,
retry later); the same error if it ended cancelled or failed. The same key with another
body is 422 `idempotency_key_reused`; a concurrent duplicate is 409.

Database work runs in a thread (sync_to_async) and gives its connection back at once,
so hundreds of open streams do not hold hundreds of database connections.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import NotAuthenticated

from routing.accounts.auth import HasAccount, request_principal
from routing.accounts.defaults import tier_choice
from routing.accounts.scopes import check_method
from routing.agents.answer import Answer
from routing.api.base import client_deprecation_headers
from routing.api.errors import domain_problems
from routing.api.jobs import idempotency_key_of
from routing.api.throttling import check_throttles
from routing.compat import answering, honour, params
from routing.compat.errors import error_response, exception_response
from routing.core import openai_shapes
from routing.core.formats import cut
from routing.core.limits import MAX_DEADLINE_SECONDS
from routing.core.openai_shapes import service_tier_word, unix
from routing.jobs.interactive import (
    Interactive,
    interactive_abandon,
    interactive_finish,
    interactive_start,
    stream_deliver,
)
from routing.jobs.output import planned_answer, synthetic_output
from routing.models import Job
from routing.router import timing
from routing.router.route import RouteRequest

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
# At most one server-sent event per stream per STREAM_TICK_SECONDS (wall): the tokens
# due meanwhile travel together, so pacing costs the same at 30 or 3,000 tokens/s. Each
# event is one conditional write on the job (its delivered tokens, while it runs), so
# this is also how soon a stream stops once its job is cancelled.
STREAM_TICK_SECONDS = 0.25


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


def _principal(request):
    """The caller (401 without a key), within its request rate (429 past it): what a
    DRF view of the API does before its handler."""
    principal = request_principal(request)
    if principal is None:
        raise NotAuthenticated(HasAccount.message)
    check_throttles(request, principal)
    return principal


def _begin(request, endpoint: str):
    """Authenticate, read the body, start the job (or find the job of an earlier request
    with the same Idempotency-Key). (request, Interactive, headers, key), or an error
    response in OpenAI's envelope."""
    try:
        principal = _principal(request)
        account = principal.account
        with domain_problems(request):
            check_method(principal.key, request.method)
        key = idempotency_key_of(request)
        body = params.body_of(request.body, request.content_type or "")
        read = params.chat_request if endpoint == CHAT else params.responses_request
        req = read(body, request.headers)
        word = "chat" if endpoint == CHAT else "responses"
        h = honour.read(body, word)
        if endpoint == RESPONSES:
            answering.with_previous(account, req, h)
        said = body.get("messages") if endpoint == CHAT else body.get("input")
        job_id = uuid.uuid4()
        answer = answering.plan(req, h, openai_shapes.ends_with_tool_result(said), job_id)
        req.answer = h.fingerprint()
        echo = answering.response_echo(body, h) if endpoint == RESPONSES else dict(h.echo)
        with domain_problems(request, model=req.model):
            started = interactive_start(
                account=account,
                model=req.model,
                request=with_defaults(req, account, principal.key),
                prompt=req.prompt,
                payload=req.payload(endpoint),
                stream=req.stream,
                idempotency_key=key,
                job_id=job_id,
                answer=answering.stored_answer(answer, word, h, echo),
                fallbacks=req.fallbacks,
                api_key=principal.key,
            )
        if started.replayed:
            headers = {"Idempotent-Replayed": "true"}
        else:
            headers = client_deprecation_headers(started.job.model, request)
        headers["X-Job-Id"] = str(started.job.pk)
        headers.update(deadline_headers(started.job))
        return req, started, headers, key
    except Exception as exc:
        response = exception_response(exc, request)
        if response is None:
            raise
        return response


def with_defaults(req: params.Interactive, account, key=None) -> RouteRequest:
    """The request's route, with the account's defaults where it named no tier or
    deadline, within the key's tiers (routing.accounts.defaults)."""
    choice = tier_choice(
        sent=req.service_tier,
        tier=req.tier,
        deadline_seconds=req.deadline_seconds,
        account=account,
        allowed_tiers=key.allowed_tiers if key is not None else (),
    )
    return replace(
        req.route_request(),
        tier=choice.tier,
        deadline_seconds=choice.deadline_seconds or MAX_DEADLINE_SECONDS,
    )


def deadline_headers(job: Job) -> dict[str, str]:
    """The promise and its outcome as response headers (OpenAI's bodies have no room
    for them). The outcome is known from the start, streamed or not: the simulated run
    is drawn when the job is claimed, before the first token."""
    out = {}
    if job.promised_seconds is not None:
        out["X-Promised-Seconds"] = f"{job.promised_seconds:.3f}"
    total = (job.simulated or {}).get("total_seconds")
    if total is not None:
        outcome = timing.deadline_outcome(total, job.deadline_seconds)
        out["X-Completion-Seconds"] = f"{outcome.completion_seconds:.3f}"
        out["X-Deadline-Met"] = "true" if outcome.deadline_met else "false"
        out["X-Late-By-Seconds"] = f"{outcome.late_by_seconds:.3f}"
    return out


def _answer(job: Job) -> Answer:
    """The job's planned answer (a job from before answers were planned: its filler)."""
    planned = planned_answer(job)
    if planned is None:
        return Answer("text", job.output_tokens, "stop", seed=job.pk.int)
    return planned


def _pieces(job: Job) -> list[tuple[int | None, str]]:
    """The answer token by token: (tool call index or None, text)."""
    return _answer(job).pieces(job.pk.int) if job.output_tokens else []


def _tool_calls(answer: Answer, upto: dict[int, str] | None = None) -> list[dict]:
    """Chat's `tool_calls` (`upto`: the arguments delivered so far, by call)."""
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {
                "name": c.name,
                "arguments": c.arguments if upto is None else upto.get(i, ""),
            },
        }
        for i, c in enumerate(answer.calls)
        if upto is None or i in upto
    ]


def _function_items(answer: Answer, status: str, upto: dict[int, str] | None = None) -> list:
    """Responses' `function_call` output items."""
    return [
        {
            "type": "function_call",
            "id": "fc_" + c.id.removeprefix("call_"),
            "call_id": c.id,
            "name": c.name,
            "arguments": c.arguments if upto is None else upto.get(i, ""),
            "status": status,
        }
        for i, c in enumerate(answer.calls)
        if upto is None or i in upto
    ]


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
    begun = await _db(_begin_and_finish)(request, endpoint)
    if isinstance(begun, HttpResponse):
        return begun
    (req, started, headers, key), done = begun
    job = started.job
    if started.replayed and job.status == Job.Status.RUNNING and req.stream:
        return _set_headers(
            error_response(
                409,
                f"The request with this Idempotency-Key is still streaming (job {job.pk}); "
                "retry when it has ended to have its answer replayed.",
                "idempotency_conflict",
            ),
            headers,
        )
    if started.replayed and job.status != Job.Status.RUNNING:
        pass  # ended: its answer (or its error) as it was
    elif req.stream:
        events = _chat_events if endpoint == CHAT else _response_events
        response = StreamingHttpResponse(
            _guarded(started, events(req, started)), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return _set_headers(response, headers)
    elif done is not None:
        job = done  # its end was due when it started: finished in the same thread hop
    else:
        try:
            await _sleep_until(started.timeline.finishes_at)
            job = await _db(_finish)(job)
        except asyncio.CancelledError:
            # With an Idempotency-Key the job runs to its end (the sweeper settles it)
            # so that the client's retry gets the answer; without, it is abandoned.
            if key is None:
                await _db(interactive_abandon)(started.job.pk)
            raise
    if job.status != Job.Status.SUCCEEDED:
        return _set_headers(
            error_response(
                409,
                f"The request's job {job.pk} ended {job.status}: {job.error}",
                "job_" + job.status,
            ),
            headers,
        )
    if req.stream:  # a replay of a streamed answer: at once
        events = _chat_events if endpoint == CHAT else _response_events
        response = StreamingHttpResponse(events(req, started), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        return _set_headers(response, headers)
    build = _chat_body if endpoint == CHAT else _response_body
    return _set_headers(JsonResponse(build(req, job)), headers)


def _begin_and_finish(request, endpoint: str):
    """`_begin`, and for a non-streamed answer whose end is due already (a short answer
    under compressed simulated time) its finish too: the request's database work in one
    thread hop. ((request, Interactive, headers, key), the finished job or None), or
    `_begin`'s error response."""
    begun = _begin(request, endpoint)
    if isinstance(begun, HttpResponse):
        return begun
    req, started, _headers, _key = begun
    due = (
        not started.replayed
        and not req.stream
        and started.timeline is not None
        and started.timeline.finishes_at <= timezone.now()
    )
    return begun, _finish(started.job) if due else None


def _finish(job: Job) -> Job:
    """Settle the job the start returned, from memory (no read); read only when it
    had ended otherwise meanwhile (abandoned, swept, cancelled)."""
    done = interactive_finish(job.pk, job=job)
    return done or Job.objects.select_related("model", "tier").get(pk=job.pk)


async def _sleep_until(at) -> None:
    delay = (at - timezone.now()).total_seconds()
    if delay > 0:
        await asyncio.sleep(delay)


def _chat_body(req: params.Interactive, job: Job) -> dict:
    cid, created = _ids(job)
    answer = _answer(job)
    calls = answer.kind == "tool_calls"
    return openai_shapes.chat_completion(
        id=f"chatcmpl-{cid}",
        created=created,
        model=job.model.slug,
        service_tier=service_tier_word(job.tier.slug),
        text="" if calls else synthetic_output(job),
        tool_calls=_tool_calls(answer) if calls else None,
        finish_reason=answer.finish_reason,
        prompt_tokens=job.input_tokens,
        completion_tokens=job.output_tokens,
        cost=job.cost,
        tier=job.tier.slug,
        job_id=str(job.pk),
        metadata=req.metadata or None,
        **(job.answer or {}).get("echo", {}),  # user, safety_identifier, prompt_cache_key
    )


def _response_body(
    req: params.Interactive | None,
    job: Job,
    status: str = "completed",
    delivered: int | None = None,
) -> dict:
    """A response object: completed (the whole answer; `incomplete` when it hit
    max_output_tokens), in_progress (nothing yet), or ended early (incomplete or
    failed) with the `delivered` tokens its stream sent. `req` None: a stored response
    read back (GET /v1/responses/{id})."""
    rid, created = _ids(job)
    answer = _answer(job)
    done = status == "completed"
    upto = None
    if done:
        text, inp, out = synthetic_output(job), job.input_tokens, job.output_tokens
        if answer.finish_reason == "length":
            status = "incomplete"
    elif delivered:
        pieces = _pieces(job)[:delivered]
        upto = _joined(pieces)
        text, inp, out = "".join(upto.get(None, "")), job.input_tokens, delivered
    else:
        text, inp, out = "", job.input_tokens if status == "in_progress" else 0, 0
        upto = {}
    stored = job.answer or {}
    output = None
    if answer.kind == "tool_calls":
        item_status = "completed" if status in ("completed", "incomplete") else "in_progress"
        calls = {i: a for i, a in (upto or {}).items() if i is not None} if upto else upto
        output = _function_items(answer, item_status, calls)
    body = openai_shapes.response_object(
        id=f"resp_{rid}",
        created=created,
        model=job.model.slug,
        service_tier=service_tier_word(job.tier.slug),
        text=text if isinstance(text, str) else "",
        input_tokens=inp,
        output_tokens=out,
        status=status,
        output=output,
        cost=None if status == "in_progress" else job.cost,
        tier=job.tier.slug,
        job_id=str(job.pk),
        metadata=(req.metadata if req else stored.get("metadata")) or {},
        max_output_tokens=job.output_tokens,
    )
    body.update(stored.get("echo", {}))  # the request's members (`text` is its format)
    if status == "incomplete" and done:
        body["incomplete_details"] = {"reason": "max_output_tokens"}
    return body


def _joined(pieces) -> dict:
    """Pieces joined by channel: {None: content, 0: first call's arguments, ...}."""
    out: dict = {}
    for channel, text in pieces:
        out[channel] = out.get(channel, "") + text
    return out


def _sse(data: dict | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


async def _paced(started: Interactive) -> AsyncIterator[list[tuple[int | None, str]]]:
    """The answer's tokens in groups as the timeline generates them: at most one group
    per STREAM_TICK_SECONDS, each holding every token due by then, each recorded on the
    job as delivered before it is sent (`stream_deliver`). Stops, sending nothing more,
    as soon as the job no longer runs (cancelled, failed). A replay sends the whole
    stored answer at once."""
    pieces = _pieces(started.job)
    if started.replayed:
        if pieces:
            yield pieces
        return
    tl = started.timeline
    sent, n = 0, len(pieces)
    while sent < n:
        now = timezone.now()
        due = min(n, tl.tokens_by(now))
        if due <= sent:
            wake = tl.token_at(sent + 1)
            delay = max((wake - now).total_seconds(), STREAM_TICK_SECONDS if sent else 0.0)
            await asyncio.sleep(delay)
            continue
        if not await _db(stream_deliver)(started.job.pk, due):
            return  # the job was cancelled or has failed: not one token more
        yield pieces[sent:due]
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
    """OpenAI's chunks: the role first, then content deltas; tool calls as OpenAI
    streams them (a call's first delta has its index, id, type and name with empty
    arguments, the next ones pieces of its arguments), then the finish_reason."""
    job = started.job
    answer = _answer(job)
    cid, created = _ids(job)
    common = {
        "id": f"chatcmpl-{cid}",
        "created": created,
        "model": job.model.slug,
        "service_tier": service_tier_word(job.tier.slug),
    }
    first, opened = True, set()
    async for group in _paced(started):
        delta: dict = {"role": "assistant", "content": None} if first else {}
        first = False
        content = "".join(t for c, t in group if c is None)
        if content or answer.kind != "tool_calls":
            delta["content"] = content
        calls = []
        for channel, text in group:
            if channel is None:
                continue
            if channel not in opened:
                opened.add(channel)
                c = answer.calls[channel]
                head = {"name": c.name, "arguments": ""}
                calls.append({"index": channel, "id": c.id, "type": "function", "function": head})
            if calls and calls[-1]["index"] == channel:
                calls[-1]["function"]["arguments"] += text
            else:
                calls.append({"index": channel, "function": {"arguments": text}})
        if calls:
            delta["tool_calls"] = calls
        yield _sse(openai_shapes.chat_chunk(**common, delta=delta))
    done = await _db(_finish)(job)
    if done.status == Job.Status.SUCCEEDED:
        reason, inp, out = answer.finish_reason, done.input_tokens, done.output_tokens
    else:  # cancelled or failed while streaming: charged for what was delivered
        out = done.delivered_tokens or 0
        reason, inp = done.status, done.input_tokens if out else 0
    yield _sse(openai_shapes.chat_chunk(**common, delta={}, finish_reason=reason))
    if req.include_usage:
        usage = openai_shapes.usage_chat(inp, out, done.cost)
        yield _sse(openai_shapes.chat_chunk(**common, delta={}, usage=usage, choices=False))
    yield _sse("[DONE]")


async def _response_events(req: params.Interactive, started: Interactive) -> AsyncIterator[bytes]:
    job = started.job
    answer = _answer(job)
    seq = 0

    def event(kind: str, **fields) -> bytes:
        nonlocal seq
        seq += 1
        return _sse({"type": kind, "sequence_number": seq - 1, **fields}, event=kind)

    pending = _response_body(req, job, status="in_progress")
    pending.update(output=[], usage=None)
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    if answer.kind == "tool_calls":
        async for chunk in _function_call_events(req, started, answer, event):
            yield chunk
        return
    item = _response_body(req, job, status="in_progress")["output"][0]
    item_id = item["id"]
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield event(
        "response.output_item.added",
        output_index=0,
        item={**item, "status": "in_progress", "content": []},
    )
    empty = {"type": "output_text", "text": "", "annotations": []}
    yield event("response.content_part.added", **where, part=empty)
    async for group in _paced(started):
        piece = "".join(t for _, t in group)
        yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
    final, last = await _final_response(req, job)
    text = final["output"][0]["content"][0]["text"]
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part=final["output"][0]["content"][0])
    yield event("response.output_item.done", output_index=0, item=final["output"][0])
    yield event(last, response=final)


async def _final_response(req, job) -> tuple[dict, str]:
    """The response when its stream ends, and the last event's type."""
    done = await _db(_finish)(job)
    if done.status == Job.Status.SUCCEEDED:
        final = _response_body(req, done)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return final, kind
    if done.status == Job.Status.CANCELLED:
        final = _response_body(req, done, "incomplete", done.delivered_tokens)
        final["incomplete_details"] = {"reason": "cancelled"}
        return final, "response.incomplete"
    final = _response_body(req, done, "failed", done.delivered_tokens)
    final["error"] = {"code": "job_failed", "message": done.error}
    for item in final["output"]:
        item["status"] = "incomplete"
    return final, "response.failed"


async def _function_call_events(req, started: Interactive, answer: Answer, event):
    """Function calls as OpenAI streams them: per call, output_item.added (arguments
    empty), function_call_arguments.delta pieces, function_call_arguments.done and
    output_item.done."""
    items = _function_items(answer, "in_progress")
    args: dict[int, str] = {}
    current = None

    def close(i: int) -> list[bytes]:
        item = {**items[i], "arguments": args[i], "status": "completed"}
        return [
            event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=i,
                arguments=args[i],
            ),
            event("response.output_item.done", output_index=i, item=item),
        ]

    async for group in _paced(started):
        for channel, text in group:
            if channel != current:
                if current is not None:
                    for chunk in close(current):
                        yield chunk
                current = channel
                args[channel] = ""
                added = {**items[channel], "arguments": ""}
                yield event("response.output_item.added", output_index=channel, item=added)
            args[channel] += text
            yield event(
                "response.function_call_arguments.delta",
                item_id=items[channel]["id"],
                output_index=channel,
                delta=text,
            )
    final, last = await _final_response(req, started.job)
    if current is not None and last != "response.failed":
        for chunk in close(current):
            yield chunk
    yield event(last, response=final)


@csrf_exempt
async def chat_completions(request):
    return await _serve(request, CHAT)


@csrf_exempt
async def responses(request):
    return await _serve(request, RESPONSES)

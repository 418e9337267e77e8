"""The lines of a batch's output file (completed requests, in the OpenAI output shape)
and of its error file (every request that did not complete).

An output line's `response.body` is the object of the batch's endpoint: a `job.result`
for /v1/jobs, a `chat.completion` for /v1/chat/completions, a `response` for
/v1/responses (built by routing.core.openai_shapes, like the live endpoints). The text
is simulated: an excerpt of at most EXCERPT_WORDS words, while `usage` counts every
token the request was charged for."""

from __future__ import annotations

import json
from collections.abc import Iterator

from catalog.models import ModelVersion, Tier
from routing.core import openai_shapes
from routing.core.formats import iso
from routing.core.synthetic import synthetic_text
from routing.models import Batch, BatchRequest

EXCERPT_WORDS = 48


def output_lines(batch: Batch) -> Iterator[bytes]:
    """One line per completed request, in the OpenAI output shape."""
    body_of = BODIES.get(batch.endpoint, _result_body)
    tiers = dict(Tier.objects.values_list("pk", "slug"))
    models = dict(ModelVersion.objects.values_list("pk", "slug"))
    qs = batch.requests.filter(status=BatchRequest.Status.COMPLETED).order_by("line")
    for r in qs.values(
        "pk",
        "line",
        "custom_id",
        "model_id",
        "tier_id",
        "input_tokens",
        "output_tokens",
        "turns",
        "started_at",
        "finished_at",
        "simulated",
        "cost",
        "rerouted_from",
        "request",
    ).iterator(chunk_size=2000):
        body = body_of(r, models, tiers)
        body["deadline_met"] = line_in_time(batch, r["finished_at"])
        yield json.dumps(
            {
                "id": f"batch_req_{r['pk']}",
                "custom_id": r["custom_id"],
                "response": {
                    "status_code": 200,
                    "request_id": f"req_{batch.pk.hex[:12]}_{r['line']}",
                    "body": body,
                },
                "error": None,
            }
        ).encode()


def line_in_time(batch: Batch, finished_at) -> bool | None:
    """A batch line's deadline is its batch's completion window: met when it finished
    by the window's end."""
    if finished_at is None or batch.expires_at is None:
        return None
    return finished_at <= batch.expires_at


def batch_outcome(batch: Batch) -> dict:
    """The batch's promise and outcome: the share of its lines completed within the
    window, and whether the whole batch completed within it (null while it runs)."""
    total = batch.total or 0
    ended = batch.status in Batch.TERMINAL
    window_met = None
    if ended:
        window_met = (
            batch.status == Batch.Status.COMPLETED
            and batch.completed_at is not None
            and batch.completed_at <= batch.expires_at
            and batch.failed == 0
        )
    return {
        "lines_in_time": batch.completed,
        "share_in_time": (batch.completed / total) if total else None,
        "window_met": window_met,
    }


def _result_body(r: dict, models: dict[int, str], tiers: dict[int, str]) -> dict:
    """The `job.result` of one completed request (a row of output_lines' query)."""
    body = {
        "object": "job.result",
        "model": (r["request"].get("body") or {}).get("model"),
        "served_model": models.get(r["model_id"]),
        "service_tier": tiers.get(r["tier_id"]),
        "usage": {
            "input_tokens": r["input_tokens"],
            "output_tokens": r["output_tokens"],
            "turns": r["turns"],
        },
        "started_at": iso(r["started_at"]),
        "finished_at": iso(r["finished_at"]),
        "simulated": r["simulated"],
        "cost": str(r["cost"]),
        "output": {
            "simulated": True,
            "tokens": r["output_tokens"],
            "excerpt": synthetic_text(r["pk"], min(r["output_tokens"], EXCERPT_WORDS)),
        },
    }
    if r["rerouted_from"]:
        body["rerouted_from"] = r["rerouted_from"]
    return body


def _extra(r: dict) -> dict:
    """Our members on an OpenAI object: the model asked for, a re-route (the cost is in
    `usage.cost`, and as a string in `cost`)."""
    extra = {"requested_model": (r["request"].get("body") or {}).get("model")}
    if r["rerouted_from"]:
        extra["rerouted_from"] = r["rerouted_from"]
    return extra


def _chat_body(r: dict, models: dict[int, str], tiers: dict[int, str]) -> dict:
    """The `chat.completion` of one completed /v1/chat/completions request."""
    body = openai_shapes.chat_completion(
        id=f"chatcmpl-{r['pk']}",
        created=openai_shapes.unix(r["finished_at"]),
        model=models.get(r["model_id"]),
        service_tier=openai_shapes.service_tier_word(tiers.get(r["tier_id"])),
        tier=tiers.get(r["tier_id"]),
        text=synthetic_text(r["pk"], min(r["output_tokens"], EXCERPT_WORDS)),
        prompt_tokens=r["input_tokens"],
        completion_tokens=r["output_tokens"],
        cost=r["cost"],
        **_extra(r),
    )
    return body | {"cost": str(r["cost"])}


def _response_body(r: dict, models: dict[int, str], tiers: dict[int, str]) -> dict:
    """The `response` of one completed /v1/responses request."""
    body = openai_shapes.response_object(
        id=f"resp_{r['pk']}",
        created=openai_shapes.unix(r["started_at"] or r["finished_at"]),
        model=models.get(r["model_id"]),
        service_tier=openai_shapes.service_tier_word(tiers.get(r["tier_id"])),
        tier=tiers.get(r["tier_id"]),
        text=synthetic_text(r["pk"], min(r["output_tokens"], EXCERPT_WORDS)),
        input_tokens=r["input_tokens"],
        output_tokens=r["output_tokens"],
        cost=r["cost"],
        **_extra(r),
    )
    return body | {"cost": str(r["cost"])}


# The body of an output line by the batch's endpoint (anything else: a job.result).
BODIES = {"/v1/chat/completions": _chat_body, "/v1/responses": _response_body}


def error_lines(batch: Batch) -> Iterator[bytes]:
    """One line per request that did not complete: its code, message and line number."""
    qs = batch.requests.exclude(status=BatchRequest.Status.COMPLETED).order_by("line")
    for r in qs.values("pk", "line", "custom_id", "status", "error").iterator(chunk_size=2000):
        err = dict(
            r["error"] or {"code": r["status"], "message": f"The request was {r['status']}."}
        )
        err["line"] = r["line"]
        yield json.dumps(
            {
                "id": f"batch_req_{r['pk']}",
                "custom_id": r["custom_id"],
                "response": None,
                "error": err,
            }
        ).encode()

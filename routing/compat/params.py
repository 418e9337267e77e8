"""The body of POST /v1/chat/completions and POST /v1/responses, read into what the
service takes (model, task shape, tier, deadline). Every bad value is a 400 naming the
parameter (`Problem` with `parameter`, re-rendered as OpenAI's `error.param`).

Rules (documented in the README's compatibility table):

- input tokens: the messages' (or `input`'s) text by the one token rule,
  routing.core.openai_shapes.tokens_of (ceil(characters / 4));
- output tokens: `max_completion_tokens` or `max_tokens` (chat), `max_output_tokens`
  (responses); openai_shapes.DEFAULT_OUTPUT_TOKENS (1024) when absent or null: one rule with batch
  lines, routing.core.openai_shapes.request_shape;
- `service_tier`: auto, default (= standard), flex, priority, ultrafast (and our
  standard, fast); absent, or auto without a deadline, takes the account's defaults
  (routing.accounts.defaults: Standard unless the account set another);
- the deadline (simulated seconds): `deadline_seconds` in the body (the SDK's
  `extra_body`) or the `X-Deadline-Seconds` header;
- model "auto" chooses among models by a task class: `task` in the body
  (e.g. "swe-bench-pro");
- `models` (OpenRouter's shape): fallback models tried in order after `model`
  (routing.jobs.interactive), at most MAX_FALLBACKS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rest_framework.exceptions import UnsupportedMediaType

from httpedge.problems import Problem
from routing.core import jsonsafe, openai_shapes
from routing.core.formats import cut
from routing.core.limits import (
    MAX_DEADLINE_SECONDS,
    MIN_DEADLINE_SECONDS,
    tier_word,
)
from routing.router.route import RouteRequest

DEADLINE_HEADER = "X-Deadline-Seconds"
METADATA_MAX_PAIRS = 16
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512
USER_MAX = 256
MAX_FALLBACKS = 5


def invalid(message: str, param: str | None = None) -> Problem:
    return Problem(
        status_code=400,
        slug="invalid-request",
        title="Invalid request",
        detail=message,
        **({"parameter": param} if param else {}),
    )


@dataclass
class Interactive:
    """A chat completion or response request, validated."""

    model: str
    prompt: str
    input_tokens: int
    output_tokens: int
    tier: str | None
    service_tier: str | None  # the word the client sent (None when absent)
    deadline_seconds: float | None
    task: str | None
    stream: bool
    include_usage: bool
    metadata: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    limit_sent: bool = True  # the body set the output limit (else the default)
    answer: dict | None = None  # what decides the answer (honour.Honoured.fingerprint)
    fallbacks: list[str] = field(default_factory=list)

    def route_request(self) -> RouteRequest:
        return RouteRequest(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            turns=1,
            tool_seconds=0.0,
            deadline_seconds=self.deadline_seconds or MAX_DEADLINE_SECONDS,
            tier=self.tier,
            task=self.task,
        )

    def payload(self, endpoint: str) -> dict[str, Any]:
        """What the job records of the request (its fingerprint)."""
        return {
            "endpoint": endpoint,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "service_tier": self.service_tier,
            "deadline_seconds": self.deadline_seconds,
            "task": self.task,
            "stream": self.stream,
            "include_usage": self.include_usage,
            "metadata": self.metadata,
            "user": self.user,
            "answer": self.answer,
            **({"models": self.fallbacks} if self.fallbacks else {}),
        }


def body_of(raw: bytes, content_type: str = "application/json") -> dict:
    """The request body: a JSON object within jsonsafe's bounds, sent as
    `application/json` (any charset parameter): another Content-Type is a 415, as on
    every JSON endpoint (the openai SDK, and LangChain and LiteLLM through it, always
    send application/json)."""
    if not raw:
        raise invalid("The request body must be a JSON object.")
    if content_type.strip().lower() != "application/json":
        raise UnsupportedMediaType(cut(content_type or "(none)", 80))
    try:
        body = jsonsafe.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise invalid("The request body is not UTF-8.") from None
    except jsonsafe.UnsafeJSON as exc:
        raise invalid(f"JSON parse error - {exc}", exc.path) from None
    except ValueError as exc:
        raise invalid(f"JSON parse error - {exc}") from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def _int(body: dict, name: str, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(f"{name} must be an integer from {lo} to {hi}.", name)
    return value


def _bool(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false.", name)
    return value


def deadline_of(body: dict, headers) -> float | None:
    value: Any = body.get("deadline_seconds")
    param = "deadline_seconds"
    if value is None and headers.get(DEADLINE_HEADER) is not None:
        param = DEADLINE_HEADER
        try:
            value = float(headers[DEADLINE_HEADER])
        except ValueError:
            raise invalid(f"{DEADLINE_HEADER} must be a number of seconds.", param) from None
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not MIN_DEADLINE_SECONDS <= value <= MAX_DEADLINE_SECONDS
    ):
        raise invalid(
            f"{param} must be a number of seconds from {MIN_DEADLINE_SECONDS:g} to "
            f"{MAX_DEADLINE_SECONDS:g}.",
            param,
        )
    return float(value)


def _tier(body: dict) -> tuple[str | None, str | None]:
    word = body.get("service_tier")
    if word is None:
        return None, None
    if not isinstance(word, str):
        raise invalid("service_tier must be a string.", "service_tier")
    try:
        return tier_word(word), word.strip().lower()
    except ValueError as exc:
        raise invalid(str(exc), "service_tier") from None


def _metadata(body: dict) -> dict[str, str]:
    meta = body.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict) or len(meta) > METADATA_MAX_PAIRS:
        raise invalid(
            f"metadata must be an object of at most {METADATA_MAX_PAIRS} pairs.", "metadata"
        )
    for k, v in meta.items():
        if len(k) > METADATA_KEY_MAX or not isinstance(v, str) or len(v) > METADATA_VALUE_MAX:
            raise invalid(
                f"metadata keys are at most {METADATA_KEY_MAX} characters and values strings "
                f"of at most {METADATA_VALUE_MAX}.",
                "metadata",
            )
    return meta


def _shape(endpoint: str, body: dict) -> openai_shapes.RequestShape:
    try:
        return openai_shapes.request_shape(endpoint, body)
    except openai_shapes.ShapeError as exc:
        raise invalid(str(exc), exc.param) from None


def _fallbacks(body: dict) -> list[str]:
    models = body.get("models")
    if models is None:
        return []
    if (
        not isinstance(models, list)
        or len(models) > MAX_FALLBACKS
        or not all(isinstance(m, str) and m.strip() and len(m) <= 80 for m in models)
    ):
        raise invalid(
            f"models must be a list of at most {MAX_FALLBACKS} model ids or aliases "
            "(fallbacks tried in order).",
            "models",
        )
    return [m.strip() for m in models]


def _common(body: dict, headers, shape: openai_shapes.RequestShape) -> Interactive:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("model is required: a model id, a family alias, or 'auto'.", "model")
    tier, word = _tier(body)
    task = body.get("task")
    if task is not None and (not isinstance(task, str) or not task.strip()):
        raise invalid("task must be a benchmark name, e.g. 'swe-bench-pro'.", "task")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > USER_MAX):
        raise invalid(f"user must be a string of at most {USER_MAX} characters.", "user")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("stream_options must be an object.", "stream_options")
    stream = _bool(body, "stream")
    include_usage = _bool(options or {}, "include_usage")
    if options is not None and not stream:
        raise invalid("stream_options is only allowed with stream: true.", "stream_options")
    return Interactive(
        model=model.strip(),
        prompt=shape.prompt,
        input_tokens=shape.input_tokens,
        output_tokens=shape.output_tokens,
        tier=tier,
        service_tier=word,
        deadline_seconds=deadline_of(body, headers),
        task=task.strip() if task else None,
        stream=stream,
        include_usage=include_usage,
        metadata=_metadata(body),
        user=user,
        limit_sent=shape.limit_sent,
        fallbacks=_fallbacks(body),
    )


def chat_request(body: dict, headers) -> Interactive:
    """POST /v1/chat/completions."""
    shape = _shape(openai_shapes.CHAT, body)
    n = _int(body, "n", 1, 1_000_000)
    if n is not None and n != 1:
        raise invalid("Only n = 1 is supported (one choice per request).", "n")
    return _common(body, headers, shape)


def responses_request(body: dict, headers) -> Interactive:
    """POST /v1/responses (`input`: a string or messages; `instructions` counted too)."""
    if body.get("input") is None:
        raise invalid("input is required: a string or a list of messages.", "input")
    shape = _shape(openai_shapes.RESPONSES, body)
    if body.get("background"):
        raise invalid("background responses are not supported; use stream.", "background")
    return _common(body, headers, shape)

"""OpenAI's object shapes, for the OpenAI-compatible surface (`routing.compat`) and for
batch output lines whose endpoint is /v1/chat/completions or /v1/responses: one
builder per object, so the live endpoint and the batch file answer alike.

Input tokens of chat messages are counted by one documented rule that needs no
tokenizer download: the characters of every message's text (string content, or the
`text` of its content parts), divided by CHARS_PER_TOKEN and rounded up, at least 1.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from routing.core.limits import MAX_PROMPT_CHARS, MAX_TASK_TOKENS

CHARS_PER_TOKEN = 4
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
# Output tokens of a request that names none (live requests and batch lines alike).
DEFAULT_OUTPUT_TOKENS = 1024


def unix(at: dt.datetime | None) -> int | None:
    """A time as Unix seconds (OpenAI's timestamps), None stays None."""
    return int(at.timestamp()) if at is not None else None


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    raise ValueError(f"{where}.content must be a string or a list of parts.")


def _tool_text(m: dict) -> list[str]:
    """The text of tool traffic in a conversation, counted as input too: an assistant
    message's tool calls (chat), a function call or its output (responses items)."""
    out = []
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        for c in calls:
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict):
                out.append(str(fn.get("name", "")) + str(fn.get("arguments", "")))
    if m.get("type") == "function_call":
        out.append(str(m.get("name", "")) + str(m.get("arguments", "")))
    if m.get("type") == "function_call_output":
        out.append(str(m.get("output", "")))
    return out


def ends_with_tool_result(messages: Any) -> bool:
    """The conversation's last message is a tool's result (chat `role: tool`, responses
    `function_call_output`): the model answers it (in text, unless told to call)."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    return last.get("role") == "tool" or last.get("type") == "function_call_output"


def messages_text(messages: Any, where: str = "messages") -> str:
    """The text of chat messages (ValueError naming `where` when they are malformed or
    over MAX_PROMPT_CHARS characters)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where} must be a non-empty list.")
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError(f"{where}[] must be objects with a role and content.")
        parts.append(_content_text(m.get("content"), f"{where}[]"))
        parts.extend(_tool_text(m))
    text = "".join(parts)
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"{where} may hold at most {MAX_PROMPT_CHARS} characters.")
    return text


def input_text(value: Any, where: str = "input") -> str:
    """The text of a Responses API `input`: a string or a list of messages."""
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{where} must not be empty.")
        if len(value) > MAX_PROMPT_CHARS:
            raise ValueError(f"{where} may hold at most {MAX_PROMPT_CHARS} characters.")
        return value
    return messages_text(value, where)


def tokens_of(text: str) -> int:
    """The documented token rule: ceil(characters / 4), at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


class ShapeError(ValueError):
    """A request body that has no task shape; `param` names the field at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class RequestShape:
    """What an OpenAI request asks of the service: its prompt's text, and its input and
    output tokens."""

    prompt: str
    input_tokens: int
    output_tokens: int
    limit_sent: bool = False  # the client gave the output limit (else the default)


def _max_tokens(body: dict, name: str, where: str) -> int | None:
    value = body.get(name)
    if value is None:  # absent or null: the next rule
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TASK_TOKENS:
        raise ShapeError(f"{where}{name} must be an integer from 1 to {MAX_TASK_TOKENS}.", name)
    return value


def request_shape(endpoint: str, body: dict, *, where: str = "") -> RequestShape:
    """The task shape of an OpenAI body, one rule for live requests (routing.compat.params)
    and batch lines (routing.batches.validation; `where` "body." prefixes the names in
    their messages):

    - /v1/chat/completions: the messages' text; `max_completion_tokens`, else
      `max_tokens`, else DEFAULT_OUTPUT_TOKENS (null counts as absent);
    - /v1/responses: `instructions` (a string) then `input`'s text; `max_output_tokens`,
      else DEFAULT_OUTPUT_TOKENS.

    Input tokens by `tokens_of`. ShapeError (a ValueError) names the field at fault."""
    if endpoint == RESPONSES:
        try:
            prompt = input_text(body.get("input"), f"{where}input")
        except ValueError as exc:
            raise ShapeError(str(exc), "input") from None
        instructions = body.get("instructions")
        if instructions is not None:
            if not isinstance(instructions, str):
                raise ShapeError(f"{where}instructions must be a string.", "instructions")
            prompt = instructions + prompt
        out = _max_tokens(body, "max_output_tokens", where)
    elif endpoint == CHAT:
        try:
            prompt = messages_text(body.get("messages"), f"{where}messages")
        except ValueError as exc:
            raise ShapeError(str(exc), "messages") from None
        out = _max_tokens(body, "max_completion_tokens", where)
        if out is None:
            out = _max_tokens(body, "max_tokens", where)
    else:
        raise ValueError(f"{endpoint} is not an OpenAI endpoint with a task shape.")
    return RequestShape(prompt, tokens_of(prompt), out or DEFAULT_OUTPUT_TOKENS, out is not None)


def usage_cost(usage: dict, cost) -> dict:
    """`usage` with the request's charge as `cost`, a number in credits (as OpenRouter
    sends it; 1 credit = 1 USD of list price); unchanged while nothing is charged yet
    (`cost` None)."""
    if cost is not None:
        usage["cost"] = float(cost)
    return usage


def usage_chat(prompt_tokens: int, completion_tokens: int, cost=None) -> dict:
    """A chat completion's `usage`, with `cost` (credits) once charged."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return usage_cost(usage, cost)


def chat_completion(
    *,
    id: str,
    created: int,
    model: str,
    service_tier: str,
    text: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish_reason: str = "stop",
    tool_calls: list[dict] | None = None,
    cost=None,
    **extra: Any,
) -> dict:
    """A `chat.completion` object (the text is simulated: `simulated: true`); with
    `tool_calls` (OpenAI's `{"id", "type": "function", "function": {...}}`) its content
    is null; `cost`: the charge, in `usage.cost`."""
    message = {"role": "assistant", "content": None if tool_calls else text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "service_tier": service_tier,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage_chat(prompt_tokens, completion_tokens, cost),
        "simulated": True,
        **extra,
    }


def chat_chunk(
    *,
    id: str,
    created: int,
    model: str,
    service_tier: str,
    delta: dict,
    finish_reason: str | None = None,
    usage: dict | None = None,
    choices: bool = True,
) -> dict:
    """A `chat.completion.chunk` (the final usage chunk has `choices: []`)."""
    chunk = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "service_tier": service_tier,
        "system_fingerprint": None,
        "choices": (
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
            if choices
            else []
        ),
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def response_object(
    *,
    id: str,
    created: int,
    model: str,
    service_tier: str,
    text: str,
    input_tokens: int,
    output_tokens: int,
    status: str = "completed",
    output: list[dict] | None = None,
    cost=None,
    **extra: Any,
) -> dict:
    """A Responses API `response` object with one assistant output message (or the
    `output` items given: function calls); `cost`: the charge, in `usage.cost`."""
    if output is None:
        output = [
            {
                "type": "message",
                "id": f"msg_{id.removeprefix('resp_')}",
                "status": status,
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    return {
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "service_tier": service_tier,
        "output": output,
        "usage": usage_cost(
            {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
            cost,
        ),
        "error": None,
        "incomplete_details": None,
        "simulated": True,
        **extra,
    }


# Our tier slug -> the `service_tier` word of OpenAI's objects. Standard is OpenAI's
# "default" (the SDK's ChatCompletion model refuses "standard"); flex and priority are
# the same words; ultrafast is ours (the Responses model knows it; a strict
# ChatCompletion.model_validate does not). The slug itself is in the `tier` member.
OPENAI_TIER_WORDS = {"standard": "default"}


def service_tier_word(tier_slug: str | None) -> str | None:
    """The `service_tier` an OpenAI object shows for the tier that served it."""
    return OPENAI_TIER_WORDS.get(tier_slug, tier_slug) if tier_slug else tier_slug

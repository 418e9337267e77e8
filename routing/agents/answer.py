"""The simulated model's answer to one request: plain text, a JSON document (structured
output) or tool calls, planned before the job is booked (its output tokens are what is
generated, so the quote, the timing and the charge all count them).

- text: the filler words (routing.core.synthetic), one token per word: with an output
  limit sent, as many as it allows (finish_reason `length`); without, the natural
  length (1,024 words, or by `verbosity`; finish_reason `stop`); cut before the first
  `stop` sequence (finish_reason `stop`).
- json: an instance of the schema (json_schema) or a small object (json_object),
  serialised compactly; tokens by the one token rule (ceil(characters / 4)). Over the
  limit it is cut (finish_reason `length`, as OpenAI does: the JSON is then invalid).
- tool_calls: one call per chosen function (several when parallel_tool_calls allows),
  arguments an instance of the function's `parameters`; tokens by the same rule.

The same request gives the same JSON and the same calls (seeded by the request); text
is seeded by the request when `seed` is sent or temperature is 0, by the job's id
otherwise.

`stored()` is what the job keeps (Job.answer) and `from_stored` rebuilds the answer from
it, so a replay, a retrieve or a stream sends exactly what was booked."""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

from routing.agents.generate import instance
from routing.core.openai_shapes import CHARS_PER_TOKEN
from routing.core.synthetic import synthetic_text

JSON_OBJECT_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "minLength": 1, "maxLength": 200},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}
MAX_PARALLEL_CALLS = 2


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict  # a JSON Schema object ({} when the function takes none)


@dataclass
class AnswerRequest:
    """What decides the answer, read and checked by routing.compat.params."""

    limit: int  # output tokens at most
    seed: int  # seeds JSON and tool calls (and text when deterministic)
    text_seed: int  # seeds the filler text (the request's, or the job id's)
    limit_sent: bool = True  # the client set the limit (else the natural length)
    tools: list[Tool] = field(default_factory=list)
    tool_choice: str | None = None  # none | auto | required | the name of a function
    parallel: bool = True
    after_tool: bool = False  # the conversation ends with tool results
    json_schema: dict | None = None  # structured output: the schema
    json_where: str = "response_format"
    stop: list[str] = field(default_factory=list)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str

    def json(self) -> dict:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass
class Answer:
    kind: str  # text | json | tool_calls
    tokens: int
    finish_reason: str  # stop | length | tool_calls
    text: str = ""  # json: the document; text: filled in from the seed (`text_of`)
    seed: int | None = None  # text: the filler's seed (None: the job's id)
    chars: int | None = None  # text: cut to this many characters (a stop sequence)
    calls: list[ToolCall] = field(default_factory=list)

    def stored(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "finish_reason": self.finish_reason}
        if self.kind == "text":
            out.update(seed=None if self.seed is None else str(self.seed), chars=self.chars)
        elif self.kind == "json":
            out["text"] = self.text
        else:
            out["calls"] = [c.json() for c in self.calls]
        return out

    @classmethod
    def from_stored(cls, data: dict, tokens: int) -> Answer:
        seed = data.get("seed")
        return cls(
            kind=data["kind"],
            tokens=tokens,
            finish_reason=data.get("finish_reason", "stop"),
            text=data.get("text", ""),
            seed=int(seed) if seed is not None else None,
            chars=data.get("chars"),
            calls=[ToolCall(**c) for c in data.get("calls", [])],
        )

    def text_of(self, job_seed: int) -> str:
        """The answer's text (the filler for a text answer, seeded by the job when the
        answer has no seed of its own)."""
        if self.kind != "text":
            return self.text
        if not self.tokens:
            return ""
        words = synthetic_text(self.seed if self.seed is not None else job_seed, self.tokens)
        return words[: self.chars] if self.chars is not None else words

    def pieces(self, job_seed: int) -> list[tuple[int | None, str]]:
        """The answer token by token, as (tool call index or None for content, text):
        exactly `tokens` pieces whose texts, joined, give the content or each call's
        arguments. A stream sends them in order."""
        if self.kind == "tool_calls":
            return [(i, p) for i, c in enumerate(self.calls) for p in _chunks(c.arguments)]
        text = self.text_of(job_seed)
        if self.kind == "json":
            return [(None, p) for p in _chunks(text)]
        words = text.split(" ") if text else []
        return [(None, w if i == 0 else " " + w) for i, w in enumerate(words)]


def _chunks(text: str) -> list[str]:
    return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)] or [""]


def tokens_of_generated(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def request_seed(*parts: Any) -> int:
    """A seed from the parts of a request that decide its answer (canonical JSON)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "big")


def plan(req: AnswerRequest) -> Answer:
    """The answer to `req` (SchemaError when a schema has no instance we can find)."""
    if req.tools and _calls_tools(req):
        return _tool_calls(req)
    if req.json_schema is not None:
        doc = json.dumps(instance(req.json_schema, req.seed, req.json_where), separators=(",", ":"))
        return _cut_json(doc, req.limit)
    return _text(req)


def _calls_tools(req: AnswerRequest) -> bool:
    choice = req.tool_choice or "auto"
    if choice == "none":
        return False
    if choice == "auto":
        return not req.after_tool
    return True  # required, or a named function


def _tool_calls(req: AnswerRequest) -> Answer:
    rng = random.Random(req.seed)
    choice = req.tool_choice or "auto"
    if choice not in ("auto", "required", "none"):
        chosen = [t for t in req.tools if t.name == choice][:1]
    else:
        most = min(len(req.tools), MAX_PARALLEL_CALLS if req.parallel else 1)
        chosen = rng.sample(req.tools, rng.randint(1, most))
    calls = []
    for i, tool in enumerate(chosen):
        args = instance(tool.parameters, req.seed + i, f"tools[{tool.name}].parameters")
        if not isinstance(args, dict):
            args = {}
        calls.append(
            ToolCall(
                id=f"call_{rng.getrandbits(96):024x}",
                name=tool.name,
                arguments=json.dumps(args, separators=(",", ":")),
            )
        )
    tokens = sum(tokens_of_generated(c.arguments) for c in calls)
    if tokens <= req.limit:
        return Answer("tool_calls", tokens, "tool_calls", calls=calls)
    # Over the limit: the arguments are cut where the limit falls (as a real model's).
    left, kept = req.limit, []
    for c in calls:
        n = tokens_of_generated(c.arguments)
        if left <= 0:
            break
        if n > left:
            c = ToolCall(c.id, c.name, c.arguments[: left * CHARS_PER_TOKEN])
            n = left
        kept.append(c)
        left -= n
    return Answer("tool_calls", req.limit, "length", calls=kept)


def _cut_json(doc: str, limit: int) -> Answer:
    tokens = tokens_of_generated(doc)
    if tokens <= limit:
        return Answer("json", tokens, "stop", text=doc)
    return Answer("json", limit, "length", text=doc[: limit * CHARS_PER_TOKEN])


def _text(req: AnswerRequest) -> Answer:
    seed = req.text_seed
    ends = "length" if req.limit_sent else "stop"
    if not req.stop:
        return Answer("text", req.limit, ends, seed=seed)
    full = synthetic_text(seed, req.limit)
    at = min((i for i in (full.find(s) for s in req.stop) if i >= 0), default=-1)
    if at < 0:
        return Answer("text", req.limit, ends, seed=seed)
    # The words begun before the stop sequence; an immediate stop still generated one
    # token (the stop itself), so the answer is empty and counts 1.
    words = max(1, len(full[:at].split(" ")) if at > 0 else 0)
    return Answer("text", words, "stop", seed=seed, chars=at)

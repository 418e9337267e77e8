"""Every parameter of POST /v1/chat/completions and POST /v1/responses, in one table:
honoured (with what it does) or refused (a 400 naming it). The table drives the
validation here and the README's table (`markdown_table`, checked by a test), and a test
sends each parameter (tests/routing/compat/test_honour.py). A parameter the table does
not know is refused, as OpenAI refuses an unrecognised argument.

The OpenAI body -> task shape (model, messages, tokens, tier, deadline) stays in
routing.compat.params; this module reads the rest: what decides the answer
(routing.agents) and the parameters the simulated model cannot honour."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from routing.agents.answer import Tool
from routing.agents.schemas import SchemaError, check
from routing.compat.params import invalid

CHAT, RESPONSES, BOTH = "chat", "responses", "both"
HONOURED, REFUSED = "honoured", "refused"
STOP_MAX = 4  # stop sequences (OpenAI's limit)
STOP_CHARS = 256
TOOLS_MAX = 128  # functions per request (OpenAI's limit)
NAME_CHARS = 64
# The default output length when no limit is sent, by `verbosity` (absent: medium).
VERBOSITY_TOKENS = {"low": 256, "medium": 1024, "high": 2048}


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # chat | responses | both
    verdict: str  # honoured | refused
    rule: str  # what it does (honoured) or when it is refused


TABLE: tuple[Param, ...] = (
    Param("model", BOTH, HONOURED, "a model id, a family alias (`sol`) or `auto` with `task`"),
    Param("messages", CHAT, HONOURED, "counted as input tokens; tool results make the answer text"),
    Param("input", RESPONSES, HONOURED, "a string or items; counted as input tokens"),
    Param("instructions", RESPONSES, HONOURED, "counted as input tokens; echoed"),
    Param("stream", BOTH, HONOURED, "server-sent events paced by the tier's speed"),
    Param("stream_options", BOTH, HONOURED, "`include_usage` (chat); only with `stream`"),
    Param("service_tier", BOTH, HONOURED, "auto, default, flex, priority, ultrafast"),
    Param("max_tokens", CHAT, HONOURED, "the output limit; `finish_reason: length` when hit"),
    Param("max_completion_tokens", CHAT, HONOURED, "as `max_tokens` (preferred)"),
    Param("max_output_tokens", RESPONSES, HONOURED, "the output limit; `incomplete` when hit"),
    Param("n", CHAT, HONOURED, "1 only; any other value is refused"),
    Param("temperature", BOTH, HONOURED, "0 to 2 (else 400); 0 makes the text reproducible"),
    Param("top_p", BOTH, HONOURED, "0 to 1 (else 400); 0 makes the text reproducible"),
    Param("seed", CHAT, HONOURED, "the same seed and request give the same answer"),
    Param("stop", CHAT, HONOURED, "up to 4 strings; the text is cut before the first found"),
    Param("tools", BOTH, HONOURED, "function tools: calls with arguments valid under `parameters`"),
    Param("tool_choice", BOTH, HONOURED, "none, auto, required, or a named function"),
    Param("parallel_tool_calls", BOTH, HONOURED, "false: at most one call (true: up to 2)"),
    Param("max_tool_calls", RESPONSES, HONOURED, "at most this many calls"),
    Param("response_format", CHAT, HONOURED, "text, json_object, json_schema (and strict)"),
    Param("text", RESPONSES, HONOURED, "`format` as response_format; `verbosity`"),
    Param("verbosity", CHAT, HONOURED, "low, medium, high: the default length (256/1024/2048)"),
    Param("metadata", BOTH, HONOURED, "up to 16 pairs; echoed"),
    Param("user", BOTH, HONOURED, "up to 256 characters; echoed"),
    Param("safety_identifier", BOTH, HONOURED, "up to 64 characters; echoed"),
    Param("prompt_cache_key", BOTH, HONOURED, "up to 64 characters; echoed"),
    Param("store", BOTH, HONOURED, "responses: kept 30 days for retrieve; chat: false only"),
    Param("previous_response_id", RESPONSES, HONOURED, "the stored response's conversation"),
    Param("truncation", RESPONSES, HONOURED, "`disabled` only: an over-long input is a 400"),
    Param("include", RESPONSES, REFUSED, "any value but an empty list (no logprobs, no reasoning)"),
    Param("logprobs", CHAT, REFUSED, "`true` (the simulated model has no token distribution)"),
    Param("top_logprobs", BOTH, REFUSED, "any value but 0"),
    Param("logit_bias", CHAT, REFUSED, "any value but an empty object"),
    Param("frequency_penalty", CHAT, REFUSED, "any value but 0 (-2 to 2 checked first)"),
    Param("presence_penalty", CHAT, REFUSED, "any value but 0 (-2 to 2 checked first)"),
    Param("reasoning_effort", CHAT, REFUSED, "any value (the simulated models do not reason)"),
    Param("reasoning", RESPONSES, REFUSED, "any value (the simulated models do not reason)"),
    Param("modalities", CHAT, REFUSED, 'anything but `["text"]`'),
    Param("audio", CHAT, REFUSED, "any value (text only)"),
    Param("prediction", CHAT, REFUSED, "any value"),
    Param("web_search_options", CHAT, REFUSED, "any value (no web search)"),
    Param("functions", CHAT, REFUSED, "any value (deprecated: use `tools`)"),
    Param("function_call", CHAT, REFUSED, "any value (deprecated: use `tool_choice`)"),
    Param("background", RESPONSES, REFUSED, "`true` (use `stream`)"),
    Param("background_options", RESPONSES, REFUSED, "any value"),
    Param("conversation", RESPONSES, REFUSED, "any value (use `previous_response_id`)"),
    Param("prompt", RESPONSES, REFUSED, "any value (no stored prompt templates)"),
    Param("context_management", RESPONSES, REFUSED, "any value"),
    Param("access_programs", RESPONSES, REFUSED, "any value"),
    Param("image", RESPONSES, REFUSED, "any value (text only)"),
    Param("moderation", BOTH, REFUSED, "any value"),
    Param("prompt_cache_retention", BOTH, REFUSED, "any value"),
    Param("prompt_cache_options", BOTH, REFUSED, "any value"),
    Param("deadline_seconds", BOTH, HONOURED, "ours: the deadline (or `X-Deadline-Seconds`)"),
    Param("task", BOTH, HONOURED, "ours: the benchmark `auto` chooses by"),
    Param(
        "models",
        BOTH,
        HONOURED,
        "fallbacks, OpenRouter's shape: tried in order when a model is retired, out of quota, rate-limited or cannot meet the deadline",
    ),
)
BY_NAME = {
    (p.name, e): p for p in TABLE for e in ((CHAT, RESPONSES) if p.where == BOTH else (p.where,))
}


def markdown_table() -> str:
    """The README's table: one row per parameter."""
    rows = ["| parameter | chat | responses | verdict: what it does, or when it is refused |"]
    rows.append("| --- | --- | --- | --- |")
    for p in TABLE:
        chat = "yes" if p.where in (CHAT, BOTH) else ""
        resp = "yes" if p.where in (RESPONSES, BOTH) else ""
        rows.append(f"| `{p.name}` | {chat} | {resp} | {p.verdict}: {p.rule} |")
    return "\n".join(rows)


@dataclass
class Honoured:
    """What the body asks of the answer, checked."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    tool_choice: str | None = None
    parallel: bool = True
    max_tool_calls: int | None = None
    json_schema: dict | None = None  # structured output (json_object: a fixed schema)
    json_kind: str = "text"  # text | json_object | json_schema
    json_name: str | None = None
    json_where: str = "response_format"
    verbosity: str | None = None
    store: bool = True
    previous_response_id: str | None = None
    echo: dict = field(default_factory=dict)  # echoed on the answer

    @property
    def deterministic(self) -> bool:
        """Text seeded by the request (not by the job)."""
        return self.seed is not None or self.temperature == 0 or self.top_p == 0

    def fingerprint(self) -> dict:
        return {
            "seed": self.seed,
            "stop": self.stop,
            "tools": [(t.name, t.parameters) for t in self.tools],
            "tool_choice": self.tool_choice,
            "parallel": self.parallel,
            "max_tool_calls": self.max_tool_calls,
            "json": [self.json_kind, self.json_schema],
            "verbosity": self.verbosity,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "store": self.store,
            "previous_response_id": self.previous_response_id,
        }


def _number(body, name, lo, hi) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(f"{name} must be a number from {lo:g} to {hi:g}.", name)
    if not lo <= v <= hi:
        raise invalid(f"{name} must be from {lo:g} to {hi:g} (got {v:g}).", name)
    return float(v)


def _string(body, name, most) -> str | None:
    v = body.get(name)
    if v is not None and (not isinstance(v, str) or len(v) > most):
        raise invalid(f"{name} must be a string of at most {most} characters.", name)
    return v


def _refuse(name: str, rule: str) -> None:
    raise invalid(f"{name} is not supported by the simulated models: refused when {rule}.", name)


def read(body: dict, endpoint: str) -> Honoured:
    """Check every parameter of `body` against the table for `endpoint` (chat or
    responses): 400 naming the first unknown or refused one, or an out-of-range value."""
    for name in body:
        if (name, endpoint) not in BY_NAME:
            raise invalid(
                f"Unrecognized request argument supplied: {str(name)[:64]} (see the "
                "README's parameter table).",
                str(name)[:64],
            )
    h = Honoured()
    _refused(body, endpoint)
    h.temperature = _number(body, "temperature", 0, 2)
    h.top_p = _number(body, "top_p", 0, 1)
    if endpoint == CHAT:
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise invalid("seed must be an integer.", "seed")
        h.seed = seed
        h.stop = _stop(body.get("stop"))
        if body.get("store") not in (None, False):
            _refuse("store", "true on chat completions (use /v1/responses to store)")
        h.store = False
    else:
        store = body.get("store")
        if store is not None and not isinstance(store, bool):
            raise invalid("store must be true or false.", "store")
        h.store = store is not False
        prev = _string(body, "previous_response_id", 80)
        h.previous_response_id = prev
        if body.get("truncation") not in (None, "disabled"):
            raise invalid("truncation must be 'disabled' (the only mode supported).", "truncation")
    for name, most in (("user", 256), ("safety_identifier", 64), ("prompt_cache_key", 64)):
        v = _string(body, name, most)
        if v is not None:
            h.echo[name] = v
    _tools(body, endpoint, h)
    _format(body, endpoint, h)
    if h.json_kind == "json_object" and not _mentions_json(body, endpoint):
        where = "response_format" if endpoint == CHAT else "text.format"
        raise invalid(
            f"'{'messages' if endpoint == CHAT else 'input'}' must contain the word 'json' in "
            f"some form, to use '{where}' of type 'json_object'.",
            where,
        )
    if h.verbosity is None and endpoint == CHAT:
        h.verbosity = _verbosity(body.get("verbosity"), "verbosity")
    return h


# What a refused parameter may still be: its default (absent, null, or these).
DEFAULTS: dict[str, tuple] = {
    "include": ([],),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "modalities": (["text"],),
    "background": (False,),
}


def _refused(body: dict, endpoint: str) -> None:
    for p in TABLE:
        if p.verdict != REFUSED or (p.name, endpoint) not in BY_NAME:
            continue
        if p.name in ("frequency_penalty", "presence_penalty"):
            _number(body, p.name, -2, 2)
        v = body.get(p.name)
        if v is None:
            continue
        if any(v == d and type(v) is type(d) for d in DEFAULTS.get(p.name, ())):
            continue
        if p.name in ("frequency_penalty", "presence_penalty") and v == 0:
            continue  # 0.0 as well as 0
        _refuse(p.name, p.rule)


def _stop(value) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > STOP_MAX
        or not all(isinstance(s, str) and 0 < len(s) <= STOP_CHARS for s in stops)
    ):
        raise invalid(
            f"stop must be a string or a list of at most {STOP_MAX} non-empty strings.", "stop"
        )
    return stops


def _verbosity(value, where: str) -> str | None:
    if value is not None and value not in VERBOSITY_TOKENS:
        raise invalid(f"{where} must be one of low, medium, high.", where)
    return value


def _schema(schema, where: str, strict: bool) -> dict:
    if schema is None:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise invalid(f"{where} must be a JSON Schema object.", where)
    try:
        check(schema, where, strict=strict)
    except SchemaError as exc:
        raise invalid(str(exc), exc.path) from None
    return schema


def _name(value, where: str) -> str:
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= NAME_CHARS
        or not all(c.isalnum() or c in "_-" for c in value)
    ):
        raise invalid(
            f"{where} must be 1 to {NAME_CHARS} letters, digits, underscores or dashes.", where
        )
    return value


def _tools(body: dict, endpoint: str, h: Honoured) -> None:
    tools = body.get("tools")
    if tools in (None, []):
        if body.get("tool_choice") not in (None, "none"):
            raise invalid("tool_choice is only allowed when 'tools' are specified.", "tool_choice")
        tools = []
    if not isinstance(tools, list) or len(tools) > TOOLS_MAX:
        raise invalid(f"tools must be a list of at most {TOOLS_MAX} tools.", "tools")
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            raise invalid(
                f"{where}.type {str(kind)[:40]!r} is not supported: only function tools.",
                f"{where}.type",
            )
        fn = t.get("function") if endpoint == CHAT else t
        if not isinstance(fn, dict):
            raise invalid(f"{where}.function must be an object.", f"{where}.function")
        prefix = f"{where}.function" if endpoint == CHAT else where
        name = _name(fn.get("name"), f"{prefix}.name")
        strict = fn.get("strict") is True
        params = _schema(fn.get("parameters"), f"{prefix}.parameters", strict)
        h.tools.append(Tool(name, params))
    if len({t.name for t in h.tools}) != len(h.tools):
        raise invalid("tools: function names must be unique.", "tools")
    choice = body.get("tool_choice")
    if choice is None or choice in ("none", "auto", "required"):
        h.tool_choice = choice
    elif isinstance(choice, dict) and choice.get("type") == "function":
        named = (
            (choice.get("function") or {}).get("name") if endpoint == CHAT else choice.get("name")
        )
        if named not in {t.name for t in h.tools}:
            raise invalid(
                f"tool_choice names {str(named)[:64]!r}, which is not one of the tools.",
                "tool_choice",
            )
        h.tool_choice = named
    else:
        raise invalid(
            "tool_choice must be none, auto, required or a function "
            "({'type': 'function', ...}); other kinds are not supported.",
            "tool_choice",
        )
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("parallel_tool_calls must be true or false.", "parallel_tool_calls")
    h.parallel = parallel is not False
    if endpoint == RESPONSES:
        most = body.get("max_tool_calls")
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
            raise invalid("max_tool_calls must be a positive integer.", "max_tool_calls")
        h.max_tool_calls = most


def _format(body: dict, endpoint: str, h: Honoured) -> None:
    if endpoint == CHAT:
        fmt, where = body.get("response_format"), "response_format"
        spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
    else:
        text = body.get("text")
        if text is not None and not isinstance(text, dict):
            raise invalid("text must be an object.", "text")
        text = text or {}
        for key in text:
            if key not in ("format", "verbosity"):
                raise invalid(f"text.{str(key)[:40]} is not supported.", f"text.{key}")
        h.verbosity = _verbosity(text.get("verbosity"), "text.verbosity")
        fmt, where = text.get("format"), "text.format"
        spec = fmt
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise invalid(
            f"{where}.type must be text, json_object or json_schema (got {str(kind)[:40]!r}).",
            f"{where}.type",
        )
    h.json_kind = kind
    h.json_where = where
    if kind == "json_object":
        from routing.agents.answer import JSON_OBJECT_SCHEMA

        h.json_schema = JSON_OBJECT_SCHEMA
    elif kind == "json_schema":
        spec_where = f"{where}.json_schema" if endpoint == CHAT else where
        if not isinstance(spec, dict):
            raise invalid(f"{spec_where} is required with type json_schema.", spec_where)
        h.json_name = _name(spec.get("name"), f"{spec_where}.name")
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise invalid(f"{spec_where}.strict must be true or false.", f"{spec_where}.strict")
        if spec.get("schema") is None:
            raise invalid(f"{spec_where}.schema is required.", f"{spec_where}.schema")
        h.json_schema = _schema(spec.get("schema"), f"{spec_where}.schema", strict is True)
        h.json_where = f"{spec_where}.schema"


def _mentions_json(body: dict, endpoint: str) -> bool:
    import json

    where = (
        body.get("messages") if endpoint == CHAT else [body.get("input"), body.get("instructions")]
    )
    return "json" in json.dumps(where, default=str).lower()

"""Every parameter of OpenAI's chat completions and responses references is in one table
(routing.compat.honour.TABLE, the README's table), and each is sent here and found
honoured (its effect checked) or refused (a 400 naming it): never silently ignored.
Also the tool calls and structured outputs in process (the live SDK and frameworks:
test_agents_sdk.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from asgiref.sync import async_to_sync
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params

from routing.agents.answer import AnswerRequest, Tool, plan
from routing.agents.generate import instance
from routing.agents.schemas import SchemaError, check
from routing.compat import honour
from routing.models import Job

pytestmark = pytest.mark.django_db
MESSAGES = [{"role": "user", "content": "Summarise the failing test in one line, in json."}]
README = Path(__file__).resolve().parents[3] / "README.md"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


def chat_tool(name="get_weather", params=WEATHER):
    return {"type": "function", "function": {"name": name, "parameters": params}}


def resp_tool(name="get_weather", params=WEATHER):
    return {"type": "function", "name": name, "parameters": params}


def send(api, endpoint, **body):
    if endpoint == "chat":
        return api.post_json("/v1/chat/completions", {"model": "sol", "messages": MESSAGES, **body})
    return api.post_json("/v1/responses", {"model": "sol", "input": MESSAGES, **body})


def streamed(r) -> bytes:
    async def collect(it):
        return b"".join([c async for c in it])

    return async_to_sync(collect)(r.streaming_content)


def ok(r) -> dict:
    assert r.status_code == 200, r.content
    return r.json()


def refused(r, param: str) -> None:
    assert r.status_code == 400, r.content
    assert r.json()["error"]["param"].split(".")[0].split("[")[0] == param, r.content


def text_of(endpoint, body) -> str:
    if endpoint == "chat":
        return body["choices"][0]["message"]["content"]
    return body["output"][0]["content"][0]["text"]


def calls_of(endpoint, body) -> list[tuple[str, dict]]:
    if endpoint == "chat":
        calls = body["choices"][0]["message"].get("tool_calls") or []
        return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    return [
        (i["name"], json.loads(i["arguments"]))
        for i in body["output"]
        if i["type"] == "function_call"
    ]


def out_tokens(endpoint, body) -> int:
    key = "completion_tokens" if endpoint == "chat" else "output_tokens"
    return body["usage"][key]


# -- the table ----------------------------------------------------------------------------


def test_the_readme_holds_the_table():
    assert honour.markdown_table() in README.read_text()


@pytest.mark.parametrize(
    "endpoint, names",
    [
        ("chat", set(chat_params.CompletionCreateParamsBase.__annotations__) | {"stream"}),
        ("responses", set(responses_params.ResponseCreateParamsBase.__annotations__) | {"stream"}),
    ],
)
def test_every_parameter_of_the_sdk_is_in_the_table(endpoint, names):
    missing = {n for n in names if (n, endpoint) not in honour.BY_NAME}
    assert not missing


def test_an_unknown_parameter_is_refused(api):
    refused(send(api, "chat", frobnicate=1), "frobnicate")
    refused(send(api, "responses", messages=MESSAGES), "messages")


# -- each parameter: honoured (its effect) or refused -------------------------------------


def _same_twice(api, endpoint, **body):
    a = ok(send(api, endpoint, **max_tokens_key(endpoint, 30), **body))
    b = ok(send(api, endpoint, **max_tokens_key(endpoint, 30), **body))
    return text_of(endpoint, a) == text_of(endpoint, b)


def max_tokens_key(endpoint, n):
    return {"max_tokens" if endpoint == "chat" else "max_output_tokens": n}


def probe_model(api, e):
    assert ok(send(api, e, model="sol"))["model"] == "gpt-5.6-sol"


def probe_models(api, e):
    # fallbacks (issue 27): the first model serves when it can; anything but a list of
    # model names is a 400 naming `models` (a retired model falling back is tested with
    # the SDK in test_chat_sdk.py)
    assert ok(send(api, e, models=["luna"]))["model"] == "gpt-5.6-sol"
    refused(send(api, e, models="luna"), "models")


def probe_task(api, e):
    # model "auto" with a task works on a fresh catalog (the serving models' benchmarks)
    assert ok(send(api, e, model="auto", task="swe-bench-pro", **max_tokens_key(e, 5)))["model"]
    r = send(api, e, model="auto")
    assert r.status_code in (400, 422) and "task" in r.json()["error"]["message"]


def probe_messages(api, e):
    short = api.post_json(
        "/v1/chat/completions", {"model": "sol", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert ok(short)["usage"]["prompt_tokens"] == 1


def probe_input(api, e):
    r = api.post_json("/v1/responses", {"model": "sol", "input": "12345678"})
    assert ok(r)["usage"]["input_tokens"] == 2


def probe_instructions(api, e):
    body = ok(send(api, e, instructions="x" * 400))
    assert body["instructions"] == "x" * 400 and body["usage"]["input_tokens"] > 100


def probe_stream(api, e):
    r = send(api, e, stream=True, **max_tokens_key(e, 3))
    assert r["Content-Type"].startswith("text/event-stream")
    streamed(r)


def probe_stream_options(api, e):
    refused(send(api, e, stream_options={"include_usage": True}), "stream_options")
    r = send(api, e, stream=True, stream_options={"include_usage": True}, **max_tokens_key(e, 3))
    assert b'"usage"' in streamed(r)


def probe_service_tier(api, e):
    assert ok(send(api, e, service_tier="flex"))["tier"] == "flex"
    refused(send(api, e, service_tier="turbo"), "service_tier")


def probe_limit(name):
    def probe(api, e):
        body = ok(send(api, e, **{name: 9}))
        assert out_tokens(e, body) == 9
        if e == "chat":
            assert body["choices"][0]["finish_reason"] == "length"
        else:
            assert body["status"] == "incomplete"
        refused(send(api, e, **{name: 0}), name)

    return probe


def probe_n(api, e):
    ok(send(api, e, n=1))
    refused(send(api, e, n=2), "n")


def probe_temperature(api, e):
    refused(send(api, e, temperature=5), "temperature")
    assert _same_twice(api, e, temperature=0)
    assert not _same_twice(api, e, temperature=1)


def probe_top_p(api, e):
    refused(send(api, e, top_p=1.5), "top_p")
    assert _same_twice(api, e, top_p=0)


def probe_seed(api, e):
    assert _same_twice(api, e, seed=42)
    refused(send(api, e, seed="x"), "seed")


def probe_stop(api, e):
    full = text_of(e, ok(send(api, e, seed=1, max_tokens=40)))
    body = ok(send(api, e, seed=1, max_tokens=40, stop=[" the"]))
    cut = text_of(e, body)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert full.startswith(cut) and " the" not in cut and len(cut) < len(full)
    refused(send(api, e, stop=["a", "b", "c", "d", "e"]), "stop")


def probe_tools(api, e):
    tool = chat_tool() if e == "chat" else resp_tool()
    calls = calls_of(e, ok(send(api, e, tools=[tool])))
    assert calls and calls[0][0] == "get_weather"
    jsonschema.validate(calls[0][1], WEATHER)
    refused(send(api, e, tools=[{"type": "web_search"}]), "tools")


def probe_tool_choice(api, e):
    tool = chat_tool() if e == "chat" else resp_tool()
    assert not calls_of(e, ok(send(api, e, tools=[tool], tool_choice="none")))
    assert calls_of(e, ok(send(api, e, tools=[tool], tool_choice="required")))
    other = chat_tool("get_time", {}) if e == "chat" else resp_tool("get_time", {})
    named = (
        {"type": "function", "function": {"name": "get_time"}}
        if e == "chat"
        else {"type": "function", "name": "get_time"}
    )
    assert calls_of(e, ok(send(api, e, tools=[tool, other], tool_choice=named))) == [
        ("get_time", {})
    ]
    refused(send(api, e, tool_choice="required"), "tool_choice")  # without tools


def _tools(e, n):
    make = chat_tool if e == "chat" else resp_tool
    return [make(f"tool_{i}", {"type": "object", "properties": {}}) for i in range(n)]


def probe_parallel_tool_calls(api, e):
    counts = set()
    for i in range(8):
        said = (
            {"messages": [{"role": "user", "content": f"q{i}"}]}
            if e == "chat"
            else {"input": f"q{i}"}
        )
        body = ok(send(api, e, tools=_tools(e, 4), tool_choice="required", **said))
        counts.add(len(calls_of(e, body)))
        body = ok(
            send(
                api,
                e,
                tools=_tools(e, 4),
                tool_choice="required",
                parallel_tool_calls=False,
                **said,
            )
        )
        assert len(calls_of(e, body)) == 1
    assert counts == {1, 2}  # parallel allows two


def probe_max_tool_calls(api, e):
    for i in range(6):
        body = ok(
            send(
                api,
                e,
                input=f"q{i}",
                tools=_tools(e, 4),
                tool_choice="required",
                max_tool_calls=1,
            )
        )
        assert len(calls_of(e, body)) == 1


def probe_response_format(api, e):
    body = ok(send(api, e, response_format={"type": "json_object"}))
    assert isinstance(json.loads(text_of(e, body)), dict)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": False}}
    jsonschema.validate(json.loads(text_of(e, ok(send(api, e, response_format=fmt)))), schema)
    refused(send(api, e, response_format={"type": "bogus"}), "response_format")


def probe_text(api, e):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"format": {"type": "json_schema", "name": "n", "schema": schema}}
    jsonschema.validate(json.loads(text_of(e, ok(send(api, e, text=fmt)))), schema)
    assert out_tokens(e, ok(send(api, e, text={"verbosity": "low"}))) == 256
    refused(send(api, e, text={"format": {"type": "bogus"}}), "text")


def probe_verbosity(api, e):
    assert out_tokens(e, ok(send(api, e, verbosity="low"))) == 256
    refused(send(api, e, verbosity="loud"), "verbosity")


def probe_echo(name, value):
    def probe(api, e):
        assert ok(send(api, e, **{name: value}))[name] == value
        refused(send(api, e, **{name: 5}), name)

    return probe


def probe_store(api, e):
    if e == "chat":
        ok(send(api, e, store=False))
        refused(send(api, e, store=True), "store")
        return
    rid = ok(send(api, e, store=False, **max_tokens_key(e, 3)))["id"]
    assert api.get(f"/v1/responses/{rid}").status_code == 404
    rid = ok(send(api, e, **max_tokens_key(e, 3)))["id"]
    assert ok(api.get(f"/v1/responses/{rid}"))["id"] == rid


def probe_previous_response_id(api, e):
    first = ok(send(api, e, **max_tokens_key(e, 50)))
    follow = ok(
        api.post_json(
            "/v1/responses", {"model": "sol", "input": "and?", "previous_response_id": first["id"]}
        )
    )
    assert follow["usage"]["input_tokens"] > first["usage"]["input_tokens"] + 10
    assert follow["previous_response_id"] == first["id"]
    refused(send(api, e, previous_response_id="resp_nope"), "previous_response_id")


def probe_truncation(api, e):
    assert ok(send(api, e, truncation="disabled"))["truncation"] == "disabled"
    refused(send(api, e, truncation="auto"), "truncation")


def probe_deadline(api, e):
    r = send(api, e, deadline_seconds=0.5)
    assert r.status_code == 422 and r.json()["error"]["code"] == "deadline_infeasible"


HONOURED = {
    "model": probe_model,
    "task": probe_task,
    "models": probe_models,
    "messages": probe_messages,
    "input": probe_input,
    "instructions": probe_instructions,
    "stream": probe_stream,
    "stream_options": probe_stream_options,
    "service_tier": probe_service_tier,
    "max_tokens": probe_limit("max_tokens"),
    "max_completion_tokens": probe_limit("max_completion_tokens"),
    "max_output_tokens": probe_limit("max_output_tokens"),
    "n": probe_n,
    "temperature": probe_temperature,
    "top_p": probe_top_p,
    "seed": probe_seed,
    "stop": probe_stop,
    "tools": probe_tools,
    "tool_choice": probe_tool_choice,
    "parallel_tool_calls": probe_parallel_tool_calls,
    "max_tool_calls": probe_max_tool_calls,
    "response_format": probe_response_format,
    "text": probe_text,
    "verbosity": probe_verbosity,
    "metadata": probe_echo("metadata", {"k": "v"}),
    "user": probe_echo("user", "u-1"),
    "safety_identifier": probe_echo("safety_identifier", "s-1"),
    "prompt_cache_key": probe_echo("prompt_cache_key", "c-1"),
    "store": probe_store,
    "previous_response_id": probe_previous_response_id,
    "truncation": probe_truncation,
    "deadline_seconds": probe_deadline,
}
# A value each refused parameter is refused with.
REFUSED_WITH = {
    "include": ["message.output_text.logprobs"],
    "logprobs": True,
    "top_logprobs": 5,
    "logit_bias": {"50256": -100},
    "frequency_penalty": 0.5,
    "presence_penalty": -1,
    "reasoning_effort": "high",
    "reasoning": {"effort": "high"},
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "mp3"},
    "prediction": {"type": "content", "content": "x"},
    "web_search_options": {},
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "background": True,
    "background_options": {},
    "conversation": "conv_1",
    "prompt": {"id": "pmpt_1"},
    "context_management": [{}],
    "access_programs": [],
    "image": {},
    "moderation": "auto",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {},
}
# ... and the default it is accepted with (absent: null).
DEFAULT_OF = {
    "include": [],
    "logprobs": False,
    "top_logprobs": 0,
    "logit_bias": {},
    "frequency_penalty": 0,
    "presence_penalty": 0.0,
    "modalities": ["text"],
    "background": False,
}


@pytest.mark.parametrize(
    "name, endpoint", sorted(honour.BY_NAME), ids=[f"{e}:{n}" for n, e in sorted(honour.BY_NAME)]
)
def test_each_parameter_is_honoured_or_refused(api, name, endpoint):
    p = honour.BY_NAME[(name, endpoint)]
    if p.verdict == honour.HONOURED:
        HONOURED[name](api, endpoint)
        return
    if name in ("web_search_options", "access_programs"):
        value = {"search_context_size": "low"} if name == "web_search_options" else ["x"]
    else:
        value = REFUSED_WITH[name]
    refused(send(api, endpoint, **{name: value}), name)
    ok(send(api, endpoint, **{name: DEFAULT_OF.get(name)}, **max_tokens_key(endpoint, 2)))
    assert Job.objects.count() >= 1


# -- routing.agents in process --------------------------------------------------------------


def test_a_schema_with_an_unsupported_keyword_is_refused_by_name():
    for keyword, schema in [
        ("not", {"type": "object", "not": {"required": ["a"]}}),
        ("patternProperties", {"type": "object", "patternProperties": {"^a": {}}}),
        ("if", {"properties": {"a": {"if": {}, "then": {}}}}),
        ("$ref", {"$ref": "https://example.com/s.json"}),
    ]:
        with pytest.raises(SchemaError) as caught:
            check(schema, "schema")
        assert caught.value.keyword == keyword


def test_strict_needs_closed_objects_with_every_property_required():
    open_ = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    with pytest.raises(SchemaError, match="additionalProperties"):
        check(open_, "s", strict=True)
    with pytest.raises(SchemaError, match="required"):
        check({**open_, "additionalProperties": False, "required": []}, "s", strict=True)
    check({**open_, "additionalProperties": False}, "s", strict=True)


def test_instances_are_valid_and_seeded():
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "child": {"$ref": "#/$defs/child"},
        },
        "required": ["id", "code", "tags", "score", "child"],
        "$defs": {"child": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
    }
    values = [instance(schema, seed, "s") for seed in range(20)]
    for v in values:
        jsonschema.validate(v, schema)
    assert instance(schema, 3, "s") == values[3]
    assert len({json.dumps(v, sort_keys=True) for v in values}) > 10


def test_an_unsatisfiable_schema_is_refused_not_faked():
    with pytest.raises(SchemaError, match="no instance"):
        instance({"type": "integer", "minimum": 5, "maximum": 1}, 1, "s")


def test_tool_call_tokens_are_what_was_generated_and_the_limit_cuts():
    ask = AnswerRequest(limit=1000, seed=5, text_seed=5, tools=[Tool("f", WEATHER)])
    a = plan(ask)
    assert a.kind == "tool_calls" and a.finish_reason == "tool_calls"
    assert a.tokens == -(-len(a.calls[0].arguments) // 4) == len(a.pieces(0))
    ask.limit = 2
    cut = plan(ask)
    assert cut.finish_reason == "length" and cut.tokens == 2
    assert cut.calls[0].arguments == a.calls[0].arguments[:8]


def test_after_a_tool_result_auto_answers_in_text():
    ask = AnswerRequest(limit=5, seed=5, text_seed=5, tools=[Tool("f", WEATHER)], after_tool=True)
    assert plan(ask).kind == "text"
    ask.tool_choice = "required"
    assert plan(ask).kind == "tool_calls"


def test_a_stream_of_tool_calls_gives_the_same_calls(api):
    body = {
        "model": "sol",
        "messages": MESSAGES,
        "tools": [chat_tool(), chat_tool("get_time", {})],
        "tool_choice": "required",
        "seed": 3,
    }
    whole = ok(api.post_json("/v1/chat/completions", body))
    r = api.post_json("/v1/chat/completions", {**body, "stream": True})
    chunks = [
        json.loads(line[6:])
        for line in streamed(r).decode().splitlines()
        if line.startswith("data: {")
    ]
    calls: dict = {}
    for ch in chunks:
        for d in ch["choices"][0]["delta"].get("tool_calls", []) if ch["choices"] else []:
            entry = calls.setdefault(d["index"], {"arguments": ""})
            entry.update({k: d[k] for k in ("id",) if k in d})
            if "name" in d["function"]:
                entry["name"] = d["function"]["name"]
            entry["arguments"] += d["function"]["arguments"]
    want = whole["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in want] == [
        (c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

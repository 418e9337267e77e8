"""Agent frameworks, unchanged, against a live server started as deploy/run.sh starts it
(gunicorn with uvicorn workers) on a throwaway SQLite database: the official `openai`
SDK's structured outputs (`chat.completions.parse`, `responses.parse` with a Pydantic
model) and a tool round trip (call, tool result, final answer) streamed and not, on
chat and responses; LangChain (`bind_tools`, `with_structured_output` by its three
methods); the LiteLLM SDK's tool calling. No mocks of the clients or of HTTP."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from tests.routing.compat.livesdk import live_site

pytestmark = pytest.mark.realparts
SCALE = 2000  # simulated seconds per wall second: answers in a blink
ASK = [{"role": "user", "content": "What is the weather in Paris, in JSON?"}]


class Step(BaseModel):
    explanation: str
    output: str


class Solution(BaseModel):
    steps: list[Step]
    final_answer: str
    confidence: float = Field(ge=0, le=1)
    kind: Literal["exact", "estimate"]


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
            "required": ["zone"],
        },
    },
}


@pytest.fixture(scope="module")
def live():
    with live_site("agents", SCALE, API_THROTTLE_WRITE_RATE="100000/s") as site:
        base = f"{site.base}/v1"
        client = openai.OpenAI(base_url=base, api_key=site.key, max_retries=0)
        yield SimpleNamespace(base=base, key=site.key, client=client)
        client.close()


def valid(schema: dict, value) -> None:
    import jsonschema

    jsonschema.validate(value, schema)


# -- the official SDK -------------------------------------------------------------------


def test_chat_completions_parse_with_a_pydantic_model(live):
    c = live.client.chat.completions.parse(model="sol", messages=ASK, response_format=Solution)
    parsed = c.choices[0].message.parsed
    assert isinstance(parsed, Solution) and parsed.kind in ("exact", "estimate")
    assert c.choices[0].finish_reason == "stop"
    # Tokens are what was generated: the JSON's characters / 4, rounded up.
    assert c.usage.completion_tokens == -(-len(c.choices[0].message.content) // 4)
    assert c._request_id  # x-request-id


def test_responses_parse_with_a_pydantic_model(live):
    r = live.client.responses.parse(model="sol", input="Solve 2x + 3 = 7.", text_format=Solution)
    assert isinstance(r.output_parsed, Solution)
    assert r.status == "completed" and r._request_id


def test_the_same_request_gives_the_same_structured_output(live):
    a = live.client.chat.completions.parse(model="sol", messages=ASK, response_format=Solution)
    b = live.client.chat.completions.parse(model="sol", messages=ASK, response_format=Solution)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.id != b.id  # two jobs


def test_a_tool_round_trip(live):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    c = live.client.chat.completions.create(
        model="sol", messages=messages, tools=[WEATHER], tool_choice="required"
    )
    msg = c.choices[0].message
    assert c.choices[0].finish_reason == "tool_calls" and msg.content is None
    call = msg.tool_calls[0]
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    valid(WEATHER["function"]["parameters"], json.loads(call.function.arguments))
    messages += [
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'},
    ]
    final = live.client.chat.completions.create(
        model="sol", messages=messages, tools=[WEATHER], max_tokens=12
    )
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "length"  # it filled max_tokens


def test_a_streamed_tool_round_trip(live):
    messages = [{"role": "user", "content": "Weather and time in Paris?"}]
    stream = live.client.chat.completions.create(
        model="sol",
        messages=messages,
        tools=[WEATHER, TIME],
        tool_choice="required",
        parallel_tool_calls=True,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    calls: dict[int, dict] = {}
    for ch in chunks:
        for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            entry = calls.setdefault(d.index, {"id": d.id, "name": None, "arguments": ""})
            if d.function.name:
                entry["name"] = d.function.name
            entry["arguments"] += d.function.arguments or ""
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1]
    assert finish == "tool_calls" and calls
    tools = {"get_weather": WEATHER, "get_time": TIME}
    for entry in calls.values():
        assert entry["id"].startswith("call_")
        valid(tools[entry["name"]]["function"]["parameters"], json.loads(entry["arguments"]))
    assert chunks[-1].usage.completion_tokens == sum(
        -(-len(e["arguments"]) // 4) for e in calls.values()
    )
    # The SDK's own stream helper accumulates the same calls.
    with live.client.chat.completions.stream(
        model="sol", messages=messages, tools=[WEATHER, TIME], tool_choice="required"
    ) as s:
        done = s.get_final_completion()
    assert [t.function.arguments for t in done.choices[0].message.tool_calls] == [
        e["arguments"] for _, e in sorted(calls.items())
    ]
    messages.append(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": e["id"],
                    "type": "function",
                    "function": {"name": e["name"], "arguments": e["arguments"]},
                }
                for e in calls.values()
            ],
        }
    )
    messages += [{"role": "tool", "tool_call_id": e["id"], "content": "ok"} for e in calls.values()]
    text = ""
    for ch in live.client.chat.completions.create(
        model="sol", messages=messages, tools=[WEATHER, TIME], stream=True, max_tokens=8
    ):
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
    assert len(text.split(" ")) == 8


def test_a_responses_tool_round_trip_streamed_and_not(live):
    tool = {"type": "function", **WEATHER["function"]}
    r = live.client.responses.create(model="sol", input="Weather in Paris?", tools=[tool])
    call = next(item for item in r.output if item.type == "function_call")
    valid(tool["parameters"], json.loads(call.arguments))
    follow = live.client.responses.create(
        model="sol",
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21C"}],
        tools=[tool],
        max_output_tokens=10,
    )
    assert follow.output[0].type == "message" and follow.output_text
    # The previous response's conversation counts as input.
    assert follow.usage.input_tokens > r.usage.input_tokens
    with live.client.responses.stream(
        model="sol", input="Weather in Paris?", tools=[tool], tool_choice="required"
    ) as s:
        final = s.get_final_response()
    streamed = next(item for item in final.output if item.type == "function_call")
    valid(tool["parameters"], json.loads(streamed.arguments))
    assert live.client.responses.retrieve(r.id).output[0].call_id == call.call_id


def test_seed_gives_the_same_text_and_a_stop_cuts_it(live):
    def ask(**kw):
        return live.client.chat.completions.create(
            model="sol", messages=ASK, max_tokens=30, **kw
        ).choices[0]

    assert ask(seed=7).message.content == ask(seed=7).message.content
    assert ask(seed=7).message.content != ask(seed=8).message.content
    full = ask(seed=7).message.content
    cut = ask(seed=7, stop=[" the"])
    assert cut.finish_reason == "stop" and full.startswith(cut.message.content)
    assert " the" not in cut.message.content


def test_the_request_id_is_set_and_stored_responses_are_retrievable(live):
    c = live.client.chat.completions.create(model="sol", messages=ASK, max_tokens=3)
    assert c._request_id and c._request_id.startswith("req_")
    r = live.client.responses.create(model="sol", input="hi", max_output_tokens=4)
    assert live.client.responses.retrieve(r.id).output_text == r.output_text
    live.client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        live.client.responses.retrieve(r.id)
    r = live.client.responses.create(model="sol", input="hi", max_output_tokens=4, store=False)
    with pytest.raises(openai.NotFoundError):
        live.client.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError) as caught:
        live.client.responses.create(model="sol", input="more", previous_response_id=r.id)
    assert caught.value.param == "previous_response_id"


def test_an_unsupported_schema_keyword_is_a_400_naming_it(live):
    with pytest.raises(openai.BadRequestError) as caught:
        live.client.chat.completions.create(
            model="sol",
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}},
            },
        )
    assert "'not'" in caught.value.message
    assert caught.value.param == "response_format.json_schema.schema.not"


# -- LangChain --------------------------------------------------------------------------


def chat_model(live, **kw):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="sol", base_url=live.base, api_key=live.key, max_retries=0, **kw)


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """The current weather in a city."""
    return f"21 {unit} in {city}"


def test_langchain_bind_tools(live):
    from langchain_core.messages import HumanMessage, ToolMessage

    llm = chat_model(live).bind_tools([get_weather])
    ai = llm.invoke([HumanMessage("Weather in Paris?")])
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather"
    args = ai.tool_calls[0]["args"]
    assert set(args) >= {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit")
    final = llm.invoke(
        [
            HumanMessage("Weather in Paris?"),
            ai,
            ToolMessage(get_weather(**args), tool_call_id=ai.tool_calls[0]["id"]),
        ]
    )
    assert final.content and not final.tool_calls
    streamed = None
    for chunk in llm.stream([HumanMessage("Weather in Paris?")]):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed.tool_calls and streamed.tool_calls[0]["name"] == "get_weather"


@pytest.mark.parametrize("method", ["function_calling", "json_schema", "json_mode"])
def test_langchain_with_structured_output(live, method):
    from langchain_core.messages import HumanMessage

    schema = Solution if method != "json_mode" else Solution
    llm = chat_model(live).with_structured_output(schema, method=method)
    if method == "json_mode":
        # json_mode sends no schema (OpenAI's json_object): the model returns some JSON
        # object, which LangChain then reads into the class; use include_raw to see it.
        llm = chat_model(live).with_structured_output(schema, method=method, include_raw=True)
        out = llm.invoke([HumanMessage("Answer in JSON.")])
        assert isinstance(json.loads(out["raw"].content), dict)
        return
    out = llm.invoke([HumanMessage("Solve 2x + 3 = 7.")])
    assert isinstance(out, Solution)


# -- LiteLLM ----------------------------------------------------------------------------


def test_litellm_tool_calling(live):
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no download at import
    import litellm

    r = litellm.completion(
        model="openai/sol",
        api_base=live.base,
        api_key=live.key,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
        tool_choice="auto",
    )
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    valid(WEATHER["function"]["parameters"], json.loads(call.function.arguments))
    assert r.choices[0].finish_reason == "tool_calls"

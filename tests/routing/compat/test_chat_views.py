"""POST /v1/chat/completions and /v1/responses in process (Django's test client; the
async views run to completion): shapes, the tier chosen, errors in OpenAI's envelope.
The real SDK against a live ASGI server: test_chat_sdk.py."""

import json
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync

from routing.accounts.accounts import account_create
from routing.compat import honour, params
from routing.jobs.cancel import job_cancel
from routing.jobs.interactive import interactive_start
from routing.models import Job
from tests.helpers import ApiClient

pytestmark = pytest.mark.django_db
MESSAGES = [{"role": "user", "content": "Summarise the failing test in one line."}]


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6  # a simulated minute is 60 µs


def chat(api, path="/v1/chat/completions", headers=None, **body):
    return api.post_json(path, {"model": "sol", "messages": MESSAGES, **body}, **(headers or {}))


def error_of(r, status):
    assert r.status_code == status, r.content
    assert r["Content-Type"] == "application/json"
    return r.json()["error"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/chat/completions/"])
def test_a_completion_is_a_real_job_settled(api, account, path):
    r = chat(api, path, service_tier="priority", max_completion_tokens=40, user="u1")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["object"] == "chat.completion" and body["simulated"] is True
    assert body["model"] == "gpt-5.6-sol" and body["service_tier"] == "priority"
    prompt_tokens = -(-len(MESSAGES[0]["content"]) // 4)  # the documented rule
    job = Job.objects.get(pk=body["job_id"])
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 40,
        "total_tokens": prompt_tokens + 40,
        "cost": float(job.cost),  # the charge, in credits (issue 27)
    }
    assert len(body["choices"][0]["message"]["content"].split(" ")) == 40
    assert r["X-Job-Id"] == str(job.pk)
    assert job.status == "succeeded" and job.tier.slug == "priority"
    assert job.reservation.state == "settled" and job.cost == job.predicted_cost
    assert account.packages.get().spent == job.cost
    listed = api.get("/api/v1/jobs").json()["data"]
    assert [j["id"] for j in listed] == [str(job.pk)]


def test_max_tokens_and_the_default_output(api):
    assert chat(api, max_tokens=7).json()["usage"]["completion_tokens"] == 7
    assert chat(api).json()["usage"]["completion_tokens"] == 1024


@pytest.mark.parametrize(
    "word, served",
    [
        ("default", "standard"),
        ("standard", "standard"),
        ("flex", "flex"),
        ("priority", "priority"),
        ("ultrafast", "ultrafast"),
    ],
)
def test_each_tier_word(api, word, served):
    body = chat(api, service_tier=word, max_tokens=10).json()
    assert body["tier"] == served  # our slug; service_tier is OpenAI's word for it
    assert body["service_tier"] == ("default" if served == "standard" else served)


def test_auto_picks_the_cheapest_tier_that_meets_the_deadline(api):
    # 1,024 tokens on Sol: Standard ~20 s, Priority ~9 s, Ultrafast ~3 s (simulated).
    assert chat(api, service_tier="auto", deadline_seconds=12).json()["service_tier"] == "priority"
    r = chat(api, headers={"HTTP_X_DEADLINE_SECONDS": "5"})
    assert r.json()["service_tier"] == "ultrafast"
    # no deadline, none of the account's: Standard, OpenAI's default
    assert chat(api, service_tier="auto").json()["service_tier"] == "default"


def test_a_deadline_no_tier_meets_names_the_fastest_option(api):
    err = error_of(chat(api, deadline_seconds=0.5), 422)
    assert err["code"] == "deadline_infeasible" and "Fastest option: ultrafast" in err["message"]
    assert Job.objects.count() == 0


def test_a_retired_model_names_its_successor_and_tier(api):
    r = api.post_json(
        "/v1/chat/completions", {"model": "gpt-5.3-codex-spark", "messages": MESSAGES}
    )
    err = error_of(r, 410)
    assert err["code"] == "model_retired"
    assert "Use gpt-5.6-sol on ultrafast" in err["message"]
    assert (err["successor"], err["successor_tier"]) == ("gpt-5.6-sol", "ultrafast")


def test_quota_exhausted_is_429_with_retry_after(builtin_catalog):
    _, key = account_create(name="poor", default_credits=Decimal("0.000001"))
    r = chat(ApiClient(key), service_tier="priority")
    err = error_of(r, 429)
    assert err["code"] == "insufficient_quota" and int(r["Retry-After"]) > 0


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"service_tier": "turbo"}, "service_tier"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": "9"}, "max_completion_tokens"),
        ({"n": 2}, "n"),
        ({"deadline_seconds": -1}, "deadline_seconds"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"metadata": {"k": 5}}, "metadata"),
        ({"model": ""}, "model"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(api, body, param):
    err = error_of(chat(api, **body), 400)
    assert err["param"] == param and err["type"] == "invalid_request_error", err


def test_bad_deadline_header_and_bad_json(api):
    err = error_of(chat(api, headers={"HTTP_X_DEADLINE_SECONDS": "soon"}), 400)
    assert err["param"] == "X-Deadline-Seconds"
    r = api.post("/v1/chat/completions", "{nope", content_type="application/json")
    assert error_of(r, 400)["message"].startswith("JSON parse error")


def test_unknown_model_and_auto_without_a_task(api):
    assert error_of(chat(api, model="gpt-9"), 404)["code"] == "model_not_found"
    err = error_of(chat(api, model="auto"), 400)
    assert "task" in err["message"]


def test_no_key_is_401_and_get_is_405(builtin_catalog):
    err = error_of(chat(ApiClient()), 401)
    assert err["type"] == "authentication_error"
    r = ApiClient().get("/v1/chat/completions")
    assert error_of(r, 405) and r["Allow"] == "POST"


async def collect(chunks) -> bytes:
    return b"".join([c async for c in chunks])


def sse(r) -> list[str]:
    assert r["Content-Type"] == "text/event-stream"
    raw = async_to_sync(collect)(r.streaming_content).decode()
    return [ln[6:] for ln in raw.split("\n") if ln.startswith("data: ")]


def test_a_stream_ends_with_usage_then_done(api):
    r = chat(api, stream=True, stream_options={"include_usage": True}, max_tokens=30)
    data = sse(r)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split(" ")) == 30
    assert (
        chunks[-2]["choices"][0]["finish_reason"] == "length"
    )  # the answer filled max_tokens (OpenAI says length)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 30
    assert Job.objects.get().status == "succeeded"


def test_responses_with_a_string_and_with_messages(api):
    r = api.post_json(
        "/v1/responses",
        {"model": "sol", "input": "Say hi", "max_output_tokens": 12, "service_tier": "flex"},
    )
    body = r.json()
    assert r.status_code == 200 and body["object"] == "response"
    # The answer filled max_output_tokens: incomplete, as OpenAI says it.
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["service_tier"] == "flex" and body["usage"]["output_tokens"] == 12
    assert body["usage"]["input_tokens"] == 2  # "Say hi": 6 characters
    assert len(body["output"][0]["content"][0]["text"].split(" ")) == 12
    r = api.post_json("/v1/responses/", {"model": "sol", "input": MESSAGES, "max_output_tokens": 5})
    assert r.json()["usage"]["output_tokens"] == 5
    err = error_of(api.post_json("/v1/responses", {"model": "sol"}), 400)
    assert err["param"] == "input"


def test_a_responses_stream_has_the_event_types(api):
    r = api.post_json(
        "/v1/responses", {"model": "sol", "input": "Hi", "max_output_tokens": 20, "stream": True}
    )
    events = [json.loads(d) for d in sse(r)]
    kinds = [e["type"] for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",  # it filled max_output_tokens
    ]
    r = api.post_json(
        "/v1/responses",
        {"model": "sol", "input": "Hi", "stream": True, "text": {"verbosity": "low"}},
    )
    events = [json.loads(d) for d in sse(r)]
    assert events[-1]["type"] == "response.completed"  # its natural length (256 words)
    assert events[-1]["response"]["usage"]["output_tokens"] == 256
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == events[-1]["response"]["output"][0]["content"][0]["text"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize(
    "raw, param, words",
    [
        ('"temperature": 1e309', "temperature", "outside the range of a double"),
        ('"top_p": -1E400', "top_p", "outside the range of a double"),
        ('"temperature": NaN', "temperature", "NaN"),
        ('"model": "luna", "model": "sol"', "model", "'model' appears more than once"),
    ],
)
def test_a_number_past_a_doubles_range_or_a_key_twice_is_a_400(api, path, raw, param, words):
    """Issue 23, finding 6: 1e309 was accepted (as infinity) where NaN was a 400; a key
    twice was last-wins."""
    inner = '"input": "hi"' if path == "/v1/responses" else f'"messages": {json.dumps(MESSAGES)}'
    body = f'{{"model": "sol", {inner}, {raw}}}'
    err = error_of(api.post(path, body, content_type="application/json"), 400)
    assert err["param"] == param and words in err["message"], err
    assert err["type"] == "invalid_request_error"
    assert not Job.objects.exists()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""],
)
def test_a_body_that_is_not_sent_as_json_is_a_415(api, path, content_type):
    """Issue 23, finding 7: chat ignored Content-Type where the native API answers 415."""
    body = json.dumps({"model": "sol", "messages": MESSAGES, "input": "hi"})
    err = error_of(api.generic("POST", path, body, content_type=content_type), 415)
    assert err["type"] == "invalid_request_error" and err["code"] == "unsupported_media_type"
    assert not Job.objects.exists()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "Application/JSON", "application/json"]
)
def test_json_with_a_charset_or_in_capitals_passes(api, path, content_type):
    said = {"messages": MESSAGES} if path.startswith("/v1/chat") else {"input": "hi"}
    body = json.dumps({"model": "sol", **said})
    r = api.generic("POST", path, body, content_type=content_type)
    assert r.status_code == 200, r.content


def streamed_text(data: list[str]) -> str:
    """The answer's text from a chat or responses stream's data lines."""
    events = [json.loads(d) for d in data if d != "[DONE]"]
    if events[0].get("object") == "chat.completion.chunk":
        return "".join(c["choices"][0]["delta"].get("content", "") for c in events if c["choices"])
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_an_idempotency_key_answers_a_repeat_from_the_same_job(api, account, path):
    body = {"model": "sol", "max_tokens": 25} if "chat" in path else {"max_output_tokens": 25}
    body |= {"messages": MESSAGES} if "chat" in path else {"model": "sol", "input": "Hi"}
    first = api.post_json(path, body, HTTP_IDEMPOTENCY_KEY="retry-1")
    again = api.post_json(path, body, HTTP_IDEMPOTENCY_KEY="retry-1")
    assert first.status_code == again.status_code == 200, again.content
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    job = Job.objects.get()  # one job, charged once
    assert account.packages.get().spent == job.cost > 0
    other = api.post_json(path, {**body, "metadata": {"k": "v"}}, HTTP_IDEMPOTENCY_KEY="retry-1")
    err = error_of(other, 422)
    assert err["code"] == "idempotency_key_reused" and Job.objects.count() == 1
    # A streamed request is another body; its repeat replays the whole answer at once.
    streamed = {**body, "stream": True}
    data = sse(api.post_json(path, streamed, HTTP_IDEMPOTENCY_KEY="retry-2"))
    replay = api.post_json(path, streamed, HTTP_IDEMPOTENCY_KEY="retry-2")
    assert replay["Idempotent-Replayed"] == "true"
    assert streamed_text(sse(replay)) == streamed_text(data) and Job.objects.count() == 2
    assert len(streamed_text(data).split(" ")) == 25
    assert account.packages.get().spent == sum(j.cost for j in Job.objects.all())


def test_a_bad_idempotency_key_is_a_400(api):
    err = error_of(chat(api, headers={"HTTP_IDEMPOTENCY_KEY": "x" * 256}), 400)
    assert "Idempotency-Key" in err["message"] and Job.objects.count() == 0


def test_a_repeat_of_a_cancelled_request_gets_the_same_error(api, account, settings):
    settings.SIM_TIME_SCALE = 1  # still running when it is cancelled
    body = {"model": "sol", "messages": MESSAGES, "max_tokens": 9}
    req = params.chat_request(body, {})
    req.answer = honour.read(body, "chat").fingerprint()
    started = interactive_start(
        account=account, model=req.model, request=req.route_request(), prompt=req.prompt,
        payload=req.payload("/v1/chat/completions"), idempotency_key="k",
    )  # fmt: skip
    job_cancel(job=started.job)
    r = chat(api, max_tokens=9, headers={"HTTP_IDEMPOTENCY_KEY": "k"})
    assert error_of(r, 409)["code"] == "job_cancelled" and Job.objects.count() == 1


@pytest.mark.parametrize("stream", [False, True])
def test_the_promise_and_its_outcome_are_response_headers(api, stream):
    # Issue 24: OpenAI's body has no room for them; the headers are known from the first
    # byte (the run is drawn when the job is claimed), streamed or not.
    r = chat(api, max_completion_tokens=40, deadline_seconds=60, stream=stream)
    assert r.status_code == 200
    job = Job.objects.get(pk=r["X-Job-Id"])
    if stream:
        async_to_sync(collect)(r.streaming_content)
    job.refresh_from_db()
    assert float(r["X-Promised-Seconds"]) == pytest.approx(job.promised_seconds, abs=1e-3)
    total = job.simulated["total_seconds"]
    assert float(r["X-Completion-Seconds"]) == pytest.approx(total, abs=1e-3)
    assert r["X-Deadline-Met"] == ("true" if total <= 60 else "false")
    assert float(r["X-Late-By-Seconds"]) == pytest.approx(max(0.0, total - 60), abs=1e-3)
    assert job.deadline_met is (total <= 60) and job.status == "succeeded"

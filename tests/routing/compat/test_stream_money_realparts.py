"""Streams charged for what they delivered, and Idempotency-Key on the /v1/ chat
endpoints, on the service as deployed (gunicorn with uvicorn workers, a Celery worker
and beat, throwaway PostgreSQL and Redis), driven by the official `openai` SDK:

- a stream whose job is cancelled (POST /api/v1/jobs/{id}/cancel) stops sending tokens
  and ends with a final chunk saying so; the job is charged for what it delivered;
- a client that leaves mid-stream is charged for what was delivered;
- a web worker SIGKILLed mid-stream: the sweeper (beat) settles the job for what the
  stream had delivered, not the whole answer;
- the SDK retrying a timed-out request with an Idempotency-Key makes one job, charged
  once; a repeat replays the answer; another body with the key is refused.

`ledger_check` (which compares every streamed job's charge with what it delivered)
passes after each."""

from __future__ import annotations

import os
import signal
import urllib.error
import uuid

import openai
import pytest

from tests.realparts import PostgresServer, RedisServer, wait_until
from tests.stack import Stack

pytestmark = [pytest.mark.realparts, pytest.mark.postgres]
SCALE = 10.0  # 4,000 Standard tokens: ~8 s of wall time
MESSAGES = [{"role": "user", "content": "Write the migration guide for the new billing."}]
LONG = 4000


@pytest.fixture(scope="module")
def stack():
    try:
        pg, redis = PostgresServer(), RedisServer()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    s = None
    try:
        s = Stack(pg, redis, scale=SCALE, credits="1000")
        s.start_worker(concurrency=1)
        s.start_beat()  # the job sweeper: the recovery of a dead web worker's streams
        yield s
    finally:
        if s is not None:
            s.close()
        pg.cleanup()
        redis.cleanup()


def client(stack, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{stack.port}/v1",
        api_key=stack.key,
        **({"max_retries": 0} | kwargs),
    )


def job_id_of(object_id: str) -> str:
    return str(uuid.UUID(object_id.split("-", 1)[-1].removeprefix("resp_")))


def ended(stack, job_id: str) -> dict:
    return wait_until(
        lambda: (j := stack.job(job_id))["status"] not in ("queued", "running") and j,
        60,
        f"job {job_id} to end",
    )


def assert_ledger_ok(stack) -> None:
    report = stack.ledger()
    assert report["ok"] and report["stream_mismatches"] == [], report


def answers(stack) -> bool:
    try:
        return stack.call("GET", "/api/v1/ping")[0] == 200
    except (urllib.error.URLError, ConnectionError):
        return False


def cancel(stack, job_id: str) -> dict:
    code, body = stack.call("POST", f"/api/v1/jobs/{job_id}/cancel")
    assert code == 200, body
    return body


def test_cancelling_a_chat_stream_stops_it_and_charges_what_it_delivered(stack):
    spent = stack.spent()
    with client(stack) as c:
        stream = c.chat.completions.create(
            model="sol",
            messages=MESSAGES,
            service_tier="standard",
            max_tokens=LONG,
            stream=True,
            stream_options={"include_usage": True},
        )
        words, job_id, cancelled = 0, None, None
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            job_id = job_id_of(chunk.id)
            if chunk.choices and chunk.choices[0].delta.content:
                words += len(chunk.choices[0].delta.content.split())
            if words >= 100 and cancelled is None:
                cancelled = cancel(stack, job_id)
    # The stream ended long before its answer: a final chunk says why, then usage
    # counts what was delivered (and charged), then [DONE].
    assert cancelled["status"] == "cancelled"
    assert 100 <= words < LONG
    finish = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert [ch.choices[0].finish_reason for ch in finish] == ["cancelled"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == words
    job = ended(stack, job_id)
    assert job["status"] == "cancelled" and job["delivered_tokens"] == words
    assert 0 < float(job["cost"]) < float(job["predicted"]["cost"])
    assert stack.spent() == pytest.approx(spent + float(job["cost"]))
    assert job["simulated"]["generated_tokens"] >= words
    assert_ledger_ok(stack)


def test_cancelling_a_responses_stream_stops_it_and_charges_what_it_delivered(stack):
    with client(stack) as c:
        stream = c.responses.create(
            model="sol",
            input="Write the migration guide.",
            service_tier="default",
            max_output_tokens=LONG,
            stream=True,
        )
        words, job_id, cancelled = 0, None, None
        events = []
        for event in stream:
            events.append(event)
            if event.type == "response.created":
                job_id = job_id_of(event.response.id)
            if event.type == "response.output_text.delta":
                words += len(event.delta.split())
            if words >= 100 and cancelled is None:
                cancelled = cancel(stack, job_id)
    assert 100 <= words < LONG
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.status == "incomplete"
    assert last.response.incomplete_details.reason == "cancelled"
    assert last.response.usage.output_tokens == words
    assert len(last.response.output_text.split()) == words
    job = ended(stack, job_id)
    assert job["status"] == "cancelled" and job["delivered_tokens"] == words
    assert 0 < float(job["cost"]) < float(job["predicted"]["cost"])
    assert_ledger_ok(stack)


def test_a_client_that_leaves_mid_stream_pays_for_what_was_delivered(stack):
    with client(stack) as c:
        stream = c.chat.completions.create(
            model="sol", messages=MESSAGES, service_tier="standard", max_tokens=LONG, stream=True
        )
        got, job_id = 0, None
        for chunk in stream:
            job_id = job_id_of(chunk.id)
            got += len(chunk.choices[0].delta.content.split())
            if got >= 100:
                break
        stream.close()  # the connection goes; the server notices and settles
    job = ended(stack, job_id)
    assert job["status"] == "failed" and "client disconnected" in job["error"]
    # What the stream had handed over (what the client read, and at most the events
    # in flight when it left), never the rest of the answer.
    assert got <= job["delivered_tokens"] < LONG
    assert job["delivered_tokens"] <= job["simulated"]["generated_tokens"]
    assert 0 < float(job["cost"]) < float(job["predicted"]["cost"])
    assert_ledger_ok(stack)


def test_an_sdk_retry_after_a_timeout_is_one_job_charged_once(stack):
    key = f"retry-{uuid.uuid4()}"
    spent = stack.spent()
    body = dict(model="sol", messages=MESSAGES, service_tier="standard", max_tokens=3001)
    # ~6 s of answer, a 1 s timeout: the SDK times out and retries (same headers)
    # until an attempt is answered, from the first attempt's job.
    with client(stack, timeout=1.0, max_retries=10) as c:
        raw = c.chat.completions.with_raw_response.create(
            **body, extra_headers={"Idempotency-Key": key}
        )
        completion = raw.parse()
        assert raw.retries_taken >= 1  # it did time out first
        assert raw.headers["Idempotent-Replayed"] == "true"
    with client(stack) as c:
        again = c.chat.completions.with_raw_response.create(
            **body, extra_headers={"Idempotency-Key": key}
        )
        assert again.parse().model_dump() == completion.model_dump()
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            c.chat.completions.create(
                **{**body, "max_tokens": 3002}, extra_headers={"Idempotency-Key": key}
            )
        assert caught.value.code == "idempotency_key_reused"
    assert completion.usage.completion_tokens == 3001
    jobs = stack.call("GET", "/api/v1/jobs?limit=100")[1]["data"]
    mine = [j for j in jobs if j["output_tokens"] == 3001]
    assert [j["id"] for j in mine] == [job_id_of(completion.id)]
    assert mine[0]["status"] == "succeeded"
    assert stack.spent() == pytest.approx(spent + float(mine[0]["cost"]))
    assert_ledger_ok(stack)


def test_a_streamed_request_repeated_with_its_key_replays_the_answer(stack):
    key = f"stream-{uuid.uuid4()}"
    body = dict(
        model="sol", input="Say hello.", service_tier="priority", max_output_tokens=60, stream=True
    )
    with client(stack) as c:
        first = list(c.responses.create(**body, extra_headers={"Idempotency-Key": key}))
        spent = stack.spent()
        again = list(c.responses.create(**body, extra_headers={"Idempotency-Key": key}))
    # It filled max_output_tokens: response.incomplete (reason max_output_tokens).
    assert first[-1].type == again[-1].type == "response.incomplete"
    assert again[-1].response.output_text == first[-1].response.output_text
    assert again[-1].response.id == first[-1].response.id
    assert stack.spent() == pytest.approx(spent)  # nothing charged again
    assert_ledger_ok(stack)


def test_a_web_worker_killed_mid_stream_bills_only_what_was_delivered(stack):
    """Last: it kills the server's worker (gunicorn starts another)."""
    master = stack.web.pid
    with client(stack) as c:
        stream = c.chat.completions.create(
            model="sol", messages=MESSAGES, service_tier="standard", max_tokens=LONG, stream=True
        )
        got, job_id = 0, None
        with pytest.raises(openai.APIError):  # the connection breaks mid-stream
            for chunk in stream:
                job_id = job_id_of(chunk.id)
                got += len(chunk.choices[0].delta.content.split())
                if got >= 100:
                    workers = [p for p in stack.web.group_pids() if p != master]
                    assert workers, stack.logs()
                    for pid in workers:
                        os.kill(pid, signal.SIGKILL)
                    for _ in stream:  # read on until the connection breaks
                        pass
    # The job's own web process is gone: beat's sweeper settles it after its end, for
    # what the stream had recorded as delivered.
    wait_until(lambda: answers(stack), 60, "a new web worker")
    job = ended(stack, job_id)
    assert job["status"] == "failed" and "web process stopped" in job["error"], job
    assert got <= job["delivered_tokens"] < LONG
    assert 0 < float(job["cost"]) < float(job["predicted"]["cost"])
    assert_ledger_ok(stack)

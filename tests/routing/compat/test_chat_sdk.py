"""The official `openai` SDK, unchanged, against a live server started as deploy/run.sh
starts it (gunicorn with uvicorn workers, ASGI) on a throwaway SQLite database: chat
completions on every tier and `auto` with a deadline, streaming (paced by the tier),
a retired model, responses, the async client, and a client that leaves mid-stream.
No mocks of the SDK or of HTTP."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid
from types import SimpleNamespace

import openai
import pytest

from tests.realparts import run_manage, wait_until
from tests.routing.compat.livesdk import live_site

pytestmark = pytest.mark.realparts
SCALE = 10  # simulated seconds per wall second
MESSAGES = [{"role": "user", "content": "Write the release note for the retry fix."}]


@pytest.fixture(scope="module")
def live():
    with live_site("sdk", SCALE) as site:
        base, key = site.base, site.key
        yield SimpleNamespace(
            base=base,
            key=key,
            env=site.env,
            client=openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0),
            aclient=lambda: openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0),
        )


def native(live, path: str) -> dict:
    req = urllib.request.Request(
        f"{live.base}{path}", headers={"Authorization": f"Bearer {live.key}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def job_id_of(completion_id: str) -> str:
    return str(uuid.UUID(completion_id.split("-", 1)[1].removeprefix("resp_")))


@pytest.mark.parametrize(
    "tier, served",
    [
        ("default", "standard"),
        ("flex", "flex"),
        ("priority", "priority"),
        ("ultrafast", "ultrafast"),
    ],
)
def test_each_tier(live, tier, served):
    c = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, service_tier=tier, max_completion_tokens=20
    )
    assert c.object == "chat.completion" and c.model == "gpt-5.6-sol"
    assert c.tier == served  # our slug; service_tier is OpenAI's word for it
    assert c.service_tier == ("default" if served == "standard" else served)
    assert c.usage.completion_tokens == 20 and c.usage.prompt_tokens == 11
    assert c.usage.total_tokens == 31
    assert len(c.choices[0].message.content.split(" ")) == 20
    assert c.choices[0].finish_reason == "length"  # it filled max_completion_tokens


def test_no_service_tier_is_served_on_standard(live):
    """OpenAI's own default: an SDK call that omits service_tier (issue 27)."""
    c = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, max_completion_tokens=20
    )
    assert c.service_tier == "default" and c.tier == "standard"
    r = live.client.responses.create(model="sol", input="Hi", max_output_tokens=5)
    assert r.service_tier == "default" and r.tier == "standard"
    c = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, service_tier="auto", max_completion_tokens=20
    )
    assert c.service_tier == "default"  # auto, no deadline, none of the account's


def test_a_fallback_serves_when_the_model_is_retired(live):
    c = live.client.chat.completions.create(
        model="gpt-5.3-codex-spark",
        messages=MESSAGES,
        max_completion_tokens=5,
        extra_body={"models": ["sol"]},
    )
    assert c.model == "gpt-5.6-sol"


def test_auto_with_a_deadline_picks_the_cheapest_tier_that_meets_it(live):
    # 1,024 output tokens on Sol: Standard ~20 s, Priority ~9 s, Ultrafast ~3 s.
    c = live.client.chat.completions.create(
        model="sol",
        messages=MESSAGES,
        service_tier="auto",
        extra_body={"deadline_seconds": 12},
    )
    assert c.service_tier == "priority" and c.usage.completion_tokens == 1024
    c = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, max_tokens=1000, extra_headers={"X-Deadline-Seconds": "5"}
    )
    assert c.service_tier == "ultrafast"


def test_a_deadline_no_tier_meets_says_the_fastest_option(live):
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        live.client.chat.completions.create(
            model="sol", messages=MESSAGES, extra_body={"deadline_seconds": 0.5}
        )
    assert "Fastest option: ultrafast" in caught.value.message
    assert caught.value.code == "deadline_infeasible"


def test_a_retired_model_names_its_successor(live):
    with pytest.raises(openai.APIStatusError) as caught:
        live.client.chat.completions.create(model="gpt-5.3-codex-spark", messages=MESSAGES)
    err = caught.value
    assert err.status_code == 410 and err.code == "model_retired"
    assert "Use gpt-5.6-sol on ultrafast" in str(err)


def test_a_stream_arrives_in_chunks_and_ends_with_usage(live):
    stream = live.client.chat.completions.create(
        model="sol",
        messages=MESSAGES,
        service_tier="priority",
        max_tokens=1000,  # ~1.5 s: several events of STREAM_TICK_SECONDS
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) >= 3  # paced: several events, not one
    text = "".join(c.choices[0].delta.content for c in content)
    assert len(text.split(" ")) == 1000
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 1000
    assert chunks[-1].service_tier == "priority"
    job = native(live, f"/api/v1/jobs/{job_id_of(chunks[0].id)}")
    assert job["status"] == "succeeded" and job["cost"] == job["predicted"]["cost"]


def timed_stream(live, tier: str, tokens: int) -> tuple[float, str]:
    started = time.monotonic()
    stream = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, service_tier=tier, max_tokens=tokens, stream=True
    )
    first = None
    for chunk in stream:
        first = first or chunk.id
    return time.monotonic() - started, job_id_of(first)


def test_pacing_follows_the_tier(live):
    standard, std_job = timed_stream(live, "standard", 1500)
    ultrafast, uf_job = timed_stream(live, "ultrafast", 1500)
    predicted = (
        native(live, f"/api/v1/jobs/{std_job}")["simulated"]["total_seconds"]
        / native(live, f"/api/v1/jobs/{uf_job}")["simulated"]["total_seconds"]
    )
    measured = standard / ultrafast
    print(f"standard {standard:.2f} s, ultrafast {ultrafast:.2f} s: {measured:.1f}x "
          f"(predicted {predicted:.1f}x)")  # fmt: skip
    assert predicted > 5
    # Generous: the server's tick and the client's HTTP overhead blur short streams.
    assert predicted / 2.5 < measured < predicted * 2.5


def test_the_jobs_appear_in_the_native_api(live):
    c = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, service_tier="flex", max_tokens=5
    )
    listed = native(live, "/api/v1/jobs?limit=100")["data"]
    job = next(j for j in listed if j["id"] == job_id_of(c.id))
    assert job["status"] == "succeeded" and job["tier"] == "flex" and job["output_tokens"] == 5


def test_responses_with_and_without_stream(live):
    r = live.client.responses.create(
        model="sol", input="Say hello", max_output_tokens=15, service_tier="priority"
    )
    # It filled max_output_tokens: incomplete, as OpenAI says it.
    assert r.status == "incomplete" and r.service_tier == "priority"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert len(r.output_text.split(" ")) == 15 and r.usage.output_tokens == 15
    events = list(
        live.client.responses.create(
            model="sol",
            input=[{"role": "user", "content": "Say hello"}],
            max_output_tokens=40,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text and len(deltas.split(" ")) == 40


def test_the_async_client_streams(live):
    async def main():
        client = live.aclient()
        try:
            stream = await client.chat.completions.create(
                model="sol",
                messages=MESSAGES,
                service_tier="priority",
                # ~1.5 s of stream: several STREAM_TICK_SECONDS even when the server is
                # slow to start it (100 tokens, ~0.15 s, all came due before the first
                # check once under a loaded CI run, and were sent in one event)
                max_tokens=1000,
                stream=True,
                stream_options={"include_usage": True},
            )
            return [c async for c in stream]
        finally:
            await client.close()

    chunks = asyncio.run(main())
    assert chunks[-1].usage.completion_tokens == 1000
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2


def test_a_client_that_leaves_mid_stream_pays_only_for_what_was_generated(live):
    stream = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, service_tier="standard", max_tokens=4000, stream=True
    )
    got = 0
    job_id = None
    for chunk in stream:
        job_id = job_id_of(chunk.id)
        got += len(chunk.choices[0].delta.content.split())
        if got >= 100:
            break
    stream.close()  # the connection goes; the server notices and settles
    job = wait_until(
        lambda: (j := native(live, f"/api/v1/jobs/{job_id}"))["status"] != "running" and j,
        30,
        "the abandoned job to settle",
    )
    assert job["status"] == "failed" and "disconnected" in job["error"]
    generated = job["simulated"]["generated_tokens"]
    assert got <= generated < 4000
    assert 0 < float(job["cost"]) < float(job["predicted"]["cost"])
    report = json.loads(run_manage(live.env, "ledger_check", "--json"))
    assert report["ok"], report

"""Issue 27 item 3 with the official `openai` SDK against a live server (as deploy/run.sh
starts it): every OpenAI-shaped answer of a paid request carries its charge in
`usage.cost` (credits, a number, as OpenRouter sends it): chat completions, the final
usage chunk of a stream, responses (streamed or not); and the organization usage and
costs endpoints read back exactly what was charged (the SDK has no typed methods for
them: `client.get(..., cast_to=object)`)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from decimal import Decimal
from types import SimpleNamespace

import openai
import pytest

from tests.routing.compat.livesdk import live_site

pytestmark = pytest.mark.realparts
MESSAGES = [{"role": "user", "content": "Summarise the incident report."}]


@pytest.fixture(scope="module")
def live():
    with live_site("usage-sdk", 1000) as site:
        yield SimpleNamespace(
            base=site.base,
            key=site.key,
            client=openai.OpenAI(base_url=f"{site.base}/v1", api_key=site.key, max_retries=0),
        )


def native(live, path: str) -> dict:
    req = urllib.request.Request(
        f"{live.base}{path}", headers={"Authorization": f"Bearer {live.key}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def job_cost(live, object_id: str) -> Decimal:
    job_id = str(uuid.UUID(object_id.removeprefix("chatcmpl-").removeprefix("resp_")))
    job = native(live, f"/api/v1/jobs/{job_id}")
    assert job["status"] == "succeeded"
    return Decimal(job["cost"])


def test_every_answer_carries_its_cost(live):
    c = live.client.chat.completions.create(
        model="sol", messages=MESSAGES, max_completion_tokens=50
    )
    assert c.usage.cost > 0  # an extra member the SDK keeps
    assert Decimal(str(c.usage.cost)) == job_cost(live, c.id)

    chunks = list(
        live.client.chat.completions.create(
            model="sol",
            messages=MESSAGES,
            max_completion_tokens=30,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 30
    assert Decimal(str(last.usage.cost)) == job_cost(live, last.id)
    # Chunks before the usage chunk carry no usage.
    assert all(ch.usage is None for ch in chunks[:-1])

    r = live.client.responses.create(model="sol", input="Hi", max_output_tokens=20)
    assert Decimal(str(r.usage.cost)) == job_cost(live, r.id)
    events = list(
        live.client.responses.create(model="sol", input="Hi", max_output_tokens=20, stream=True)
    )
    done = events[-1].response
    assert events[-1].type == "response.incomplete"  # it filled max_output_tokens
    assert Decimal(str(done.usage.cost)) == job_cost(live, done.id)
    assert events[0].response.usage is None  # nothing charged yet


def test_the_organization_endpoints_read_back_the_charges(live):
    start = int(time.time()) - 3600
    for _ in range(2):
        live.client.chat.completions.create(
            model="sol", messages=MESSAGES, max_completion_tokens=10, service_tier="flex"
        )
    usage = live.client.get(
        "/organization/usage/completions",
        cast_to=object,
        options={"params": {"start_time": start, "group_by": ["model", "service_tier"]}},
    )
    assert usage["object"] == "page" and usage["data"][0]["object"] == "bucket"
    rows = [r for b in usage["data"] for r in b["results"]]
    flex = [r for r in rows if r["service_tier"] == "flex"]
    assert flex and flex[0]["num_model_requests"] == 2 and flex[0]["model"] == "gpt-5.6-sol"
    assert flex[0]["object"] == "organization.usage.completions.result"
    costs = live.client.get(
        "/organization/costs", cast_to=object, options={"params": {"start_time": start}}
    )
    total = sum(Decimal(str(r["amount"]["value"])) for b in costs["data"] for r in b["results"])
    native_total = native(live, f"/api/v1/usage?start={start}")["totals"]["credits"]
    assert total == Decimal(native_total) > 0
    # A bad parameter is the SDK's BadRequestError naming it.
    with pytest.raises(openai.BadRequestError) as caught:
        live.client.get(
            "/organization/costs",
            cast_to=object,
            options={"params": {"start_time": start, "bucket_width": "1h"}},
        )
    assert caught.value.param == "bucket_width"

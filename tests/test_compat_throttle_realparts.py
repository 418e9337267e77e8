"""Issue 25: /v1/chat/completions and /v1/responses count against the account's request
and write rates like every other API request, on the server as deployed (the web server
deploy/run.sh starts: gunicorn with the service's uvicorn workers). Before, the most
expensive endpoint was the one without the limit: 25 chat completions in a row from one
account were all answered, while its quotes were refused from the 16th on.

The rates are per day so that no window ends during the test."""

from __future__ import annotations

import pytest
import requests

from tests.realparts import catalog_site, free_port, start_web

pytestmark = pytest.mark.realparts

WRITE_RATE = 4  # writes per account per day (the request rate is far above it)
MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def site():
    env, keys = catalog_site(
        "first",
        "second",
        LOG_LEVEL="WARNING",
        API_THROTTLE_RATE="1000/day",
        API_THROTTLE_WRITE_RATE=f"{WRITE_RATE}/day",
        SIM_TIME_SCALE="1000000",  # a simulated minute is 60 us: answers come at once
    )
    port = free_port()
    web = start_web(env, port, name=f"web-{port}")
    try:
        web.wait_ready(60)
        yield f"http://127.0.0.1:{port}", keys
    finally:
        web.stop(10)


def post(base: str, key: str, path: str, body: dict) -> requests.Response:
    return requests.post(
        f"{base}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )


def chat(base: str, key: str) -> requests.Response:
    body = {"model": "sol", "messages": MESSAGES, "max_completion_tokens": 5}
    return post(base, key, "/v1/chat/completions", body)


def respond(base: str, key: str) -> requests.Response:
    return post(base, key, "/v1/responses", {"model": "sol", "input": "Hi", "max_output_tokens": 5})


def refused(r: requests.Response) -> dict:
    assert r.status_code == 429, r.text
    assert int(r.headers["Retry-After"]) >= 1
    error = r.json()["error"]  # OpenAI's envelope, as the SDK reads it
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    return error


def test_chat_completions_and_responses_are_refused_past_the_accounts_write_rate(site):
    base, (key, other_key) = site
    answered = [chat(base, key), respond(base, key), chat(base, key), respond(base, key)]
    assert [r.status_code for r in answered] == [200] * WRITE_RATE, [r.text for r in answered]
    assert answered[-1].headers["x-ratelimit-limit-requests"] == "1000"
    assert answered[-1].headers["x-ratelimit-remaining-requests"] == str(1000 - WRITE_RATE)

    refused(chat(base, key))
    refused(respond(base, key))
    # The same account's native writes share the rate: its quote is refused too.
    quote = post(base, key, "/api/v1/quotes", {"model": "sol", "input_tokens": 10})
    assert quote.status_code == 429, quote.text
    # Per account: another account is served.
    assert chat(base, other_key).status_code == 200
    assert respond(base, other_key).status_code == 200


def test_without_a_key_the_answer_is_401_not_429(site):
    base, _keys = site
    r = requests.post(f"{base}/v1/chat/completions", json={"model": "sol"}, timeout=60)
    assert r.status_code == 401, r.text

"""A client team runs its own house through the API alone (issue 27's "done when"), on
the real stack: two web instances (gunicorn + uvicorn), a Celery worker and beat, one
throwaway PostgreSQL and one Redis (broker and shared cache).

With the official `openai` SDK and plain HTTP, the team's admin key:
1. makes a scoped key (one model, a daily spending cap) and a webhook endpoint;
2. spends with the new key (chat completions through both instances) until it is over
   80 % of its cap, and the key's cap then refuses the next request;
3. sees the day's spend per key and model in `GET /api/v1/usage`, equal to the cost
   each response carried (`usage.cost`) and to the ledger;
4. receives the signed `quota.threshold` webhooks (50 %, then 80 %) on a real HTTP
   receiver and verifies each signature with the `standardwebhooks` library;
5. rotates the key while a client keeps calling, switching to the new key part-way:
   no request fails;
6. revokes the old key: both instances refuse it within the key memo's bound.
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal

import openai
import pytest
from standardwebhooks import Webhook

from tests.realparts import (
    PostgresServer,
    RedisServer,
    _require_postgres,
    _require_redis,
    api_call,
    free_port,
    migrate_project,
    project_env,
    run_manage,
    start_beat,
    start_web,
    start_worker,
)
from tests.routing.webhooks.conftest import Receiver

pytestmark = pytest.mark.realparts

KEY_MEMO_SECONDS = 2  # API_KEY_CACHE_SECONDS: the revocation bound on another replica
MESSAGES = [{"role": "user", "content": "Summarise the retry fix in one line."}]


def call(base: str, key: str, method: str, path: str, body: dict | None = None):
    """(status, JSON body)."""
    status, _headers, answer = api_call(base, key, method, path, body)
    return status, answer


@pytest.fixture(scope="module")
def stack():
    _require_postgres()
    _require_redis()
    pg, redis = PostgresServer(), RedisServer()
    receiver = Receiver()
    procs = []
    try:
        db = f"platform_{free_port()}"
        pg.create_database(db)
        env = project_env(
            pg.url(db),
            redis.url,
            CACHE_URL=redis.url_for(7),
            SIM_TIME_SCALE=200,
            JOB_RESEND_AFTER_SECONDS=2,
            JOB_SWEEP_SECONDS=1,
            DB_CONN_MAX_AGE=60,
            API_THROTTLE_RATE="100000/min",
            API_THROTTLE_WRITE_RATE="off",
            API_TOKENS_PER_MINUTE="off",
            API_KEY_CACHE_SECONDS=KEY_MEMO_SECONDS,
            WEBHOOK_ALLOW_HTTP=1,
            WEBHOOK_ALLOW_HOSTS=f"127.0.0.1:{receiver.port}",
        )
        migrate_project(env, catalog=True)
        admin_key = json.loads(
            run_manage(env, "create_account", "team", "--json", "--credits", "1000")
        )["api_key"]
        ports = [free_port(), free_port()]
        webs = [start_web(env, p, name=f"web{i}") for i, p in enumerate(ports)]
        procs = [*webs, start_worker(env, concurrency=2, name="w0"), start_beat(env, name="b")]
        for p in procs:
            p.wait_ready(90)
        yield {
            "bases": [f"http://127.0.0.1:{p}" for p in ports],
            "admin": admin_key,
            "receiver": receiver,
            "procs": procs,
        }
    finally:
        for p in reversed(procs):
            p.kill()
        receiver.close()
        redis.cleanup()
        pg.cleanup()


def logs(stack) -> str:
    return "\n".join(f"--- {p.name}\n{p.log_text()[-2000:]}" for p in stack["procs"])


def chat(client, **extra):
    return client.chat.completions.create(model="sol", messages=MESSAGES, max_tokens=300, **extra)


def test_a_client_team_runs_its_own_house_through_the_api(stack):
    bases, admin, receiver = stack["bases"], stack["admin"], stack["receiver"]
    admin_sdk = openai.OpenAI(base_url=f"{bases[0]}/v1", api_key=admin, max_retries=0)

    # An SDK call with no service_tier is served on Standard, and carries its cost.
    probe = chat(admin_sdk)
    assert probe.service_tier == "default"  # OpenAI's word for Standard
    cost = Decimal(str(probe.usage.model_extra["cost"]))
    assert cost > 0

    # 1. A scoped key (one model, a daily cap of ten and a half such calls) and a webhook
    #    endpoint for budget alerts, through the API.
    status, made = call(
        bases[0],
        admin,
        "POST",
        "/api/v1/keys",
        {
            "name": "ci",
            "models": ["sol"],
            "spend_limit": str((cost * Decimal("10.5")).quantize(Decimal("0.000001"))),
            "spend_period": "day",
        },
    )
    assert status == 201, made
    key_id, key = made["id"], made["key"]
    cap = Decimal(made["spend_limit"])
    status, hook = call(
        bases[0],
        admin,
        "POST",
        "/api/v1/webhooks",
        {"url": receiver.url, "event_types": ["quota.threshold"]},
    )
    assert status == 201, hook
    secret = hook["secret"]

    # The scope holds: another model is refused, naming the reason.
    clients = [openai.OpenAI(base_url=f"{b}/v1", api_key=key, max_retries=0) for b in bases]
    with pytest.raises(openai.PermissionDeniedError) as refused_model:
        clients[0].chat.completions.create(model="terra", messages=MESSAGES, max_tokens=10)
    assert "may not use model" in str(refused_model.value)

    # 2. Spend with it through both instances until its cap refuses the next call.
    costs, refused = [], None
    for i in range(60):
        try:
            done = chat(clients[i % 2])
        except openai.PermissionDeniedError as exc:
            refused = exc
            break
        costs.append(Decimal(str(done.usage.model_extra["cost"])))
    assert refused is not None, logs(stack)
    assert refused.body["code"] == "key_spend_limit", refused.body
    spent = sum(costs)
    assert cap * Decimal("0.8") <= spent <= cap  # past 80 %, never past the cap

    # 3. The day's spend per key and model, as the admin key sees it: equal to what the
    #    responses said they cost.
    status, usage = call(bases[1], admin, "GET", "/api/v1/usage?bucket=day&group_by=key,model")
    assert status == 200, usage
    rows = {(r["key_id"], r["model"]): r for bucket in usage["data"] for r in bucket["results"]}
    # Two keys spent today, on one model: the admin's probe and the new key's calls.
    assert {m for _, m in rows} == {"gpt-5.6-sol"} and len(rows) == 2, usage
    mine = rows[(key_id, "gpt-5.6-sol")]
    assert mine["requests"] == len(costs)
    assert Decimal(mine["credits"]) == spent
    # The new key sees its own usage, and only it.
    status, own = call(bases[0], key, "GET", "/api/v1/usage?bucket=day&group_by=key")
    assert status == 200, own
    assert [(r["key_id"], Decimal(r["credits"])) for b in own["data"] for r in b["results"]] == [
        (key_id, spent)
    ]

    # 4. Signed quota.threshold webhooks at 50 % and 80 % of the key's cap (ten calls are
    #    95 % of it: never 100 %), verified with the standardwebhooks library.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(receiver.requests) < 2:
        time.sleep(0.2)
    payloads = [Webhook(secret).verify(body, headers) for headers, body in receiver.requests]
    crossed = sorted(
        p["data"]["threshold"]
        for p in payloads
        if p["type"] == "quota.threshold" and p["data"]["scope"] == "key"
    )
    assert crossed == [50, 80], (payloads, logs(stack))

    # 5. Rotate the key while a client keeps calling, switching to the new key part-way:
    #    no request fails.
    failures, current, calls = [], {"key": key}, [0]
    stop = threading.Event()

    def keep_calling():
        while not stop.is_set():
            status, body = call(bases[calls[0] % 2], current["key"], "GET", "/v1/models")
            if status != 200:
                failures.append((status, body))
            calls[0] += 1

    t = threading.Thread(target=keep_calling)
    t.start()
    try:
        time.sleep(0.5)
        status, rotated = call(bases[0], admin, "POST", f"/api/v1/keys/{key_id}/rotate", {})
        assert status == 201, rotated
        time.sleep(0.5)
        current["key"] = rotated["key"]
        time.sleep(0.5)
    finally:
        stop.set()
        t.join()
    assert calls[0] > 10 and failures == [], failures

    # 6. Revoke the old key: both instances refuse it within the key memo's bound, and
    #    the new key goes on working.
    status, _ = call(bases[0], admin, "DELETE", f"/api/v1/keys/{key_id}")
    assert status in (200, 204)
    assert call(bases[0], key, "GET", "/v1/models")[0] == 401  # at once where revoked
    time.sleep(KEY_MEMO_SECONDS + 0.5)
    for base in bases:
        assert call(base, key, "GET", "/v1/models")[0] == 401
        assert call(base, rotated["key"], "GET", "/v1/models")[0] == 200

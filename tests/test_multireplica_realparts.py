"""Many replicas that agree (issue 17): two web instances (gunicorn + uvicorn) on
different ports, three Celery workers and one beat on one throwaway PostgreSQL and one
Redis (broker and shared cache); clients spread their requests over both instances.

- A package's limit holds: what is charged never exceeds it, whichever instance took
  the work, and no job is run or charged twice (ledger_check passes).
- Rate limits hold across both instances: the requests (and tokens) accepted in a
  minute are the account's limit, not twice it (a limit changed with plain SQL counts
  once the key-to-account memo's bound, API_KEY_CACHE_SECONDS, has passed).
- A retirement made through the first instance's admin ("Retire now") is refused by
  both instances on their next request, though both had just quoted the model from
  their catalog memo.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest

from tests.realparts import (
    PostgresServer,
    RedisServer,
    _require_postgres,
    _require_redis,
    free_port,
    migrate_project,
    project_env,
    run_manage,
    start_beat,
    start_web,
    start_worker,
)
from tests.realparts import (
    api_call as call,
)
from tests.stack import SMALL

pytestmark = pytest.mark.realparts

CACHE_DB = 7  # the shared cache's Redis database (the broker keeps db 0)


@pytest.fixture(scope="module")
def servers():
    """One throwaway PostgreSQL and one Redis for the module's tests."""
    _require_postgres()
    _require_redis()
    pg, redis = PostgresServer(), RedisServer()
    try:
        yield pg, redis
    finally:
        redis.cleanup()
        pg.cleanup()


@pytest.fixture(scope="module")
def replicas(servers):
    postgres_server, redis_server = servers
    db = f"replicas_{free_port()}"
    postgres_server.create_database(db)
    redis_server.client(CACHE_DB).flushdb()
    env = project_env(
        postgres_server.url(db),
        redis_server.url,
        CACHE_URL=redis_server.url_for(CACHE_DB),
        SIM_TIME_SCALE=50,
        JOB_RESEND_AFTER_SECONDS=2,
        JOB_SWEEP_SECONDS=1,
        DB_CONN_MAX_AGE=60,
        API_THROTTLE_RATE="100000/min",
        API_THROTTLE_WRITE_RATE="off",
        API_TOKENS_PER_MINUTE="off",
        API_KEY_CACHE_SECONDS=KEY_MEMO_SECONDS,
    )
    migrate_project(env, catalog=True)
    keys = {
        name: json.loads(run_manage(env, "create_account", name, "--json", "--credits", "100"))[
            "api_key"
        ]
        for name in ("payer", "limited")
    }
    procs = []
    try:
        ports = [free_port(), free_port()]
        webs = [start_web(env, p, name=f"web{i}") for i, p in enumerate(ports)]
        workers = [start_worker(env, concurrency=2, name=f"w{i}") for i in range(3)]
        beat = start_beat(env, name="beat")
        procs = [*webs, *workers, beat]
        for p in webs:
            p.wait_ready(60)
        for p in (*workers, beat):
            p.wait_ready(90)
        yield {
            "env": env,
            "pg": postgres_server.connect(db),
            "bases": [f"http://127.0.0.1:{p}" for p in ports],
            "keys": keys,
            "procs": procs,
        }
    finally:
        for p in reversed(procs):
            p.kill()


def sql(r, statement: str, params=()):
    with r["pg"].cursor() as cur:
        cur.execute(statement, params)
    r["pg"].commit()


# The key-to-account memo's bound (routing.accounts.keys): an account changed with plain
# SQL (no signal, no shared generation) is seen by every instance within it.
KEY_MEMO_SECONDS = 2


def account_changed_by_sql(r, statement: str, params=()):
    sql(r, statement, params)
    time.sleep(KEY_MEMO_SECONDS + 0.5)


def spread(r, key: str, n: int, method: str, path: str, body=None, threads: int = 8):
    """n requests alternating between the instances, `threads` at a time."""
    bases = r["bases"]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda i: call(bases[i % 2], key, method, path, body), range(n)))


def away_from_a_minute_boundary(margin: float = 12.0) -> None:
    """Fixed one-minute windows: start a burst where it cannot straddle two."""
    left = 60 - time.time() % 60
    if left < margin:
        time.sleep(left + 0.2)


def wait_jobs(r, key: str, ids, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    seen = {}
    while time.monotonic() < deadline:
        seen = {j: call(r["bases"][0], key, "GET", f"/api/v1/jobs/{j}")[2]["status"] for j in ids}
        if all(s in ("succeeded", "failed", "cancelled") for s in seen.values()):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"jobs not finished: {seen}\n" + logs(r))


def logs(r) -> str:
    return "\n".join(f"--- {p.name}\n{p.log_text()[-2000:]}" for p in r["procs"])


def test_a_packages_limit_holds_across_replicas_and_nothing_is_charged_twice(replicas):
    r, key = replicas, replicas["keys"]["payer"]
    status, _, quote = call(r["bases"][0], key, "POST", "/api/v1/quotes", SMALL)
    assert status == 200, quote
    cost = Decimal(quote["cost"])
    limit = (cost * Decimal("6.5")).quantize(Decimal("0.000001"))  # room for 6 jobs
    sql(
        r,
        'UPDATE routing_quotapackage SET "limit" = %s WHERE account_id = '
        "(SELECT id FROM routing_account WHERE name = 'payer')",
        [limit],
    )
    answers = spread(r, key, 24, "POST", "/api/v1/jobs", SMALL)
    accepted = [body["id"] for code, _, body in answers if code == 202]
    refused = [body for code, _, body in answers if code != 202]
    assert len(accepted) == 6, answers
    assert all(b["type"].endswith("/quota-exhausted") for b in refused), refused
    assert set(wait_jobs(r, key, accepted).values()) == {"succeeded"}
    _, _, quota = call(r["bases"][1], key, "GET", "/api/v1/quota")
    package = quota["data"][0]
    assert Decimal(package["spent"]) <= limit
    assert Decimal(package["spent"]) == cost * 6
    assert Decimal(package["reserved"]) == 0
    check = json.loads(run_manage(r["env"], "ledger_check", "--json"))
    assert check["ok"], check


def test_rate_limits_hold_across_both_instances(replicas):
    r, key = replicas, replicas["keys"]["limited"]
    account_changed_by_sql(
        r,
        "UPDATE routing_account SET requests_per_minute = 20, tokens_per_minute = 15000 "
        "WHERE name = 'limited'",
    )
    away_from_a_minute_boundary()
    answers = spread(r, key, 60, "GET", "/api/v1/quota")
    codes = [code for code, _, _ in answers]
    assert codes.count(200) == 20, codes  # not 40: the count is shared
    for code, headers, body in answers:
        assert headers["x-ratelimit-limit-requests"] == "20"
        assert headers["x-ratelimit-limit-tokens"] == "15000"
        if code == 429:
            assert body["type"].endswith("/rate-limited")
            assert int(headers["Retry-After"]) >= 1
            assert headers["x-ratelimit-remaining-requests"] == "0"

    # Tokens: 3000 a job, 15000 a minute -> five jobs, from whichever instance.
    account_changed_by_sql(
        r, "UPDATE routing_account SET requests_per_minute = NULL WHERE name = 'limited'"
    )
    away_from_a_minute_boundary()
    answers = spread(r, key, 12, "POST", "/api/v1/jobs", SMALL)
    accepted = [body["id"] for code, _, body in answers if code == 202]
    assert len(accepted) == 5, [(c, b.get("detail")) for c, _, b in answers]
    assert all(b["type"].endswith("/rate-limited") for c, _, b in answers if c != 202)
    wait_jobs(r, key, accepted)


def admin_retire_now(r, base: str, slug: str) -> None:
    """Log in to `base`'s admin as a staff user and run the "Retire now" action on
    `slug` (CSRF token and session cookie as a browser keeps them)."""
    run_manage(
        r["env"],
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        "User.objects.filter(username='ops').exists() or "
        "User.objects.create_superuser('ops', 'ops@example.com', 'ops-pass-4821')",
    )
    pk = (
        run_manage(
            r["env"],
            "shell",
            "-c",
            f"from catalog.models import ModelVersion; print(ModelVersion.objects.get(slug={slug!r}).pk)",
        )
        .strip()
        .splitlines()[-1]
    )
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )

    def post(path: str, fields: dict) -> str:
        page = opener.open(f"{base}{path}", timeout=30).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        data = urllib.parse.urlencode({"csrfmiddlewaretoken": token, **fields}).encode()
        req = urllib.request.Request(f"{base}{path}", data=data, headers={"Referer": base + path})
        return opener.open(req, timeout=30).read().decode()

    post("/admin/login/?next=/admin/", {"username": "ops", "password": "ops-pass-4821"})
    page = post(
        "/admin/catalog/modelversion/",
        {
            "action": "retire_now",
            "_selected_action": pk,
            "apply": "1",
            "reason": "multi-replica test",
            "notice_override": "test",
        },
    )
    assert "Retired" in page, page[-2000:]


def test_a_retirement_reaches_both_instances_at_once(replicas):
    r, key = replicas, replicas["keys"]["payer"]
    # A model that serves today and is nobody's successor (so it may leave now).
    slug = (
        run_manage(
            r["env"],
            "shell",
            "-c",
            "from catalog import lifecycle; from catalog.models import ModelVersion\n"
            "print(next(m.slug for m in ModelVersion.objects.filter(predecessors=None)"
            ".exclude(family__slug='sol').order_by('slug') if lifecycle.is_serving(m)))",
        )
        .strip()
        .splitlines()[-1]
    )
    body = {k: v for k, v in SMALL.items() if k != "tier"} | {"model": slug}
    for base in r["bases"]:  # both instances have the model in their memo
        status, _, quote = call(base, key, "POST", "/api/v1/quotes", body)
        assert status == 200, quote
    # Retired through the first instance's admin ("Retire now"), as an admin would.
    admin_retire_now(r, r["bases"][0], slug)
    for base in reversed(r["bases"]):  # the very next request, on either instance
        status, _, refusal = call(base, key, "POST", "/api/v1/quotes", body)
        assert status == 410, (base, refusal)
        status, _, refusal = call(base, key, "POST", "/api/v1/jobs", body)
        assert status == 410, (base, refusal)
    check = json.loads(run_manage(r["env"], "ledger_check", "--json"))
    assert check["ok"], check

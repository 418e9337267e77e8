"""Rate limits per account and per package, requests and tokens per minute (issue 17):
set in the admin's fields, counted in the shared cache when work is accepted, 429
rate-limited with Retry-After past them, and OpenAI's x-ratelimit-* headers on every
/api/v1/ and /v1/ response."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from routing.api import throttling
from routing.core import ratelimit
from routing.models import Job, QuotaPackage, QuotaReservation
from tests.helpers import ApiClient

START = 1_000_000.5  # 19.5 s before the end of a 60 s window
SMALL = {
    "model": "sol",
    "input_tokens": 2000,
    "output_tokens": 1000,
    "turns": 1,
    "tool_seconds": 0,
    "deadline_seconds": 3600,
}


class Clock:
    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def clock(monkeypatch, settings) -> Clock:
    c = Clock(START)
    monkeypatch.setattr(throttling, "now", c)
    monkeypatch.setattr(ratelimit, "now", c)
    settings.API_THROTTLE_RATES = {"account": "100/min", "write": None, "anon": "50/min"}
    settings.API_TOKENS_PER_MINUTE = 1_000_000
    cache.clear()
    return c


def assert_rate_limited(r, wait: int):
    assert r.status_code == 429, r.content
    body = r.json()
    assert body["type"].endswith("/problems/rate-limited")
    assert r["Retry-After"] == str(wait)
    assert r["x-ratelimit-remaining-requests"] is not None


def test_every_api_response_carries_openai_rate_limit_headers(api, clock):
    r = api.get("/api/v1/quota")
    assert r.status_code == 200
    assert r["x-ratelimit-limit-requests"] == "100"
    assert r["x-ratelimit-remaining-requests"] == "99"
    assert r["x-ratelimit-reset-requests"] == "20s"
    assert r["x-ratelimit-limit-tokens"] == "1000000"
    assert r["x-ratelimit-remaining-tokens"] == "1000000"
    assert r["x-ratelimit-reset-tokens"] == "20s"
    assert api.get("/api/v1/jobs")["x-ratelimit-remaining-requests"] == "98"
    # The OpenAI-compatible surface, errors and unknown paths too.
    assert api.get("/v1/models")["x-ratelimit-limit-requests"] == "100"
    missing = api.get("/api/v1/jobs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert missing["x-ratelimit-limit-tokens"] == "1000000"
    unknown = api.get("/api/v1/no-such-thing")
    assert unknown.status_code == 404
    assert unknown["x-ratelimit-limit-requests"] == "100"
    assert unknown["x-ratelimit-limit-tokens"] == "1000000"


def test_without_a_key_the_headers_are_the_client_addresses(client, builtin_catalog, clock):
    r = client.get("/api/v1/models/")
    assert r["x-ratelimit-limit-requests"] == "50"
    assert r["x-ratelimit-remaining-requests"] == "49"
    assert "x-ratelimit-limit-tokens" not in r  # tokens are an account's


def test_an_accounts_own_request_rate_overrides_the_default(api, account, clock):
    account.requests_per_minute = 2
    account.save()
    assert api.get("/api/v1/quota")["x-ratelimit-limit-requests"] == "2"
    assert api.get("/api/v1/quota")["x-ratelimit-remaining-requests"] == "0"
    r = api.get("/api/v1/quota")
    assert_rate_limited(r, wait=20)
    assert r["x-ratelimit-remaining-requests"] == "0"
    assert r["x-ratelimit-reset-requests"] == "20s"
    clock.at = START + 20
    assert api.get("/api/v1/quota").status_code == 200


def test_tokens_are_counted_when_work_is_accepted(api, account, clock):
    account.tokens_per_minute = 7000  # two jobs of 3000 tokens, not three
    account.save()
    first = api.post_json("/api/v1/jobs", SMALL)
    assert first.status_code == 202, first.content
    assert first["x-ratelimit-remaining-tokens"] == "4000"
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 202
    refused = api.post_json("/api/v1/jobs", SMALL)
    assert_rate_limited(refused, wait=20)
    assert "7000 tokens per minute" in refused.json()["detail"]
    assert refused["x-ratelimit-remaining-tokens"] == "1000"
    # Refused work is neither written nor reserved; a refusal costs no tokens.
    assert Job.objects.filter(account=account).count() == 2
    assert QuotaReservation.objects.filter(package__account=account).count() == 2
    # A quote is not accepted work.
    assert api.post_json("/api/v1/quotes", SMALL).status_code == 200
    clock.at = START + 20  # the next minute
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 202


def test_a_request_larger_than_the_token_rate_says_so(api, account, clock):
    account.tokens_per_minute = 1000
    account.save()
    r = api.post_json("/api/v1/jobs", SMALL)
    assert r.status_code == 429
    assert "3000 tokens exceed this account's limit of 1000" in r.json()["detail"]


def test_a_packages_rates_hold_for_the_work_it_pays_for(api, account, clock):
    QuotaPackage.objects.filter(account=account).update(requests_per_minute=1)
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 202
    r = api.post_json("/api/v1/jobs", SMALL)
    assert_rate_limited(r, wait=20)
    assert "the paying package" in r.json()["detail"]
    assert api.get("/api/v1/jobs").status_code == 200  # reads are not its work
    QuotaPackage.objects.filter(account=account).update(
        requests_per_minute=None, tokens_per_minute=3500
    )
    clock.at = START + 20
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 202
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 429


def test_the_openai_surface_answers_its_own_429_envelope(api, account, clock):
    account.tokens_per_minute = 3  # "hi" and 5 tokens out: 6 tokens
    account.save()
    r = api.post_json(
        "/v1/chat/completions",
        {"model": "sol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
    )
    assert r.status_code == 429, r.content
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert r["Retry-After"] == "20"
    assert r["x-ratelimit-limit-tokens"] == "3"


def test_one_accounts_tokens_do_not_touch_another(api, account, clock, builtin_catalog):
    from decimal import Decimal

    from routing.accounts.accounts import account_create

    account.tokens_per_minute = 3000
    account.save()
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 202
    assert api.post_json("/api/v1/jobs", SMALL).status_code == 429
    _, raw = account_create(name="globex", default_credits=Decimal("100"))
    other = ApiClient(raw)
    other_account = other.get("/api/v1/quota")
    assert other_account["x-ratelimit-remaining-tokens"] == "1000000"
    assert other.post_json("/api/v1/jobs", SMALL).status_code == 202


def test_the_admin_sets_an_accounts_and_a_packages_rates(admin_client, account):
    page = admin_client.get(f"/admin/routing/account/{account.pk}/change/")
    assert b'name="requests_per_minute"' in page.content
    assert b'name="tokens_per_minute"' in page.content
    package = QuotaPackage.objects.get(account=account)
    page = admin_client.get(f"/admin/routing/quotapackage/{package.pk}/change/")
    assert b'name="requests_per_minute"' in page.content
    assert b'name="tokens_per_minute"' in page.content

"""Per-account API throttling (issue 13): past its rate an account gets 429 rate-limited
problem+json with Retry-After, another account does not notice, writes have a stricter
rate, requests without a key count per client address (X-Forwarded-For only behind
trusted proxies), probes are never throttled, and the schema documents the 429."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator

from deploy.settings import env_rate, half_rate
from routing.accounts.accounts import account_create
from routing.api import throttling
from tests.helpers import GDPVAL, ApiClient

PROBLEM = "application/problem+json"
START = 1_000_000.5  # 19.5 s before the end of a 60 s window (1_000_020)


class Clock:
    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock(START)
    monkeypatch.setattr(throttling, "now", c)
    return c


@pytest.fixture
def rates(settings, clock):
    """Throttling on, in a cache of this test's own; tests set the rates they need."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "throttle-tests",
        }
    }
    cache.clear()
    settings.API_THROTTLE_RATES = {"account": "3/min", "write": "2/min", "anon": "2/min"}
    yield settings.API_THROTTLE_RATES
    cache.clear()


@pytest.fixture
def other_api(builtin_catalog):
    _, raw = account_create(name="globex", default_credits=Decimal("100"))
    return ApiClient(raw)


def assert_rate_limited(r, wait: int):
    assert r.status_code == 429
    assert r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["type"].endswith("/problems/rate-limited")
    assert body["title"] == "Rate limit exceeded"
    assert body["status"] == 429
    assert r["Retry-After"] == str(wait)
    assert body["retry_after_seconds"] == wait
    assert f"{wait} seconds" in body["detail"]


def test_an_account_past_its_rate_gets_429_with_retry_after_until_the_window_ends(
    api, rates, clock
):
    for _ in range(3):
        assert api.get("/api/v1/quota").status_code == 200
    assert_rate_limited(api.get("/api/v1/quota"), wait=20)
    assert_rate_limited(api.get("/api/v1/jobs"), wait=20)  # the rate is the account's

    clock.at = START + 10
    assert_rate_limited(api.get("/api/v1/quota"), wait=10)
    clock.at = START + 20  # the next window
    assert api.get("/api/v1/quota").status_code == 200


def test_one_accounts_throttle_does_not_affect_another(api, other_api, rates):
    for _ in range(3):
        assert api.get("/api/v1/quota").status_code == 200
    assert api.get("/api/v1/quota").status_code == 429
    for _ in range(3):
        assert other_api.get("/api/v1/quota").status_code == 200
    assert other_api.get("/api/v1/quota").status_code == 429


def test_keys_of_one_account_share_its_rate(api, account, rates):
    from routing.accounts.keys import api_key_create

    _, raw = api_key_create(account=account, name="second")
    second = ApiClient(raw)
    for _ in range(3):
        assert api.get("/api/v1/quota").status_code == 200
    assert second.get("/api/v1/quota").status_code == 429


def test_writes_have_a_stricter_rate(api, rates):
    rates["account"] = "100/min"
    body = {**GDPVAL, "deadline_seconds": 3600}
    for _ in range(2):
        assert api.post_json("/api/v1/quotes", body).status_code == 200
    assert_rate_limited(api.post_json("/api/v1/quotes", body), wait=20)
    assert_rate_limited(api.delete("/api/v1/files/file-nope"), wait=20)
    assert api.get("/api/v1/quota").status_code == 200  # reads go on


def test_without_a_key_requests_count_per_client_address(client, builtin_catalog, rates):
    for _ in range(2):
        assert client.get("/api/v1/tiers/", REMOTE_ADDR="10.0.0.1").status_code == 200
    assert_rate_limited(client.get("/api/v1/models/", REMOTE_ADDR="10.0.0.1"), wait=20)
    # A forged X-Forwarded-For is not a new client (no trusted proxy).
    forged = client.get("/api/v1/tiers/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4")
    assert forged.status_code == 429
    assert client.get("/api/v1/tiers/", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_behind_a_trusted_proxy_the_forwarded_address_counts(
    client, builtin_catalog, rates, settings
):
    settings.TRUSTED_PROXY_COUNT = 1
    proxy = {"REMOTE_ADDR": "10.9.9.9"}
    for _ in range(2):
        r = client.get("/api/v1/tiers/", HTTP_X_FORWARDED_FOR="6.6.6.6, 1.1.1.1", **proxy)
        assert r.status_code == 200
    # The client's own left-most entry is its word, not the proxy's: still 1.1.1.1.
    r = client.get("/api/v1/tiers/", HTTP_X_FORWARDED_FOR="7.7.7.7, 1.1.1.1", **proxy)
    assert r.status_code == 429
    r = client.get("/api/v1/tiers/", HTTP_X_FORWARDED_FOR="1.1.1.2", **proxy)
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("meta", "proxies", "expected"),
    [
        ({"REMOTE_ADDR": "10.0.0.1"}, 0, "10.0.0.1"),
        ({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}, 0, "10.0.0.1"),
        ({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "9.9.9.9, 1.2.3.4"}, 1, "1.2.3.4"),
        ({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "9.9.9.9, 1.2.3.4"}, 2, "9.9.9.9"),
        ({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}, 2, "10.0.0.1"),
        ({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "not-an-ip"}, 1, None),
        ({"REMOTE_ADDR": "::1"}, 0, "::1"),
        ({}, 0, None),  # a request made up in code (force_login), a unix socket
        ({"REMOTE_ADDR": ""}, 0, None),
    ],
)
def test_the_client_address(rf, settings, meta, proxies, expected):
    settings.TRUSTED_PROXY_COUNT = proxies
    request = rf.get("/")
    request.META.pop("REMOTE_ADDR", None)
    request.META.update(meta)
    assert throttling.client_ip(request) == expected


def test_probes_are_never_throttled(client, db, rates):
    rates["anon"] = "1/min"
    for _ in range(3):
        assert client.get("/api/v1/ping").status_code == 200
        assert client.get("/api/v1/health").status_code in (200, 503)


def test_a_rate_set_off_does_not_throttle(api, rates):
    rates["account"] = None
    for _ in range(5):
        assert api.get("/api/v1/quota").status_code == 200


def test_the_cache_away_serves_instead_of_failing(api, rates):
    away = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
        }
    }
    with override_settings(CACHES=away):
        for _ in range(5):
            assert api.get("/api/v1/quota").status_code == 200


def test_tests_are_not_throttled_by_default(api, settings):
    assert set(settings.API_THROTTLE_RATES.values()) == {None}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1200/min", "1200/min"), ("5/s", "5/s"), ("off", None), ("0", None), ("", None)],
)
def test_rates_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("API_THROTTLE_RATE", value)
    assert env_rate("API_THROTTLE_RATE", "1200/min") == expected


@pytest.mark.parametrize("value", ["fast", "1200", "-5/min", "5/fortnight", "1.5/min"])
def test_a_bad_rate_is_refused_at_start(monkeypatch, value):
    monkeypatch.setenv("API_THROTTLE_RATE", value)
    with pytest.raises(RuntimeError, match="API_THROTTLE_RATE"):
        env_rate("API_THROTTLE_RATE", "1200/min")


def test_writes_and_keyless_requests_default_to_half_the_rate():
    assert half_rate("1200/min") == "600/min"
    assert half_rate("1/s") == "1/s"
    assert half_rate(None) is None


def test_the_schema_documents_429_on_throttled_operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    paths = schema["paths"]
    for path, method in [
        ("/api/v1/jobs", "post"),
        ("/api/v1/jobs", "get"),
        ("/api/v1/files/{file_id}", "delete"),
        ("/api/v1/models/", "get"),
    ]:
        response = paths[path][method]["responses"]["429"]
        assert "rate-limited" in response["description"]
        assert "Retry-After" in response["headers"]
    # The quota 429 of a job submission keeps its text.
    assert "quota" in paths["/api/v1/jobs"]["post"]["responses"]["429"]["description"]
    assert "429" not in paths["/api/v1/ping"]["get"]["responses"]
    assert "429" not in paths["/api/v1/health"]["get"]["responses"]

"""The key-to-account memo (routing.accounts.keys, issue 16): a valid key's lookup is
kept API_KEY_CACHE_SECONDS per process, keyed by the key's hash; a revocation, key
deletion or account change is seen at once by the process that made it, by any other
within the bound (sooner after the shared generation moves), and tenants stay apart."""

import pytest
from django.db import connection

from routing.accounts import keys
from routing.accounts.keys import api_key_create, api_key_revoke, hash_key
from routing.core import shared
from routing.models import ApiKey
from tests.helpers import ApiClient, make_account, make_package

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch, settings):
    settings.API_KEY_CACHE_SECONDS = 5
    c = Clock()
    monkeypatch.setattr(keys, "time", c)
    return c


@pytest.fixture
def tenant(db):
    account = make_account()
    make_package(account, limit="100")
    key, raw = api_key_create(account=account)
    return account, key, raw


def quota_status(raw):
    return ApiClient(raw).get("/api/v1/quota").status_code


def revoke_elsewhere(key):
    """What another process's revocation looks like from here: the row changes, this
    process's memo is not told."""
    ApiKey.objects.filter(pk=key.pk).update(revoked_at="2026-01-01T00:00:00Z")


def test_a_valid_key_is_read_once_then_kept_by_its_hash(tenant, clock, django_assert_num_queries):
    _, key, raw = tenant
    keys.api_key_authenticate(raw)
    assert list(keys._memo) == [hash_key(raw)] and raw not in str(keys._memo)
    with django_assert_num_queries(0):
        assert keys.api_key_authenticate(raw).account.pk == key.account_id


def test_revoked_in_this_process_is_refused_at_once(tenant, clock):
    account, key, raw = tenant
    assert quota_status(raw) == 200
    api_key_revoke(key=key)
    r = ApiClient(raw).get("/api/v1/quota")
    assert r.status_code == 401 and "was revoked on" in r.json()["detail"]


def test_revoked_through_the_admin_action_is_refused_at_once(tenant, clock, admin_client):
    _, key, raw = tenant
    assert quota_status(raw) == 200
    admin_client.post("/admin/routing/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    assert quota_status(raw) == 401


def test_a_deleted_key_or_account_is_refused_at_once(tenant, clock):
    account, key, raw = tenant
    other = make_account("other")
    _, other_raw = api_key_create(account=other)
    assert quota_status(raw) == 200 and quota_status(other_raw) == 200
    key.delete()
    assert quota_status(raw) == 401
    other.delete()
    assert quota_status(other_raw) == 401


def test_an_account_change_is_seen_at_once(tenant, clock):
    account, _, raw = tenant
    assert keys.api_key_authenticate(raw).account.requests_per_minute is None
    account.requests_per_minute = 30
    account.save()
    assert keys.api_key_authenticate(raw).account.requests_per_minute == 30


def test_revoked_elsewhere_is_refused_within_the_bound(tenant, clock):
    _, key, raw = tenant
    assert quota_status(raw) == 200
    revoke_elsewhere(key)
    clock.now += 4.9  # within API_KEY_CACHE_SECONDS this process may still serve it
    assert quota_status(raw) == 200
    clock.now += 0.2  # past the bound: read again, refused
    assert quota_status(raw) == 401


def test_revoked_elsewhere_is_refused_after_the_shared_generation_moves(tenant, clock):
    _, key, raw = tenant
    assert quota_status(raw) == 200
    revoke_elsewhere(key)
    shared.bump_now(keys.GENERATION)  # the other process's revocation bumped it
    clock.now += keys.GENERATION_CHECK_SECONDS
    assert quota_status(raw) == 401


def test_no_memo_with_zero_seconds(tenant, settings):
    settings.API_KEY_CACHE_SECONDS = 0
    _, key, raw = tenant
    assert quota_status(raw) == 200
    revoke_elsewhere(key)
    assert quota_status(raw) == 401 and not keys._memo


def test_unknown_keys_are_not_kept(tenant, clock):
    assert quota_status("mlr_not-a-real-key") == 401
    assert not keys._memo


def test_tenants_stay_apart_with_the_memo(tenant, clock):
    account, _, raw = tenant
    other = make_account("other")
    make_package(other, limit="7")
    _, other_raw = api_key_create(account=other)
    for _ in range(2):  # first read, then from the memo
        mine = ApiClient(raw).get("/api/v1/quota").json()["data"]
        theirs = ApiClient(other_raw).get("/api/v1/quota").json()["data"]
        assert [p["limit"] for p in mine] != [p["limit"] for p in theirs]
        assert keys.api_key_authenticate(raw).account.pk == account.pk
        assert keys.api_key_authenticate(other_raw).account.pk == other.pk


def test_a_lookup_racing_a_revocation_is_not_kept(tenant, clock, monkeypatch):
    _, key, raw = tenant

    class Racing:
        def cursor(self):
            keys.forget_keys(digests=[key.key_hash])  # a revocation lands mid-lookup
            return connection.cursor()

    monkeypatch.setattr(keys, "connection", Racing())
    keys.api_key_authenticate(raw)
    assert not keys._memo

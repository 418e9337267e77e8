import pytest

from routing.accounts.keys import api_key_create, api_key_revoke, hash_key
from routing.models import ApiKey
from tests.helpers import GDPVAL, ApiClient, make_account, make_package

pytestmark = pytest.mark.django_db
PROBLEM = "application/problem+json"


@pytest.fixture
def account_with_key(db):
    """Keys do not depend on the catalog: a new account's key and main package, built by
    the factories (no catalog.toml). Overrides tests/routing/conftest.py's fixture."""
    account = make_account()
    make_package(account, limit="100")
    _, raw = api_key_create(account=account)
    return account, raw


def test_keys_are_stored_hashed_and_shown_once(account_with_key):
    account, raw = account_with_key
    key = ApiKey.objects.get(account=account)
    assert key.key_hash == hash_key(raw) and raw not in key.key_hash
    assert raw.startswith("mlr_") and key.prefix == raw[:12]
    assert not ApiKey.objects.filter(key_hash=raw).exists()


def test_a_valid_key_authenticates_and_records_last_use(api, account):
    assert api.get("/api/v1/quota").status_code == 200
    assert ApiKey.objects.get(account=account).last_used_at is not None


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (None, "An API key is required"),
        ("Bearer mlr_not-a-real-key", "Invalid API key."),
        ("Token abc", "Send the key as 'Authorization: Bearer <key>'."),
        ("Bearer", "Send the key as"),
    ],
)
def test_missing_or_bad_keys_get_a_401_problem(builtin_catalog, header, detail):
    client = ApiClient(**({"HTTP_AUTHORIZATION": header} if header else {}))
    r = client.post_json("/api/v1/quotes", dict(GDPVAL, deadline_seconds=600))
    assert r.status_code == 401 and r["Content-Type"] == PROBLEM
    assert detail in r.json()["detail"]
    assert r["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_key_is_refused(account_with_key):
    account, raw = account_with_key
    api_key_revoke(key=ApiKey.objects.get(account=account))
    r = ApiClient(raw).get("/api/v1/quota")
    assert r.status_code == 401 and "was revoked on" in r.json()["detail"]


def test_an_account_can_hold_several_keys(account_with_key):
    account, first = account_with_key
    _, second = api_key_create(account=account, name="ci")
    assert ApiClient(first).get("/api/v1/quota").status_code == 200
    assert ApiClient(second).get("/api/v1/quota").status_code == 200

"""Issue 27: a key's `tiers` bound the router's choice. When the router chooses (a quote
or a native job without a tier, `service_tier: "auto"`), it chooses the cheapest of the
key's tiers that meets the deadline, or refuses naming the restriction; a default tier
(the account's, or Standard) the key may not use lets the router choose among the key's
tiers; a tier the client names itself must be allowed (403)."""

from types import SimpleNamespace

import openai
import pytest

from routing.accounts.defaults import tier_choice
from routing.models import Job
from tests.helpers import GDPVAL, ApiClient, job_submit

MESSAGES = [{"role": "user", "content": "Write the release note for the retry fix."}]


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


def key_with(api, *tiers) -> tuple[int, ApiClient, str]:
    """A key of the account limited to `tiers`: its id, a client, the key."""
    r = api.post_json("/api/v1/keys", {"tiers": list(tiers)})
    assert r.status_code == 201, r.content
    return r.json()["id"], ApiClient(r.json()["key"]), r.json()["key"]


def quote(client, deadline, **extra):
    return client.post_json("/api/v1/quotes", GDPVAL | {"deadline_seconds": deadline} | extra)


@pytest.mark.django_db
def test_the_router_chooses_among_the_keys_tiers_for_a_quote(api):
    # GDP-Val on Sol: 1 h gets Flex, 400 s Priority (README), for an unrestricted key.
    assert quote(api, 3600).json()["tier"] == "flex"
    _, fast, _ = key_with(api, "priority", "ultrafast")
    body = quote(fast, 3600).json()
    assert body["tier"] == "priority"  # the cheapest the key may use
    reasons = {c["tier"]: c["reason"] for c in body["candidates"]}
    assert "not allowed for this API key" in reasons["flex"]
    _, slow, _ = key_with(api, "flex", "standard")
    r = quote(slow, 400)
    assert r.status_code == 422 and r.json()["type"].endswith("/deadline-infeasible")
    assert "restricts the tiers to flex, standard" in r.json()["detail"]
    assert r.json()["fastest"]["tier"] == "standard"  # the fastest it may use
    r = quote(slow, 3600, tier="priority")  # named: refused
    assert r.status_code == 403 and r.json()["type"].endswith("/key-tier-not-allowed")


@pytest.mark.django_db
def test_the_router_chooses_among_the_keys_tiers_for_a_job(api):
    key_id, fast, _ = key_with(api, "ultrafast")
    r = job_submit(fast, deadline_seconds=3600)
    assert r.status_code == 202, r.content
    assert r.json()["tier"] == "ultrafast"
    assert Job.objects.get(api_key_id=key_id).tier.slug == "ultrafast"
    _, slow, _ = key_with(api, "flex")
    r = job_submit(slow, deadline_seconds=400)
    assert r.status_code == 422 and "restricts the tiers to flex" in r.json()["detail"]


def acct(tier="standard", deadline=None):
    return SimpleNamespace(default_tier=tier, default_deadline_seconds=deadline)


@pytest.mark.parametrize(
    "sent, tier, deadline, account, allowed, expected",
    [
        (None, None, None, acct(), ["flex"], (None, None, "key-tiers")),
        (None, None, None, acct(), ["flex", "standard"], ("standard", None, "account-tier")),
        (None, None, None, acct("priority"), ["flex"], (None, None, "key-tiers")),
        ("auto", None, None, acct(), ["priority"], (None, None, "key-tiers")),
        ("auto", None, None, acct(deadline=40), ["flex"], (None, 40.0, "account-deadline")),
        (None, None, 30.0, acct(), ["flex"], (None, 30.0, "deadline")),
        ("priority", "priority", None, acct(), ["flex"], ("priority", None, "sent")),
    ],
)
def test_the_default_tier_within_the_keys_tiers(sent, tier, deadline, account, allowed, expected):
    c = tier_choice(
        sent=sent, tier=tier, deadline_seconds=deadline, account=account, allowed_tiers=allowed
    )
    assert (c.tier, c.deadline_seconds, c.rule) == expected


@pytest.mark.django_db(transaction=True)
def test_an_sdk_call_without_service_tier_runs_on_a_tier_the_key_allows(api, sdk):
    client = sdk(key_with(api, "flex")[2])
    c = client.chat.completions.create(model="sol", messages=MESSAGES, max_completion_tokens=5)
    assert c.service_tier == "flex"  # not the account's Standard, which the key may not use
    r = client.responses.create(model="sol", input="Hi", max_output_tokens=5)
    assert r.service_tier == "flex"
    with pytest.raises(openai.PermissionDeniedError):  # named: refused
        client.chat.completions.create(model="sol", messages=MESSAGES, service_tier="default")
    # auto with a deadline: the cheapest of the key's tiers that meets it (1,024 tokens on
    # Sol: Standard ~20 s, Priority ~9 s, Ultrafast ~3 s)
    c = sdk(key_with(api, "flex", "ultrafast")[2]).chat.completions.create(
        model="sol", messages=MESSAGES, service_tier="auto", extra_body={"deadline_seconds": 12}
    )
    assert c.service_tier == "ultrafast"
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(
            model="sol", messages=MESSAGES, service_tier="auto", extra_body={"deadline_seconds": 12}
        )
    assert "restricts the tiers to flex" in caught.value.message

"""Issue 27 item 6, per key: a key's `fallbacks`, tried in order after the requested
model (retired, out of quota, rate-limited, no tier meets the deadline) when the body
names no `models` list, by the body fallbacks' own rule; checked when saved (at most 5,
each one the key may use and the catalog knows). Through the official `openai` SDK
against Django's live server (no mocks of the SDK or of HTTP)."""

import openai
import pytest

from catalog.models import ModelVersion
from routing.admin.accounts import ApiKeyForm
from routing.models import ApiKey, Job
from routing.quota import clear_scopes
from tests.helpers import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)
RETIRED = "gpt-5.3-codex-spark"
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


def make_key(api, **body) -> dict:
    r = api.post_json("/api/v1/keys", body)
    assert r.status_code == 201, r.content
    return r.json()


def test_a_retired_model_falls_back_to_the_keys_fallback(api, sdk):
    made = make_key(api, fallbacks=["sol"])
    assert made["fallbacks"] == ["sol"]
    client = sdk(made["key"])
    c = client.chat.completions.create(model=RETIRED, messages=MESSAGES, max_completion_tokens=5)
    assert c.model == "gpt-5.6-sol"  # the model that served
    r = client.responses.create(model=RETIRED, input="Hi", max_output_tokens=5)
    assert r.model == "gpt-5.6-sol"
    jobs = Job.objects.filter(api_key_id=made["id"])
    assert {j.requested_model for j in jobs} == {"sol"} and jobs.count() == 2
    # without fallbacks: the retired model's refusal
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(make_key(api)["key"]).chat.completions.create(model=RETIRED, messages=MESSAGES)
    assert caught.value.status_code == 410


def test_over_quota_falls_back(api, account, sdk):
    sol = ModelVersion.objects.get(slug="gpt-5.6-sol")
    account.packages.update(scope="family", family_id=sol.family_id)  # pays for Sol only
    clear_scopes()
    other = next(
        m
        for m in ModelVersion.objects.exclude(family_id=sol.family_id)
        if api.post_json(
            "/v1/chat/completions", {"model": m.slug, "messages": MESSAGES, "max_tokens": 5}
        ).status_code
        == 429
    )
    plain = sdk(make_key(api)["key"])
    with pytest.raises(openai.RateLimitError):
        plain.chat.completions.create(model=other.slug, messages=MESSAGES, max_tokens=5)
    client = sdk(make_key(api, fallbacks=["gpt-5.6-sol"])["key"])
    c = client.chat.completions.create(model=other.slug, messages=MESSAGES, max_tokens=5)
    assert c.model == "gpt-5.6-sol"


def test_the_bodys_models_replace_the_keys(api, sdk):
    client = sdk(make_key(api, fallbacks=["sol"])["key"])
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model=RETIRED, messages=MESSAGES, extra_body={"models": [RETIRED]}
        )
    assert caught.value.status_code == 410  # the body's list, which names no other model
    assert Job.objects.count() == 0


def test_a_fallback_the_key_may_not_use_is_refused_at_save(api):
    for body, why in [
        ({"models": ["sol"], "fallbacks": ["luna"]}, "not among the key's models"),
        ({"fallbacks": ["no-such-model"]}, "not a model of the catalog"),
        ({"fallbacks": ["sol", "SOL"]}, "listed twice"),
        ({"fallbacks": ["sol"] * 6}, "no more than 5"),
        ({"fallbacks": "sol"}, ""),
        ({"fallbacks": [1]}, ""),
    ]:
        r = api.post_json("/api/v1/keys", body)
        assert r.status_code == 400, (body, r.content)
        assert "fallbacks" in r.json().get("errors", r.json()) or "fallbacks" in str(r.json())
        assert why.lower() in str(r.json()).lower(), r.json()
    assert ApiKey.objects.count() == 1  # none made


def test_shown_listed_and_carried_over_by_a_rotation(api):
    made = make_key(api, models=["sol", "luna"], fallbacks=["luna"])
    assert api.get(f"/api/v1/keys/{made['id']}").json()["fallbacks"] == ["luna"]
    listed = {k["id"]: k for k in api.get("/api/v1/keys").json()["data"]}
    assert listed[made["id"]]["fallbacks"] == ["luna"]
    new = api.post_json(f"/api/v1/keys/{made['id']}/rotate", {}).json()
    assert new["fallbacks"] == ["luna"]
    assert ApiKey.objects.get(pk=new["id"]).fallbacks == ["luna"]


def test_the_admin_form_checks_fallbacks_too(api):
    key = ApiKey.objects.get(pk=make_key(api, models=["sol"])["id"])

    def form(**changes):
        data = {
            "account": key.account_id,
            "name": key.name,
            "prefix": key.prefix,
            "key_hash": key.key_hash,
            "role": key.role,
            "allowed_models": '["sol"]',
            "allowed_tiers": "[]",
            "fallbacks": "[]",
            "allow_batches": "on",
            "spend_period": "month",
        } | changes
        return ApiKeyForm(data=data, instance=key)

    assert form(fallbacks='["sol"]').is_valid(), form(fallbacks='["sol"]').errors
    bad = form(fallbacks='["luna"]')
    assert not bad.is_valid() and "not among the key's models" in bad.errors["fallbacks"][0]
    assert not form(fallbacks='"sol"').is_valid()


def test_native_quotes_and_jobs_check_the_keys_models(api):
    k = ApiClient(make_key(api, models=["sol"])["key"])
    body = {"model": "luna", "input_tokens": 100, "output_tokens": 100, "turns": 1}
    r = k.post_json("/api/v1/quotes", body | {"tool_seconds": 0, "deadline_seconds": 3600})
    assert r.status_code == 403 and r.json()["type"].endswith("/key-model-not-allowed")

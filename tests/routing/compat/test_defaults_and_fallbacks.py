"""Item 6 of issue 27: the defaults SDK callers expect (no service_tier: the account's
default tier, Standard unless set; auto without a deadline: the account's default
deadline, else Standard) and fallbacks (`models: [...]`, OpenRouter's shape) tried in
order when a model is retired, out of quota, rate-limited or cannot meet the deadline."""

from types import SimpleNamespace

import pytest

from catalog.models import ModelVersion
from routing.accounts.defaults import tier_choice
from routing.models import Job
from routing.quota import clear_scopes
from tests.routing.compat.test_chat_views import MESSAGES, chat, error_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_time(settings):
    settings.SIM_TIME_SCALE = 1e6


def acct(**kw):
    return SimpleNamespace(default_tier="standard", default_deadline_seconds=None, **kw)


@pytest.mark.parametrize(
    "sent, tier, deadline, account, expected",
    [
        (None, None, None, acct(), ("standard", None, "account-tier")),
        (None, None, None, SimpleNamespace(default_tier="flex"), ("flex", None, "account-tier")),
        (None, None, 30.0, acct(), (None, 30.0, "deadline")),
        ("auto", None, None, acct(), ("standard", None, "standard")),
        ("auto", None, 12.0, acct(), (None, 12.0, "deadline")),
        (
            "auto",
            None,
            None,
            SimpleNamespace(default_tier="standard", default_deadline_seconds=40),
            (None, 40.0, "account-deadline"),
        ),
        (
            None,
            None,
            None,
            SimpleNamespace(default_tier="auto", default_deadline_seconds=40),
            (None, 40.0, "account-deadline"),
        ),
        ("priority", "priority", None, acct(), ("priority", None, "sent")),
        ("default", "standard", 9.0, acct(), ("standard", 9.0, "sent")),
    ],
)
def test_the_rule(sent, tier, deadline, account, expected):
    c = tier_choice(sent=sent, tier=tier, deadline_seconds=deadline, account=account)
    assert (c.tier, c.deadline_seconds, c.rule) == expected


def test_no_service_tier_is_standard(api):
    body = chat(api, max_tokens=10).json()
    assert body["tier"] == "standard" and body["service_tier"] == "default"
    assert Job.objects.get().requested_tier == "standard"


def test_the_accounts_default_tier_and_deadline(api, account):
    account.default_tier = "priority"
    account.save()
    assert chat(api, max_tokens=10).json()["tier"] == "priority"
    account.default_tier = "standard"
    account.default_deadline_seconds = 5  # 1,024 tokens on Sol: only Ultrafast meets 5 s
    account.save()
    assert chat(api, max_tokens=10).json()["tier"] == "standard"  # absent: the tier
    assert chat(api, service_tier="auto").json()["tier"] == "ultrafast"  # auto: the deadline
    account.default_tier = "auto"
    account.save()
    assert chat(api).json()["tier"] == "ultrafast"


def test_a_retired_model_falls_back_to_the_next(api):
    r = chat(api, model="gpt-5.3-codex-spark", models=["gpt-5.3-codex-spark", "sol"])
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["model"] == "gpt-5.6-sol"  # the model that served
    job = Job.objects.get()
    assert job.requested_model == "sol" and job.model.slug == "gpt-5.6-sol"


def test_a_deadline_the_first_cannot_meet_falls_back(api):
    # 0.5 s: no tier of Sol meets it; an unknown fallback is passed over; all refused:
    # the first model's refusal.
    err = error_of(chat(api, deadline_seconds=0.5, models=["no-such-model", "sol"]), 422)
    assert err["code"] == "deadline_infeasible"
    assert Job.objects.count() == 0


def test_no_quota_falls_back(api, account):
    sol = ModelVersion.objects.get(slug="gpt-5.6-sol")
    account.packages.update(scope="family", family_id=sol.family_id)  # pays for Sol only
    clear_scopes()
    other = next(
        m
        for m in ModelVersion.objects.exclude(family_id=sol.family_id)
        if chat(api, model=m.slug, max_tokens=10).status_code == 429
    )
    r = chat(api, model=other.slug, models=["sol"], max_tokens=10)
    assert r.status_code == 200, r.content
    assert r.json()["model"] == "gpt-5.6-sol"
    assert Job.objects.get().requested_model == "sol"


@pytest.mark.parametrize(
    "models", [["a"] * 6, "sol", [1], [""]], ids=["many", "str", "int", "blank"]
)
def test_bad_fallbacks(api, models):
    err = error_of(chat(api, models=models), 400)
    assert err["param"] == "models"


def test_an_idempotent_retry_with_fallbacks_replays_the_job(api):
    body = {"model": "gpt-5.3-codex-spark", "models": ["sol"], "messages": MESSAGES}
    first = api.post_json("/v1/chat/completions", body, HTTP_IDEMPOTENCY_KEY="k1")
    again = api.post_json("/v1/chat/completions", body, HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 200, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == again.json()["id"] and Job.objects.count() == 1

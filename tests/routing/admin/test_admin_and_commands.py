import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from routing.accounts.keys import hash_key
from routing.models import Account, ApiKey, QuotaPackage
from tests.helpers import ApiClient

pytestmark = pytest.mark.django_db


def test_create_account_prints_a_working_key_as_json(builtin_catalog):
    out = StringIO()
    call_command("create_account", "initech", "--json", "--credits", "250", stdout=out)
    data = json.loads(out.getvalue())
    assert data["account"] == "initech" and data["api_key"].startswith("mlr_")
    assert ApiKey.objects.get(key_hash=hash_key(data["api_key"])).account.name == "initech"
    assert QuotaPackage.objects.get(account__name="initech").limit == 250
    assert ApiClient(data["api_key"]).get("/api/v1/quota").status_code == 200


def test_create_account_refuses_a_duplicate_and_bad_credits(builtin_catalog):
    call_command("create_account", "dup", stdout=StringIO())
    with pytest.raises(CommandError, match="exists already"):
        call_command("create_account", "dup", stdout=StringIO())
    with pytest.raises(CommandError, match="--credits must be a number"):
        call_command("create_account", "x", "--credits", "lots", stdout=StringIO())
    assert not Account.objects.filter(name="x").exists()


def test_demo_setup_creates_admin_and_demo_account_once(builtin_catalog, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = StringIO()
    call_command("demo_setup", stdout=out)
    assert "demo api key: mlr_" in out.getvalue()
    call_command("demo_setup", stdout=StringIO())
    assert Account.objects.filter(name="demo").count() == 1
    assert "demo api key" in (tmp_path / "demo-credentials.txt").read_text()


def test_admin_creates_a_key_shown_once_and_revokes_it(admin_client, account):
    r = admin_client.post(
        "/admin/routing/account/",
        {"action": "create_key", "_selected_action": [account.pk]},
        follow=True,
    )
    text = r.content.decode()
    raw = text.split("it is not shown again): ")[1].split("<")[0]
    assert ApiClient(raw).get("/api/v1/quota").status_code == 200
    key = ApiKey.objects.get(key_hash=hash_key(raw))
    admin_client.post("/admin/routing/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    assert ApiClient(raw).get("/api/v1/quota").status_code == 401


def test_admin_tries_the_router_for_an_account(admin_client, account):
    url = f"/admin/routing/account/{account.pk}/quote/"
    assert admin_client.get(url).status_code == 200
    r = admin_client.post(
        url,
        {
            "model": "sol",
            "input_tokens": 8000,
            "output_tokens": 22000,
            "turns": 30,
            "tool_seconds": 15,
            "deadline_seconds": 400,
        },
    )
    html = r.content.decode()
    assert "Chosen: gpt-5.6-sol on priority" in html and 'id="candidates"' in html


def test_admin_adds_a_package_with_its_period_set(admin_client, account):
    r = admin_client.post(
        "/admin/routing/quotapackage/add/",
        {
            "account": account.pk,
            "name": "Weekly extra",
            "scope": "all",
            "period": "week",
            "limit": "30",
            "order": "50",
            "on_retirement": "keep",
            "conversion": "1",
        },
    )
    assert r.status_code == 302, r.content.decode()[:500]
    pkg = QuotaPackage.objects.get(name="Weekly extra")
    assert pkg.next_reset_at is not None and pkg.period_start.weekday() == 0


def test_admin_refuses_a_family_scope_without_a_family(admin_client, account):
    r = admin_client.post(
        "/admin/routing/quotapackage/add/",
        {
            "account": account.pk,
            "name": "Bad",
            "scope": "family",
            "period": "month",
            "limit": "30",
            "order": "50",
            "on_retirement": "keep",
            "conversion": "1",
        },
    )
    assert r.status_code == 200 and "A family scope names a family." in r.content.decode()
    assert not QuotaPackage.objects.filter(name="Bad").exists()


def test_balances_are_read_only_in_the_admin(admin_client, account):
    pkg = account.packages.get()
    html = admin_client.get(f"/admin/routing/quotapackage/{pkg.pk}/change/").content.decode()
    assert 'name="spent"' not in html and 'name="reserved"' not in html
    assert admin_client.get("/admin/routing/ledgerentry/add/").status_code == 403

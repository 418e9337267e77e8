"""Budget alerts: each threshold (50 / 80 / 100 % by default) of a quota package and of
a key with a spending cap is told once per period, as a notice and a signed
quota.threshold webhook event; and exactly once when concurrent settlements cross it
together (PostgreSQL, threads)."""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
from django.db import connections
from standardwebhooks import Webhook

from routing import quota
from routing.accounts.keys import api_key_create
from routing.admin.attention import attention_lines
from routing.models import BudgetAlert, Notice, QuotaPackage, WebhookEndpoint, WebhookEvent
from routing.webhooks.endpoints import new_secret
from tests.helpers import ApiClient, job_submit, make_account, make_package
from tests.routing.webhooks.conftest import deliver_due


def spend(package, amount, ref):
    quota.quota_reserve(package_id=package.pk, amount=amount, reference=ref)
    quota.quota_settle(reference=ref, actual=amount)


def thresholds(subject: str) -> list[int]:
    return sorted(BudgetAlert.objects.filter(subject=subject).values_list("threshold", flat=True))


@pytest.mark.django_db
def test_a_package_alerts_at_50_80_and_100_percent_once_per_period(receiver, dispatched):
    account = make_account()
    pkg = make_package(account, limit="100")
    endpoint = WebhookEndpoint.objects.create(
        account=account, url=receiver.url, secret=new_secret()
    )
    subject = f"package:{pkg.pk}"
    spend(pkg, "30", "a")
    assert thresholds(subject) == []
    spend(pkg, "25", "b")  # 55 %
    assert thresholds(subject) == [50]
    spend(pkg, "1", "c")  # 56 %: nothing new
    assert thresholds(subject) == [50]
    spend(pkg, "30", "d")  # 86 %
    assert thresholds(subject) == [50, 80]
    quota.quota_reserve(package_id=pkg.pk, amount="14", reference="e")
    assert quota.quota_draw(reference="e", amount="14") == Decimal(14)  # a batch's draw: 100 %
    assert thresholds(subject) == [50, 80, 100]
    quota.quota_settle(reference="e", actual="0")
    assert thresholds(subject) == [50, 80, 100]
    # The notices, in the API.
    _, raw = api_key_create(account=account)
    data = ApiClient(raw).get("/api/v1/notices").json()["data"]
    assert [n["threshold"] for n in data if n["kind"] == "quota.threshold"] == [100, 80, 50]
    assert data[0]["scope"] == "package" and data[0]["package"]["id"] == pkg.pk
    assert data[0]["limit"] == "100.000000" and data[0]["delivery"] == "none"
    # The signed webhook events.
    deliver_due()
    got = [Webhook(endpoint.secret).verify(body, h) for h, body in receiver.requests]
    assert sorted(p["data"]["threshold"] for p in got) == [50, 80, 100]
    assert {p["type"] for p in got} == {"quota.threshold"}
    # The admin home lists the highest crossed.
    assert any("has used 100 % of its budget" in line for line in attention_lines())
    # A new period: told again.
    pkg.refresh_from_db()
    QuotaPackage.objects.filter(pk=pkg.pk).update(next_reset_at=pkg.period_start)
    quota.quota_reset_due(at=pkg.next_reset_at + dt.timedelta(minutes=1))
    spend(pkg, "60", "f")
    assert BudgetAlert.objects.filter(subject=subject, threshold=50).count() == 2
    assert Notice.objects.filter(kind="quota.threshold").count() == 4


@pytest.mark.django_db
def test_a_package_with_its_own_thresholds_or_none(dispatched):
    account = make_account()
    pkg = make_package(account, limit="10")
    QuotaPackage.objects.filter(pk=pkg.pk).update(alert_thresholds=[25, "junk", 90])
    spend(pkg, "9.5", "a")
    assert thresholds(f"package:{pkg.pk}") == [25, 90]
    quiet = make_package(account, limit="10", name="quiet")
    QuotaPackage.objects.filter(pk=quiet.pk).update(alert_thresholds=[])
    spend(quiet, "10", "b")
    assert thresholds(f"package:{quiet.pk}") == []


@pytest.mark.django_db
def test_a_key_alerts_against_its_cap_once_per_period(
    api, account, receiver, dispatched, django_capture_on_commit_callbacks
):
    WebhookEndpoint.objects.create(
        account=account, url=receiver.url, secret=new_secret(), event_types=["quota.threshold"]
    )
    probe = job_submit(api, service_tier="standard")
    assert probe.status_code == 202, probe.json()
    cost = Decimal(probe.json()["predicted"]["cost"])
    r = api.post_json("/api/v1/keys", {"name": "ci", "spend_limit": str(cost * 2)})
    assert r.status_code == 201 and r.json()["alert_thresholds"] == [50, 80, 100]
    capped = ApiClient(r.json()["key"])
    key_id = r.json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        assert job_submit(capped, service_tier="standard").status_code == 202
    assert thresholds(f"key:{key_id}") == [50]
    with django_capture_on_commit_callbacks(execute=True):
        assert job_submit(capped, service_tier="standard").status_code == 202
    assert thresholds(f"key:{key_id}") == [50, 80, 100]
    with django_capture_on_commit_callbacks(execute=True):
        assert job_submit(capped, service_tier="standard").status_code == 403  # the cap
    assert thresholds(f"key:{key_id}") == [50, 80, 100]
    events = WebhookEvent.objects.filter(type="quota.threshold")
    assert sorted(e.data["threshold"] for e in events) == [50, 80, 100]
    assert {e.data["scope"] for e in events} == {"key"}
    assert {e.data["key"]["id"] for e in events} == {key_id}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_settlements_cross_each_threshold_exactly_once(on_postgres, dispatched):
    account = make_account("race")
    pkg = make_package(account, limit="100")
    WebhookEndpoint.objects.create(
        account=account, url="https://example.com/h", secret=new_secret()
    )
    n = 40
    for i in range(n):
        quota.quota_reserve(package_id=pkg.pk, amount="2.5", reference=f"r-{i}")
    barrier = threading.Barrier(20)

    def settle(i: int) -> None:
        if i < 20:
            barrier.wait()
        try:
            quota.quota_settle(reference=f"r-{i}", actual="2.5")
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(settle, range(n)))
    pkg.refresh_from_db()
    assert pkg.spent == Decimal(100)
    assert thresholds(f"package:{pkg.pk}") == [50, 80, 100]
    assert Notice.objects.filter(kind="quota.threshold").count() == 3
    assert WebhookEvent.objects.filter(type="quota.threshold").count() == 3
    assert quota.ledger_mismatches() == []


@pytest.mark.django_db
def test_the_admin_lists_budget_notices_and_alerts(admin_client, dispatched):
    account = make_account()
    pkg = make_package(account, limit="10")
    spend(pkg, "8", "a")
    page = admin_client.get("/admin/routing/notice/")
    assert page.status_code == 200
    assert "has used 80 % of its 10.00 credits" in page.content.decode()
    page = admin_client.get("/admin/routing/budgetalert/")
    assert page.status_code == 200 and f"package:{pkg.pk}" in page.content.decode()
    assert admin_client.get("/admin/").status_code == 200

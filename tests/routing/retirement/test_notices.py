"""Retirement notices: recorded once per affected account, readable in the API,
delivered to webhooks with retries and a visible delivery state."""

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from catalog import lifecycle
from catalog.models import ModelVersion
from routing import quota
from routing.accounts.accounts import account_create
from routing.models import Account, Notice, QuotaPackage
from routing.retirement import notices
from tests.helpers import GDPVAL, ApiClient, job_submit

pytestmark = pytest.mark.django_db


def m(slug):
    return ModelVersion.objects.get(slug=slug)


def schedule_luna(days=200):
    return lifecycle.model_schedule_retirement(
        model=m("gpt-5.6-luna"),
        retires_on=lifecycle.utc_today() + dt.timedelta(days=days),
        successor=m("gpt-5.6-terra"),
        actor="t",
    )


@pytest.fixture
def luna_user(builtin_catalog):
    """An account that ran a Luna job, and one holding a Luna package, and a bystander."""
    user, user_key = account_create(name="luna-user")
    job_submit(ApiClient(user_key), model="gpt-5.6-luna", deadline_seconds=3600)
    holder, holder_key = account_create(name="pack-holder")
    quota.package_create(
        account=holder,
        name="Luna pack",
        limit="10",
        scope=QuotaPackage.Scope.MODELS,
        model_versions=[m("gpt-5.6-luna")],
    )
    QuotaPackage.objects.filter(name="Luna pack").update(on_retirement="migrate")
    bystander, bystander_key = account_create(name="bystander")
    return {"user": user_key, "holder": holder_key, "bystander": bystander_key}


def test_announcing_records_a_notice_for_each_affected_account(
    luna_user, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        schedule_luna()
    assert set(Notice.objects.values_list("account__name", flat=True)) == {
        "luna-user",
        "pack-holder",
    }
    body = ApiClient(luna_user["holder"]).get("/api/v1/notices").json()["data"][0]
    assert body["model"] == "gpt-5.6-luna" and body["successor"] == "gpt-5.6-terra"
    assert body["quota"][0]["policy"] == "migrate" and body["delivery"] == "none"
    user_notice = ApiClient(luna_user["user"]).get("/api/v1/notices").json()["data"][0]
    assert user_notice["your_usage"]["jobs_last_30_days"] == 1
    assert ApiClient(luna_user["bystander"]).get("/api/v1/notices").json()["data"] == []


def test_announcing_twice_notifies_once_and_beat_catches_up(luna_user):
    schedule_luna()  # on_commit callbacks not run: as if the process died after commit
    assert Notice.objects.count() == 0
    assert notices.notices_announce_due() == 2
    assert notices.notices_announce_due() == 0
    assert notices.notices_announce(model=m("gpt-5.6-luna")) == 0
    assert Notice.objects.count() == 2


def test_a_new_date_is_a_new_notice(luna_user):
    schedule_luna(200)
    notices.notices_announce(model=m("gpt-5.6-luna"))
    schedule_luna(250)
    assert notices.notices_announce(model=m("gpt-5.6-luna")) == 2
    assert Notice.objects.count() == 4


def test_a_proposed_retirement_is_not_announced_before_its_day(luna_user):
    lifecycle.model_schedule_retirement(
        model=m("gpt-5.6-luna"),
        retires_on=lifecycle.utc_today() + dt.timedelta(days=300),
        announced_on=lifecycle.utc_today() + dt.timedelta(days=10),
        successor=None,
        actor="t",
    )
    assert notices.notices_announce_due() == 0


def test_quotes_on_a_deprecated_model_link_to_the_notices(luna_user):
    schedule_luna()
    r = ApiClient(luna_user["user"]).post_json(
        "/api/v1/quotes", GDPVAL | {"model": "gpt-5.6-luna", "deadline_seconds": 3600}
    )
    assert 'rel="successor-version"' in r["Link"]
    assert '/api/v1/notices?model=gpt-5.6-luna>; rel="deprecation"' in r["Link"]


class Receiver(BaseHTTPRequestHandler):
    received: list = []
    status = 200

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        Receiver.received.append(
            (self.headers["Idempotency-Key"], json.loads(self.rfile.read(length)))
        )
        self.send_response(Receiver.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook(settings, monkeypatch):
    """A receiver on loopback http: allowed here only (production refuses both)."""
    from routing.core import urls_safe

    settings.WEBHOOK_ALLOW_HTTP = True
    monkeypatch.setattr(urls_safe, "address_public", lambda address: True)
    Receiver.received, Receiver.status = [], 200
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()


def test_a_webhook_gets_the_notice(luna_user, webhook, dispatched):
    Account.objects.filter(name="pack-holder").update(webhook_url=webhook)
    schedule_luna()
    notices.notices_announce(model=m("gpt-5.6-luna"))
    notice = Notice.objects.get(account__name="pack-holder")
    assert notice.delivery == "pending"
    assert notices.notice_deliver(notice.pk).delivery == "delivered"
    ((key, body),) = Receiver.received
    assert key == str(notice.pk) and body["model"] == "gpt-5.6-luna"
    assert notices.notice_deliver(notice.pk) is None  # delivered: not sent again


def test_a_failing_webhook_is_retried_then_marked_failed(luna_user, webhook):
    from routing.tasks import deliver_notice

    Receiver.status = 500
    Account.objects.filter(name="pack-holder").update(webhook_url=webhook)
    schedule_luna()
    notices.notices_announce(model=m("gpt-5.6-luna"))
    notice = Notice.objects.get(account__name="pack-holder")
    with pytest.raises(notices.WebhookError):
        notices.notice_deliver(notice.pk)
    notice.refresh_from_db()
    assert (notice.delivery, notice.attempts, notice.last_error) == ("pending", 1, "HTTP 500")
    notices.notice_deliver(notice.pk, final=True)
    notice.refresh_from_db()
    assert notice.delivery == "failed" and notice.attempts == 2
    assert deliver_notice.max_retries == notices.WEBHOOK_MAX_ATTEMPTS - 1


def test_admin_shows_delivery_state_and_sends_again(admin_client, luna_user, webhook, dispatched):
    Account.objects.filter(name="pack-holder").update(webhook_url=webhook)
    schedule_luna()
    notices.notices_announce(model=m("gpt-5.6-luna"))
    Notice.objects.filter(account__name="pack-holder").update(delivery="failed", attempts=6)
    html = admin_client.get("/admin/routing/notice/?delivery=failed").content.decode()
    assert "pack-holder" in html
    notice = Notice.objects.get(account__name="pack-holder")
    admin_client.post(
        "/admin/routing/notice/", {"action": "retry_delivery", "_selected_action": [notice.pk]}
    )
    notice.refresh_from_db()
    assert notice.delivery == "pending"
    assert dispatched.of("routing.deliver_notice") == [(str(notice.pk),)]


def test_retire_now_tells_the_affected_accounts(luna_user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.model_retire_now(model=m("gpt-5.6-luna"), actor="t", notice_override="incident")
    assert Notice.objects.count() == 2

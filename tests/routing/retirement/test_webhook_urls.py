"""Webhook URLs (issue 13, blind SSRF): https to public addresses only, refused at save
(model and admin) and at delivery (the notice fails with the reason, no retries); the
call follows no redirect and honours no proxy variable. DNS is faked: no network."""

import datetime as dt
import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core.exceptions import ValidationError

from catalog.models import ModelVersion
from routing.core import urls_safe
from routing.models import Account, Notice
from routing.retirement import notices

pytestmark = pytest.mark.django_db

HOSTS = {
    "hooks.example": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "internal.example": ["10.0.0.5"],
    "mixed.example": ["93.184.216.34", "192.168.1.10"],
    "metadata.example": ["169.254.169.254"],
    "v6local.example": ["fd00::1"],
}


@pytest.fixture(autouse=True)
def fake_dns(monkeypatch):
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in HOSTS:
            return [
                (
                    socket.AF_INET6 if ":" in a else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (a, port),
                )
                for a in HOSTS[host]
            ]
        if host.endswith(".example"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, port, *args, **kwargs)  # IP literals: no lookup

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


BAD_URLS = [
    "http://127.0.0.1/",
    "https://127.0.0.1/hook",
    "https://localhost/hook",
    "http://169.254.169.254/latest/meta-data/",
    "https://169.254.169.254/latest/meta-data/",
    "https://metadata.example/",
    "ftp://hooks.example/hook",
    "file:///etc/passwd",
    "http://hooks.example/hook",  # http without WEBHOOK_ALLOW_HTTP
    "https://internal.example/hook",
    "https://mixed.example/hook",  # one private address is enough
    "https://v6local.example/hook",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[fe80::1]/hook",
    "https://0.0.0.0/hook",
    "https://224.0.0.1/hook",
    "https://100.64.0.1/hook",
    "https://2130706433/hook",  # 127.0.0.1 as one number
    "https://nowhere.example/hook",  # does not resolve
]
GOOD_URL = "https://hooks.example/hook"


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_webhook_url_is_refused_at_save(url, builtin_catalog):
    account = Account(name="a", webhook_url=url)
    with pytest.raises(ValidationError) as exc:
        account.full_clean()
    assert "webhook_url" in exc.value.message_dict


def test_a_public_https_url_is_accepted_at_save(builtin_catalog):
    Account(name="a", webhook_url=GOOD_URL).full_clean()
    Account(name="b", webhook_url="").full_clean()


def test_http_only_when_allowed(settings, builtin_catalog):
    with pytest.raises(ValidationError):
        Account(name="a", webhook_url="http://hooks.example/hook").full_clean()
    settings.WEBHOOK_ALLOW_HTTP = True
    Account(name="a", webhook_url="http://hooks.example/hook").full_clean()
    with pytest.raises(ValidationError):  # still public addresses only
        Account(name="a", webhook_url="http://127.0.0.1/hook").full_clean()


def test_the_admin_form_says_why(admin_client, builtin_catalog):
    account = Account.objects.create(name="acme")
    page = admin_client.post(
        f"/admin/routing/account/{account.pk}/change/",
        {
            "name": "acme",
            "webhook_url": "http://169.254.169.254/latest/meta-data/",
            "api_keys-TOTAL_FORMS": "0",
            "api_keys-INITIAL_FORMS": "0",
            "quota_packages-TOTAL_FORMS": "0",
            "quota_packages-INITIAL_FORMS": "0",
        },
    )
    assert page.status_code == 200  # the form again, with the error
    assert "The URL must use https" in page.content.decode()
    account.refresh_from_db()
    assert account.webhook_url == ""


def pending_notice(url):
    """A notice pending for an account whose URL was stored before the rule existed."""
    account = Account.objects.create(name="acme")
    Account.objects.filter(pk=account.pk).update(webhook_url=url)
    return Notice.objects.create(
        account=account,
        model=ModelVersion.objects.first(),
        retires_on=dt.date(2030, 1, 1),
        body={"object": "notice"},
        delivery=Notice.Delivery.PENDING,
    )


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_webhook_url_is_refused_at_delivery(url, builtin_catalog):
    notice = pending_notice(url)
    sent = []
    # Not raised (a retry would only fail again): the notice fails at once.
    assert notices.notice_deliver(notice.pk, post=lambda *a: sent.append(a)) is None
    notice.refresh_from_db()
    assert sent == []
    assert (notice.delivery, notice.attempts) == ("failed", 1)
    assert notice.last_error.startswith("refused: ")


def test_a_public_https_url_is_delivered(builtin_catalog):
    notice = pending_notice(GOOD_URL)
    sent = []
    delivered = notices.notice_deliver(notice.pk, post=lambda *a: sent.append(a))
    assert delivered.delivery == "delivered"
    assert [s[0] for s in sent] == [GOOD_URL]


# --- The call itself: local servers; loopback allowed for the test only ---------------


class Hits(BaseHTTPRequestHandler):
    hits: list = []

    def do_POST(self):
        Hits.hits.append((self.server.server_port, self.path))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/redirect":
            self.send_response(302)  # urllib would follow it (as a GET)
            self.send_header("Location", "/elsewhere")
        else:
            self.send_response(200)
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture
def servers():
    Hits.hits = []
    started = []
    for _ in range(2):
        server = HTTPServer(("127.0.0.1", 0), Hits)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
    yield [s.server_port for s in started]
    for s in started:
        s.shutdown()


@pytest.fixture
def loopback_allowed(settings, monkeypatch):
    settings.WEBHOOK_ALLOW_HTTP = True
    monkeypatch.setattr(urls_safe, "address_public", lambda address: True)


def test_redirects_are_not_followed(servers, loopback_allowed):
    port = servers[0]
    with pytest.raises(notices.WebhookError, match="HTTP 302"):
        notices._post(f"http://127.0.0.1:{port}/redirect", {}, "n1")
    assert Hits.hits == [(port, "/redirect")]


def test_proxy_variables_are_ignored(servers, loopback_allowed, monkeypatch):
    receiver, proxy = servers
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.setattr(urllib.request, "_opener", None)  # urlopen's cached opener
    notices._post(f"http://127.0.0.1:{receiver}/hook", {}, "n1")
    assert Hits.hits == [(receiver, "/hook")]


def test_the_connected_address_is_checked_too(servers, settings):
    """A name that resolved to a public address at the check but connects to a private
    one (DNS rebinding) is refused on the socket, before anything is sent."""
    with pytest.raises(urls_safe.UnsafeURL, match="non-public"):
        urls_safe.public_opener().open(f"http://127.0.0.1:{servers[0]}/hook", timeout=5)
    assert Hits.hits == []

"""A real local HTTP receiver for webhooks (http.server in a thread), allowed through the
SSRF guard by the operator's opt-in settings (WEBHOOK_ALLOW_HOSTS, WEBHOOK_ALLOW_HTTP),
and a driver that runs due deliveries as the worker's task would."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from routing.models import WebhookDelivery
from routing.webhooks.delivery import delivery_attempt


class Receiver:
    def __init__(self):
        self.requests: list[tuple[dict, bytes]] = []
        self.statuses: list[int] = []  # answers in order; 204 once they run out
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings):
    r = Receiver()
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_ALLOW_HOSTS = frozenset({f"127.0.0.1:{r.port}"})
    settings.WEBHOOK_RETRY_SCHEDULE = [0.0, 0.0]
    yield r
    r.close()


def deliver_due(rounds: int = 20) -> int:
    """Attempt every due delivery, again while any is due (retries at 0 s); the number
    of attempts made."""
    made = 0
    for _ in range(rounds):
        due = list(
            WebhookDelivery.objects.filter(state=WebhookDelivery.State.PENDING).values_list(
                "pk", flat=True
            )
        )
        before = made
        for pk in due:
            attempts = WebhookDelivery.objects.get(pk=pk).attempts
            delivery_attempt(pk)
            made += WebhookDelivery.objects.get(pk=pk).attempts - attempts
        if made == before:
            return made
    return made

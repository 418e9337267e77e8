"""Delivering an event to an endpoint: signed by the Standard Webhooks scheme
(`webhook-id` is the event's `msg_...` id, `webhook-timestamp` the attempt's Unix
time, `webhook-signature` one `v1,<base64>` per signing secret, space-separated, so a
receiver holding either secret verifies during a rotation), POSTed through the SSRF
guard (routing.core.urls_safe: checked again at the call, no redirect, public
addresses only), retried on WEBHOOK_RETRY_SCHEDULE, every attempt logged on the
delivery row.

Each attempt claims the delivery first with one conditional update (pending and due
-> due again only after a lease): a task delivered twice, a sweep and a task at once,
post once."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone
from standardwebhooks import Webhook

from routing.core.urls_safe import UnsafeURL, configured_check, configured_opener
from routing.models import WebhookDelivery
from routing.webhooks.endpoints import signing_secrets
from routing.webhooks.events import send_delivery

TIMEOUT_SECONDS = 5
# An attempt holds its claim this long: past the call's timeout, so a claimed delivery
# is never taken by a second worker while the first still waits for its answer.
LEASE = dt.timedelta(seconds=60)
USER_AGENT = "model-lifecycle-router/1 (+webhooks)"


class PostFailed(Exception):
    """One POST did not get a 2xx. `status`: the HTTP status, if any; `refused`: the
    URL is not one the service may call (not retried)."""

    def __init__(self, message: str, status: int | None = None, refused: bool = False):
        super().__init__(message)
        self.status = status
        self.refused = refused


def webhook_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST `body` once to `url` under the SSRF guard; the 2xx status, else PostFailed."""
    try:
        configured_check(url)
        req = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
        )
        with configured_opener().open(req, timeout=TIMEOUT_SECONDS) as r:
            if not 200 <= r.status < 300:
                raise PostFailed(f"HTTP {r.status}", status=r.status)
            return r.status
    except UnsafeURL as exc:
        raise PostFailed(f"refused: {exc}", refused=True) from exc
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            raise PostFailed(f"HTTP {exc.code} (redirects are not followed)", exc.code) from exc
        raise PostFailed(f"HTTP {exc.code}", status=exc.code) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PostFailed(str(getattr(exc, "reason", exc))[:200]) from exc


def signed_headers(msg_id: str, body: str, secrets: list[str], at: dt.datetime) -> dict:
    """The Standard Webhooks headers for `body`, signed with each of `secrets`."""
    stamp = dt.datetime.fromtimestamp(int(at.timestamp()), tz=dt.UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": " ".join(
            Webhook(s).sign(msg_id=msg_id, timestamp=stamp, data=body) for s in secrets
        ),
    }


def retry_delay(attempts: int) -> float | None:
    """Seconds until the next attempt after `attempts` failed ones; None: no more."""
    schedule = settings.WEBHOOK_RETRY_SCHEDULE
    return schedule[attempts - 1] if attempts <= len(schedule) else None


def delivery_attempt(delivery_id: int, *, post=webhook_post) -> float | None:
    """One attempt of a pending, due delivery (claimed first: nothing happens when it
    is not pending, not due, or claimed by another attempt). Returns the seconds until
    its next attempt when this one failed and it will be retried, else None."""
    now = timezone.now()
    claimed = WebhookDelivery.objects.filter(
        pk=delivery_id, state=WebhookDelivery.State.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=now + LEASE)
    if not claimed:
        return None
    d = WebhookDelivery.objects.select_related("event", "endpoint").get(pk=delivery_id)
    attempts = d.attempts + 1
    body = json.dumps(d.event.payload(), separators=(",", ":"))
    status, error, refused = None, "", False
    started = time.monotonic()
    if not d.endpoint.enabled:
        error, refused = "The endpoint is disabled.", True
    else:
        try:
            headers = signed_headers(d.event.pk, body, signing_secrets(d.endpoint, now), now)
            status = post(d.endpoint.url, body.encode(), headers)
        except PostFailed as exc:
            status, error, refused = exc.status, str(exc)[:300], exc.refused
    elapsed_ms = int((time.monotonic() - started) * 1000)
    log = {
        "attempts": attempts,
        "last_attempt_at": now,
        "last_status_code": status,
        "last_error": error,
        "response_ms": elapsed_ms,
    }
    if not error:
        WebhookDelivery.objects.filter(pk=d.pk).update(
            state=WebhookDelivery.State.DELIVERED, next_attempt_at=None, delivered_at=now, **log
        )
        return None
    delay = None if refused else retry_delay(attempts)
    WebhookDelivery.objects.filter(pk=d.pk).update(
        state=WebhookDelivery.State.FAILED if delay is None else WebhookDelivery.State.PENDING,
        next_attempt_at=None if delay is None else now + dt.timedelta(seconds=delay),
        **log,
    )
    return delay


def deliveries_due(*, at: dt.datetime | None = None, limit: int = 500) -> int:
    """Beat: send every pending delivery whose attempt is due (a retry whose time has
    come, a send the broker lost). The attempt's claim keeps a delivery from being
    posted twice when the sweep and a task meet."""
    at = at or timezone.now()
    ids = list(
        WebhookDelivery.objects.filter(
            state=WebhookDelivery.State.PENDING, next_attempt_at__lte=at
        ).values_list("pk", flat=True)[:limit]
    )
    for pk in ids:
        send_delivery(pk)
    return len(ids)


def deliveries_resend(*, deliveries: QuerySet[WebhookDelivery]) -> int:
    """Send again, from a fresh count of attempts, those of `deliveries` not delivered
    (failed, or pending and waiting for a retry); the number sent. "Send again" in the
    admin and the API."""
    now = timezone.now()
    ids = list(
        deliveries.exclude(state=WebhookDelivery.State.DELIVERED).values_list("pk", flat=True)
    )
    WebhookDelivery.objects.filter(pk__in=ids).update(
        state=WebhookDelivery.State.PENDING, attempts=0, next_attempt_at=now
    )
    for pk in ids:
        send_delivery(pk)
    return len(ids)

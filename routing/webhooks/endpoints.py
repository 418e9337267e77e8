"""An account's webhook endpoints: made, changed, deleted, their secret rotated. The
secret (`whsec_` and 32 random bytes, base64, as Standard Webhooks has it) is shown
once, when made or rotated; after a rotation the old one keeps signing next to the new
one for an overlap window, then is dropped."""

from __future__ import annotations

import base64
import datetime as dt
import secrets

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from routing.core.urls_safe import UnsafeURL, configured_check
from routing.models import Account, WebhookEndpoint
from routing.models.webhooks import EVENT_TYPES

MAX_ENDPOINTS_PER_ACCOUNT = 20
MAX_OVERLAP_SECONDS = 7 * 86400


class EndpointRefused(ValueError):
    """The endpoint cannot be saved as asked; the message says why, `code` names it."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def endpoint_url_check(url: str) -> None:
    """EndpointRefused unless the service may call `url` (routing.core.urls_safe)."""
    try:
        configured_check(url)
    except UnsafeURL as exc:
        raise EndpointRefused(str(exc), "unsafe-url") from exc


def _event_types_check(types: list[str]) -> list[str]:
    unknown = sorted(set(types) - set(EVENT_TYPES))
    if unknown:
        raise EndpointRefused(
            f"Unknown event type(s) {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}.",
            "unknown-event-type",
        )
    return sorted(set(types))


def endpoint_create(
    *,
    account: Account,
    url: str,
    description: str = "",
    event_types: list[str] | None = None,
    enabled: bool = True,
) -> WebhookEndpoint:
    endpoint_url_check(url)
    types = _event_types_check(event_types or [])
    with transaction.atomic():
        # The account's row lock serialises creations, so the cap holds.
        Account.objects.select_for_update().filter(pk=account.pk).first()
        if WebhookEndpoint.objects.filter(account=account).count() >= MAX_ENDPOINTS_PER_ACCOUNT:
            raise EndpointRefused(
                f"An account may have at most {MAX_ENDPOINTS_PER_ACCOUNT} webhook endpoints.",
                "too-many-endpoints",
            )
        return WebhookEndpoint.objects.create(
            account=account,
            url=url,
            description=description,
            event_types=types,
            enabled=enabled,
            secret=new_secret(),
        )


def endpoint_update(*, endpoint: WebhookEndpoint, **changes) -> WebhookEndpoint:
    """Change `url`, `description`, `enabled`, `event_types` (those given)."""
    if "url" in changes:
        endpoint_url_check(changes["url"])
    if "event_types" in changes:
        changes["event_types"] = _event_types_check(changes["event_types"] or [])
    for name, value in changes.items():
        setattr(endpoint, name, value)
    endpoint.save(update_fields=[*changes, "updated_at"])
    return endpoint


def endpoint_rotate(
    *,
    endpoint: WebhookEndpoint,
    overlap_seconds: float | None = None,
    at: dt.datetime | None = None,
) -> WebhookEndpoint:
    """A new secret; the current one keeps signing next to it for `overlap_seconds`
    (default WEBHOOK_SECRET_OVERLAP_SECONDS; 0: dropped at once)."""
    at = at or timezone.now()
    overlap = (
        settings.WEBHOOK_SECRET_OVERLAP_SECONDS if overlap_seconds is None else overlap_seconds
    )
    endpoint.previous_secret = endpoint.secret if overlap > 0 else ""
    endpoint.previous_secret_expires_at = (
        at + dt.timedelta(seconds=overlap) if overlap > 0 else None
    )
    endpoint.secret = new_secret()
    endpoint.save(
        update_fields=["secret", "previous_secret", "previous_secret_expires_at", "updated_at"]
    )
    return endpoint


def signing_secrets(endpoint: WebhookEndpoint, at: dt.datetime) -> list[str]:
    """The secrets that sign now: the current one, and the previous one inside its
    overlap window."""
    out = [endpoint.secret]
    if endpoint.previous_secret and (
        endpoint.previous_secret_expires_at is None or endpoint.previous_secret_expires_at > at
    ):
        out.append(endpoint.previous_secret)
    return out

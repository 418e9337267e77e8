"""Self-service keys (issue 27): an admin key of an account makes, rotates and revokes
the account's keys (routing.api.keys; the admin shows the same fields).

Rotation makes a new key with the same scopes and lets the old one work on for an
overlap window (`overlap_seconds`, default ROTATE_OVERLAP_SECONDS, 0: at once), after
which it is refused as expired: clients switch keys without a failed request. Revoking
is at once in this process and within the key memo's bound everywhere else
(routing.accounts.keys: API_KEY_CACHE_SECONDS at the latest, about a second with a
shared cache); expiry needs no memo change (it is checked at each use).
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from routing.accounts.keys import api_key_create, api_key_revoke, forget_keys
from routing.models import Account, ApiKey

ROTATE_OVERLAP_SECONDS = 3600
MAX_OVERLAP_SECONDS = 7 * 86400
# What a rotation carries over to the new key.
SCOPE_FIELDS = (
    "name",
    "role",
    "expires_at",
    "allowed_models",
    "allowed_tiers",
    "read_only",
    "allow_batches",
    "requests_per_minute",
    "tokens_per_minute",
    "spend_limit",
    "spend_period",
    "alert_thresholds",
    "fallbacks",
)


def key_issue(*, account: Account, **scopes) -> tuple[ApiKey, str]:
    """A new key of the account with these scopes (ApiKey's fields); the raw key once."""
    return api_key_create(account=account, **scopes)


@transaction.atomic
def key_rotate(
    *, key: ApiKey, overlap_seconds: float = ROTATE_OVERLAP_SECONDS, at: dt.datetime | None = None
) -> tuple[ApiKey, str]:
    """A new key with the old one's scopes; the old one works until `at + overlap`."""
    at = at or timezone.now()
    old = ApiKey.objects.select_for_update().get(pk=key.pk)
    new, raw = api_key_create(
        account=old.account,
        **{f: getattr(old, f) for f in SCOPE_FIELDS if f != "name"},
        name=old.name,
    )
    ends = at + dt.timedelta(seconds=overlap_seconds)
    old.expires_at = ends if old.expires_at is None else min(old.expires_at, ends)
    old.rotated_to = new
    old.save(update_fields=["expires_at", "rotated_to"])
    forget_keys(digests=[old.key_hash])
    return new, raw


def key_revoke(*, key: ApiKey, at: dt.datetime | None = None) -> ApiKey:
    return api_key_revoke(key=key, at=at)

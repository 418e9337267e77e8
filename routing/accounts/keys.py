"""API keys: created once (the raw key is returned a single time), stored as SHA-256,
revocable. Keys are 256-bit random tokens, so a fast unsalted hash is enough: nobody
can brute-force the preimage, and lookup stays one indexed query."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from django.db import connection
from django.utils import timezone

from routing.core.sql import as_utc
from routing.models import Account, ApiKey

KEY_PREFIX = "mlr_"
# Writing last_used_at on every request would make every read a write.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(*, account: Account, name: str = "default") -> tuple[ApiKey, str]:
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(account=account, name=name, prefix=raw[:12], key_hash=hash_key(raw))
    return key, raw


def api_key_revoke(*, key: ApiKey, at: dt.datetime | None = None) -> ApiKey:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=at or timezone.now()
    )
    key.refresh_from_db()
    return key


class KeyRejected(Exception):
    pass


# Every client request authenticates: one hand-written indexed query (the ORM's query
# building cost more than the query itself on the quote path).
_AUTH_SQL = (
    "SELECT k.id, k.name, k.prefix, k.created_at, k.last_used_at, k.revoked_at, "
    "a.id, a.name, a.auto_migrate, a.created_at, a.requests_per_minute, a.tokens_per_minute "
    f"FROM {ApiKey._meta.db_table} k JOIN {Account._meta.db_table} a ON a.id = k.account_id "
    "WHERE k.key_hash = %s"
)


def api_key_authenticate(raw: str, *, at: dt.datetime | None = None) -> ApiKey:
    row = None
    if raw:
        digest = hash_key(raw)
        with connection.cursor() as cur:
            cur.execute(_AUTH_SQL, [digest])
            row = cur.fetchone()
    if row is None:
        raise KeyRejected("Invalid API key.")
    (
        kid,
        name,
        prefix,
        created,
        last_used,
        revoked,
        aid,
        aname,
        auto_migrate,
        acreated,
        rpm,
        tpm,
    ) = row
    created, last_used, revoked, acreated = map(as_utc, (created, last_used, revoked, acreated))
    if revoked is not None:
        raise KeyRejected(f"This API key was revoked on {revoked:%Y-%m-%d %H:%M} UTC.")
    account = Account(
        id=aid,
        name=aname,
        auto_migrate=bool(auto_migrate),
        created_at=acreated,
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
    )
    key = ApiKey(
        id=kid,
        account=account,
        name=name,
        prefix=prefix,
        key_hash=digest,
        created_at=created,
        last_used_at=last_used,
        revoked_at=revoked,
    )
    at = at or timezone.now()
    if key.last_used_at is None or at - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=at)
    return key

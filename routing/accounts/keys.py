"""API keys: created once (the raw key is returned a single time), stored as SHA-256,
revocable. Keys are 256-bit random tokens, so a fast unsalted hash is enough: nobody
can brute-force the preimage, and lookup stays one indexed query.

Key-to-account memo (issue 16). Every client request authenticates, so each process
keeps what a valid key's lookup read (the key and its account) for
settings.API_KEY_CACHE_SECONDS (default 5; 0: no memo), keyed by the key's SHA-256,
never the raw key; only valid keys are kept (an unknown or revoked key is read again
each time), at most MEMO_MAX_ENTRIES. Bounds:

- in the process that revokes a key, deletes it, or changes or deletes its account
  (`api_key_revoke`, the admin's revoke action, any save or delete of a key or an
  account): at once;
- in every other process (other workers, other replicas): within
  API_KEY_CACHE_SECONDS at the latest, whatever happens. With a shared cache the
  change also bumps the shared generation "api-keys" (routing.core.shared), which each
  process reads at most once a second (GENERATION_CHECK_SECONDS): in practice within
  about a second. A key revoked with a plain SQL UPDATE (no signal) is within the
  TTL bound only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import time
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from routing.core.shared import SharedMemo
from routing.core.sql import as_utc
from routing.models import Account, ApiKey

# --- The key-to-account memo ----------------------------------------------------------
GENERATION = "api-keys"
GENERATION_CHECK_SECONDS = 1.0
MEMO_MAX_ENTRIES = 10_000
# digest -> (read at, monotonic; the row as _AUTH_SQL reads it, last_used_at in UTC).
# Without the shared cache the TTL alone bounds it (keep_without_cache).
MEMO = SharedMemo(
    GENERATION,
    check_seconds=GENERATION_CHECK_SECONDS,
    keep_without_cache=True,
    max_entries=MEMO_MAX_ENTRIES,
).register()
_memo = MEMO.entries


def memo_seconds() -> float:
    return float(getattr(settings, "API_KEY_CACHE_SECONDS", 5) or 0)


def forget_keys(*, digests=(), account_id: int | None = None, everywhere: bool = True) -> None:
    """Drop memo entries now (the keys with these hashes, or every key of the account),
    and, `everywhere`, bump the shared generation so other processes drop theirs."""
    where = None if account_id is None else (lambda row: row[6] == account_id)
    MEMO.forget(digests, where, everywhere=everywhere)


def clear_key_memo(**_kwargs) -> None:
    """Drop this process's whole memo (tests; a new generation seen)."""
    MEMO.clear(everywhere=False)


def _on_key_change(sender, instance: ApiKey, **_kwargs) -> None:
    forget_keys(digests=[instance.key_hash])


def _on_account_change(sender, instance: Account, **_kwargs) -> None:
    forget_keys(account_id=instance.pk)


def connect_receivers() -> None:
    """A key's or an account's save or delete forgets its keys (RoutingConfig.ready)."""
    post_save.connect(_on_key_change, sender=ApiKey, dispatch_uid="api-key-memo-save")
    post_delete.connect(_on_key_change, sender=ApiKey, dispatch_uid="api-key-memo-delete")
    post_save.connect(_on_account_change, sender=Account, dispatch_uid="api-key-memo-account-save")
    post_delete.connect(
        _on_account_change, sender=Account, dispatch_uid="api-key-memo-account-delete"
    )


KEY_PREFIX = "mlr_"
# Writing last_used_at on every request would make every read a write.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(*, account: Account, name: str = "default", **scopes) -> tuple[ApiKey, str]:
    """A new key (`scopes`: ApiKey's fields, e.g. role, expires_at, allowed_models)."""
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        account=account, name=name, prefix=raw[:12], key_hash=hash_key(raw), **scopes
    )
    return key, raw


def api_key_revoke(*, key: ApiKey, at: dt.datetime | None = None) -> ApiKey:
    """Revoke the key: refused at once in this process, within the memo's bound in
    every other (module docstring)."""
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=at or timezone.now()
    )
    key.refresh_from_db()
    forget_keys(digests=[key.key_hash])
    return key


def _json_list(value) -> list:
    """A JSON column as a raw cursor returns it: decoded (PostgreSQL) or text (SQLite)."""
    if isinstance(value, str):
        value = json.loads(value)
    return list(value or [])


class KeyRejected(Exception):
    pass


# Every client request authenticates: one hand-written indexed query (the ORM's query
# building cost more than the query itself on the quote path).
_AUTH_SQL = (
    "SELECT k.id, k.name, k.prefix, k.created_at, k.last_used_at, k.revoked_at, "
    "a.id, a.name, a.auto_migrate, a.created_at, a.requests_per_minute, a.tokens_per_minute, "
    "a.default_tier, a.default_deadline_seconds, "
    "k.role, k.expires_at, k.allowed_models, k.allowed_tiers, k.read_only, k.allow_batches, "
    "k.requests_per_minute, k.tokens_per_minute, k.spend_limit, k.spend_period, k.fallbacks "
    f"FROM {ApiKey._meta.db_table} k JOIN {Account._meta.db_table} a ON a.id = k.account_id "
    "WHERE k.key_hash = %s"
)


def api_key_authenticate(raw: str, *, at: dt.datetime | None = None) -> ApiKey:
    """The valid key `raw` names, with its account (KeyRejected if none): from this
    process's memo while it holds (module docstring), else one query."""
    if not raw:
        raise KeyRejected("Invalid API key.")
    digest = hash_key(raw)
    ttl = memo_seconds()
    row = None
    if ttl > 0:
        read_at = time.monotonic()
        token = MEMO.sync(read_at, check_seconds=min(GENERATION_CHECK_SECONDS, ttl))
        row = MEMO.get(digest, read_at, max_age=ttl)
    if row is None:
        with connection.cursor() as cur:
            cur.execute(_AUTH_SQL, [digest])
            row = cur.fetchone()
        if row is None:
            raise KeyRejected("Invalid API key.")
        row = (*row[:4], as_utc(row[4]), *row[5:])
        if ttl > 0 and row[5] is None:  # only valid keys are kept
            MEMO.put(digest, row, read_at, token)
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
        default_tier,
        default_deadline,
        role,
        expires,
        allowed_models,
        allowed_tiers,
        read_only,
        allow_batches,
        key_rpm,
        key_tpm,
        spend_limit,
        spend_period,
        fallbacks,
    ) = row
    created, last_used, revoked, acreated, expires = map(
        as_utc, (created, last_used, revoked, acreated, expires)
    )
    if revoked is not None:
        raise KeyRejected(f"This API key was revoked on {revoked:%Y-%m-%d %H:%M} UTC.")
    at = at or timezone.now()
    if expires is not None and at >= expires:
        raise KeyRejected(f"This API key expired on {expires:%Y-%m-%d %H:%M:%S} UTC.")
    account = Account(
        id=aid,
        name=aname,
        auto_migrate=bool(auto_migrate),
        created_at=acreated,
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
        default_tier=default_tier,
        default_deadline_seconds=default_deadline,
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
        role=role,
        expires_at=expires,
        allowed_models=_json_list(allowed_models),
        allowed_tiers=_json_list(allowed_tiers),
        read_only=bool(read_only),
        allow_batches=bool(allow_batches),
        requests_per_minute=key_rpm,
        tokens_per_minute=key_tpm,
        spend_limit=None if spend_limit is None else Decimal(str(spend_limit)),
        spend_period=spend_period,
        fallbacks=_json_list(fallbacks),
    )
    if key.last_used_at is None or at - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=at)
        # the memo's row knows the new last use (same expiry)
        MEMO.replace(digest, (*row[:4], at, *row[5:]))
    return key

"""Shared test helpers: the API client, task shapes, the one JSONL writer, batch and job
builders, and small factories for tests that are not about the built-in catalog.

Factories (`make_*`) build rows directly (catalog rows) or through the services that
own them (accounts, packages), so a test that only needs "an account with 100 credits"
or "a model with one tier on one pool" does not load catalog.toml nor hard-code its slugs.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from django.test import Client
from django.utils import timezone

import simengine
from catalog.models import Deployment, HardwarePool, ModelFamily, ModelVersion, Price, Tier
from routing.batches.create import batch_create
from routing.batches.files import file_create
from routing.batches.finish import batch_finalize
from routing.batches.planning import ACTIVE
from routing.batches.runner import batch_advance
from routing.batches.validation import batch_validate
from routing.models import Account, Batch, File, QuotaPackage
from routing.quota import package_create
from routing.router.route import TierOption


class ApiClient(Client):
    """A test client that sends a bearer key and JSON."""

    def __init__(self, key: str | None = None, **kwargs):
        if key:
            kwargs["HTTP_AUTHORIZATION"] = f"Bearer {key}"
        super().__init__(**kwargs)

    def post_json(self, path, data, **extra):
        body = data if isinstance(data, str) else json.dumps(data, default=str)
        return self.post(path, body, content_type="application/json", **extra)


# A GDP-Val-shaped task: 30 turns, 22k output tokens, 15 s of tools.
GDPVAL = {
    "model": "sol",
    "input_tokens": 8000,
    "output_tokens": 22000,
    "turns": 30,
    "tool_seconds": 15,
}

# The body of a batch line unless a test says otherwise: a small one-turn Sol task.
BATCH_BODY = {"model": "sol", "input_tokens": 2000, "output_tokens": 1000}


def tier_option(slug, rank, pool_id, device, nodes, price_in, price_out, **kw):
    """A router TierOption for pure router/planner tests (no database)."""
    return TierOption(
        tier=slug,
        tier_id=rank + 1,
        rank=rank,
        pool=f"pool-{pool_id}",
        pool_id=pool_id,
        deployment=simengine.Deployment(device=device, nodes=nodes, tier=slug),
        price_input=Decimal(price_in),
        price_output=Decimal(price_out),
        **kw,
    )


# --- Batch input files ------------------------------------------------------------------


def jsonl(
    n: int,
    *,
    start: int = 0,
    prefix: str = "r",
    body: dict = BATCH_BODY,
    bad: int = 0,
    extra: Sequence[str] = (),
    **fields,
) -> bytes:
    """A batch input file: `n` POST /v1/jobs lines with custom_id `{prefix}{i}` for i from
    `start`, each with `body | fields`; then `bad` lines (custom_id `bad{i}`) naming an
    unknown model; then the `extra` raw lines as given (e.g. broken JSON). Lines are joined
    by newlines, without a trailing one."""
    line_body = body | fields
    rows = [
        {"custom_id": f"{prefix}{i}", "method": "POST", "url": "/v1/jobs", "body": line_body}
        for i in range(start, start + n)
    ]
    rows += [
        {
            "custom_id": f"bad{i}",
            "method": "POST",
            "url": "/v1/jobs",
            "body": line_body | {"model": "nope"},
        }
        for i in range(bad)
    ]
    return "\n".join([*(json.dumps(r) for r in rows), *extra]).encode()


def jsonl_file(directory: Path, n: int, *, name: str = "in.jsonl", **options) -> str:
    """`jsonl(n, **options)` written to `directory/name` with a final newline; its path."""
    path = Path(directory) / name
    path.write_bytes(jsonl(n, **options) + b"\n")
    return str(path)


# --- Batch builders ---------------------------------------------------------------------


def file_upload(account: Account, data: bytes, *, name: str = "in.jsonl") -> File:
    """Upload `data` as a batch input file of `account` (the service the API calls)."""
    stream = io.BytesIO(data)
    stream.name = name
    return file_create(account=account, purpose="batch", upload=stream)


def batch_make(
    account: Account,
    data: bytes,
    *,
    window: str = "1h",
    at: dt.datetime | None = None,
    validate: bool = True,
    **options,
) -> Batch:
    """Upload `data` and create a batch on it at `at` (now by default); unless
    `validate=False`, also run the validation step as its task would."""
    at = at or timezone.now()
    f = file_upload(account, data)
    b = batch_create(
        account=account, input_file_id=f.id, completion_window=window, at=at, **options
    )
    if not validate:
        return b
    return batch_validate(b.pk, at=at) or Batch.objects.get(pk=b.pk)


def batch_run(
    batch: Batch, at: dt.datetime, until: dt.datetime | None = None, links: int = 10_000
) -> dt.datetime:
    """Drive the chain as the workers would, link by link at the times it asks for, and
    finalize the batch once it is finalizing; stop at `until` or when it is no longer
    active. Returns the time of the last link."""
    for _ in range(links):
        batch.refresh_from_db()
        if batch.status == Batch.Status.FINALIZING:
            batch_finalize(batch.pk, at=at)
            batch.refresh_from_db()
            return at
        if batch.status not in ACTIVE:
            return at
        nxt = batch.next_advance_at or at
        if until is not None and nxt > until:
            return at
        at = max(at, nxt)
        batch_advance(batch.pk, at=at)
    raise AssertionError("the batch did not end")


# --- Job builders -----------------------------------------------------------------------


def job_submit(api: ApiClient, *, key: str | None = None, **fields):
    """POST /api/v1/jobs: a GDP-Val task with a 600 s deadline unless `fields` say
    otherwise; `key` is sent as the Idempotency-Key. The response."""
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post_json("/api/v1/jobs", GDPVAL | {"deadline_seconds": 600} | fields, **extra)


# --- Factories (no catalog.toml) --------------------------------------------------------


def make_account(name: str = "acme") -> Account:
    """A bare account: no API key (`api_key_create` gives one) and no package."""
    return Account.objects.create(name=name)


def make_package(
    account: Account,
    *,
    limit: Decimal | str = "100",
    name: str = "Main (monthly)",
    order: int = 10,
    **options,
) -> QuotaPackage:
    """A quota package through the quota service; by default the monthly main package
    every new account gets (order 10, 100 credits, all models)."""
    return package_create(account=account, name=name, limit=limit, order=order, **options)


def make_tier(slug: str = "standard", *, rank: int = 1, multiplier: str = "1") -> Tier:
    """A service tier (the existing one when the slug is taken)."""
    tier, _ = Tier.objects.get_or_create(
        slug=slug,
        defaults={"name": slug.title(), "rank": rank, "price_multiplier": Decimal(multiplier)},
    )
    return tier


def make_pool(slug: str = "test-pool", *, device: str = "h200", nodes: int = 64) -> HardwarePool:
    """A hardware pool (the existing one when the slug is taken)."""
    pool, _ = HardwarePool.objects.get_or_create(
        slug=slug, defaults={"name": slug, "device": device, "nodes": nodes}
    )
    return pool


def make_model(
    slug: str = "test-model",
    *,
    family: str = "test-family",
    tier: str = "standard",
    pool: str = "test-pool",
    price_input: str = "1.00",
    price_output: str = "4.00",
    **fields,
) -> ModelVersion:
    """A generally available model version deployed on one tier of one pool, priced there.
    A small dense model (20 B parameters, one byte each) that fits one GPU or one wafer;
    `fields` override any ModelVersion field (e.g. `retires_on`, `kind`)."""
    fam, _ = ModelFamily.objects.get_or_create(
        slug=family, defaults={"name": family, "vendor": "Test"}
    )
    spec = {
        "name": slug,
        "vendor": "Test",
        "released_on": dt.date(2026, 1, 1),
        "context_window": 128_000,
        "total_params": 20_000_000_000,
        "active_params_prefill": 20_000_000_000,
        "active_params_decode": 20_000_000_000,
        "layers": 48,
        "hidden_size": 6144,
        "bytes_per_param": 1.0,
        "kv_bytes_per_token": 98_304,
    }
    model = ModelVersion.objects.create(slug=slug, family=fam, **(spec | fields))
    t, p = make_tier(tier), make_pool(pool)
    Deployment.objects.create(model=model, tier=t, pool=p)
    Price.objects.create(
        model=model,
        tier=t,
        input_per_million=Decimal(price_input),
        output_per_million=Decimal(price_output),
    )
    return model

"""Notices: a retirement announced reaches every affected account, once, in the API
(GET /api/v1/notices), by the account's `webhook_url` (unsigned, with retries: the
notice itself) and as a signed `model.deprecated` event to its webhook endpoints
(routing.webhooks; `model.retiring` and `model.retired` follow, routing.retirement.events).

Affected: accounts that ran jobs on the model in the last 30 days, and accounts holding
a quota package tied to it. Creating a notice is idempotent (unique per account, model
and retirement date), so announcing twice, or the beat sweep after a crash, notifies once.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from django.db import IntegrityError, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing.core import dispatch, tasknames
from routing.core.formats import iso
from routing.core.urls_safe import UnsafeURL, configured_check
from routing.models import Account, Job, Notice
from routing.quota import tied_packages
from routing.webhooks.delivery import PostFailed, webhook_post
from routing.webhooks.events import event_emit

logger = logging.getLogger(__name__)

RECENT_USE = dt.timedelta(days=30)
WEBHOOK_MAX_ATTEMPTS = 6


class WebhookError(Exception):
    pass


class WebhookRefused(WebhookError):
    """The URL is not one the service may call (routing.core.urls_safe): the notice
    fails at once, with the reason, without retries."""


def webhook_check(url: str) -> None:
    """WebhookRefused unless `url` passes the webhook rule (https, public address)."""
    try:
        configured_check(url)
    except UnsafeURL as exc:
        raise WebhookRefused(f"refused: {exc}") from exc


def affected_accounts(model: ModelVersion, at: dt.datetime) -> dict[int, dict]:
    """account id -> {jobs_30d, packages}: who still uses the model or holds quota on it."""
    out: dict[int, dict] = {}
    recent = (
        Job.objects.filter(model=model, created_at__gte=at - RECENT_USE)
        .values("account_id")
        .annotate(n=Count("id"))
    )
    for row in recent:
        out.setdefault(row["account_id"], {"jobs_30d": 0, "packages": []})["jobs_30d"] = row["n"]
    for p in tied_packages(model).select_related("migrate_tier"):
        out.setdefault(p.account_id, {"jobs_30d": 0, "packages": []})["packages"].append(
            {
                "id": p.pk,
                "name": p.name,
                "policy": p.on_retirement,
                "migrate_tier": p.migrate_tier.slug if p.migrate_tier_id else None,
                "conversion": str(p.conversion),
            }
        )
    return out


def notices_announce(*, model: ModelVersion, at: dt.datetime | None = None) -> int:
    """Record (and send) a retirement notice for each affected account. Idempotent."""
    at = at or timezone.now()
    if model.retires_on is None or lifecycle.model_status(model, at) not in (
        lifecycle.DEPRECATED,
        lifecycle.RETIRED,
    ):
        return 0
    created = 0
    webhooks = dict(Account.objects.exclude(webhook_url="").values_list("pk", "webhook_url"))
    for account_id, usage in affected_accounts(model, at).items():
        body = {
            "object": "notice",
            "kind": "retirement",
            "model": model.slug,
            "retires_on": model.retires_on.isoformat(),
            "announced_on": (model.retirement_announced_on or model.retires_on).isoformat(),
            "successor": model.successor.slug if model.successor_id else None,
            "successor_tier": model.successor_tier.slug if model.successor_tier_id else None,
            "message": (
                f"{model.slug} retires on {model.retires_on} (00:00 UTC)"
                + (f"; move to {model.successor.slug}" if model.successor_id else "")
                + (f" on {model.successor_tier.slug}" if model.successor_tier_id else "")
                + "."
            ),
            "your_usage": {"jobs_last_30_days": usage["jobs_30d"]},
            "quota": usage["packages"],
        }
        try:
            with transaction.atomic():
                notice = Notice.objects.create(
                    account_id=account_id,
                    model=model,
                    retires_on=model.retires_on,
                    successor_id=model.successor_id,
                    successor_tier_id=model.successor_tier_id,
                    body=body,
                    delivery=Notice.Delivery.PENDING
                    if account_id in webhooks
                    else Notice.Delivery.NONE,
                )
                if account_id in webhooks:
                    transaction.on_commit(lambda nid=notice.pk: send_delivery(nid))
                # The signed event to the account's webhook endpoints, with the notice.
                event_emit(
                    account_id=account_id,
                    type="model.deprecated",
                    key=f"model.deprecated:{model.pk}:{model.retires_on}",
                    data={k: v for k, v in body.items() if k != "object"},
                )
            created += 1
        except IntegrityError:
            continue  # this account was told already
    return created


def notices_announce_due(*, at: dt.datetime | None = None) -> int:
    """Beat: notices for every announced retirement (covers a future announcement date
    arriving, and an announcement whose notices were cut short by a crash)."""
    at = at or timezone.now()
    models = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.DEPRECATED, at)
    ).select_related("successor", "successor_tier")
    created = sum(notices_announce(model=m, at=at) for m in models)
    # Pending deliveries never tried (the broker was away when they were made).
    stale = at - dt.timedelta(seconds=60)
    for notice_id in Notice.objects.filter(
        delivery=Notice.Delivery.PENDING, attempts=0, created_at__lte=stale
    ).values_list("pk", flat=True):
        send_delivery(notice_id)
    return created


def notice_json(notice: Notice) -> dict:
    return {
        "id": str(notice.pk),
        **notice.body,
        "created_at": iso(notice.created_at),
        "delivery": notice.delivery,
    }


def send_delivery(notice_id) -> None:
    """Deliver the notice's webhook on a worker; beat's sweep sends pending ones later
    when the broker is away."""
    dispatch.send_now(tasknames.DELIVER_NOTICE, str(notice_id))


def notices_resend(*, notices: QuerySet[Notice]) -> int:
    """Deliver again, from a fresh count of attempts, those of `notices` that have a
    webhook and were not delivered (failed or pending); the number sent."""
    ids = list(
        notices.exclude(account__webhook_url="")
        .exclude(delivery=Notice.Delivery.DELIVERED)
        .values_list("pk", flat=True)
    )
    Notice.objects.filter(pk__in=ids).update(delivery=Notice.Delivery.PENDING, attempts=0)
    for notice_id in ids:
        send_delivery(notice_id)
    return len(ids)


def _post(url: str, payload: dict, notice_id: str) -> None:
    """POST once through the webhooks' one way of calling out (no redirect followed, no
    proxy, only to public addresses, checked before and on the connected socket)."""
    try:
        webhook_post(
            url,
            json.dumps(payload).encode(),
            {
                "Idempotency-Key": notice_id,  # receivers dedupe: delivery is at least once
                "User-Agent": "model-lifecycle-router/1 (+notices)",
            },
        )
    except PostFailed as exc:
        raise (WebhookRefused if exc.refused else WebhookError)(str(exc)) from exc


def notice_deliver(notice_id, *, final: bool = False, post=_post) -> Notice | None:
    """One delivery attempt of a pending notice. Raises WebhookError to be retried;
    with `final`, a failure marks the notice failed instead. A URL the service may not
    call (WebhookRefused) fails the notice at once, with the reason, never retried."""
    notice = (
        Notice.objects.select_related("account")
        .filter(pk=notice_id, delivery=Notice.Delivery.PENDING)
        .first()
    )
    if notice is None or not notice.account.webhook_url:
        return None
    now = timezone.now()
    try:
        webhook_check(notice.account.webhook_url)
        post(notice.account.webhook_url, notice_json(notice), str(notice.pk))
    except WebhookError as exc:
        final = final or isinstance(exc, WebhookRefused)
        Notice.objects.filter(pk=notice.pk, delivery=Notice.Delivery.PENDING).update(
            attempts=notice.attempts + 1,
            last_attempt_at=now,
            last_error=str(exc)[:300],
            delivery=Notice.Delivery.FAILED if final else Notice.Delivery.PENDING,
        )
        if not final:
            raise
        return None
    Notice.objects.filter(pk=notice.pk, delivery=Notice.Delivery.PENDING).update(
        attempts=notice.attempts + 1,
        last_attempt_at=now,
        last_error="",
        delivery=Notice.Delivery.DELIVERED,
        delivered_at=now,
    )
    return Notice.objects.get(pk=notice.pk)


def on_retirement_announced(sender, model: ModelVersion, **kwargs) -> None:
    notices_announce(model=model)

"""Budget alerts (issue 27): each threshold (percent of a limit, default 50 / 80 / 100)
of a quota package (its `spent` against its `limit`, per its period) and of a key with
a spending cap (its spend against `spend_limit`, per `spend_period`) is told once per
period: a notice (GET /api/v1/notices, kind `quota.threshold`) and a signed
`quota.threshold` webhook event, both written in the transaction that claims it.

The claim is a BudgetAlert row, unique per (subject, period start, threshold): however
many settlements cross a threshold at once, one inserts it. A package is checked right
after its spend grows (settle, draw: routing.quota.ledger), in the same transaction,
by one statement that inserts the thresholds now reached (nothing when below them);
the package's row lock, held since the spend changed, makes it read the latest spend.
A key is checked after a job it sends is accepted (on commit: the spend its cap counts,
charged or held; routing.accounts.scopes). Never on the quote path."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from routing.core.formats import iso
from routing.models import ApiKey, BudgetAlert, Notice, QuotaPackage
from routing.webhooks.events import event_emit

MAX_THRESHOLD = 1000

_ALERT = BudgetAlert._meta.db_table
_PKG = QuotaPackage._meta.db_table
_COLUMNS = 'account_id, subject, package_id, api_key_id, period_start, threshold, spent, "limit", created_at'
# The thresholds the package's spend has reached, inserted unless claimed already.
_PACKAGE_SQL = {
    "postgresql": f"""
INSERT INTO {_ALERT} ({_COLUMNS})
SELECT p.account_id, 'package:' || p.id, p.id, NULL, p.period_start, t.pct, p.spent,
    p."limit", %(at)s
FROM {_PKG} p CROSS JOIN LATERAL (
    SELECT CASE WHEN e ~ '^[0-9]{{1,4}}$' THEN e::int END AS pct
    FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof(p.alert_thresholds) = 'array'
        THEN p.alert_thresholds ELSE '[]'::jsonb END) AS e
) AS t
WHERE p.id = %(id)s AND p."limit" > 0 AND t.pct BETWEEN 1 AND {MAX_THRESHOLD}
    AND p.spent * 100 >= p."limit" * t.pct
ON CONFLICT DO NOTHING
RETURNING id
""",
    "sqlite": f"""
INSERT INTO {_ALERT} ({_COLUMNS})
SELECT p.account_id, 'package:' || p.id, p.id, NULL, p.period_start, t.value, p.spent,
    p."limit", %(at)s
FROM {_PKG} p, json_each(CASE WHEN json_type(p.alert_thresholds) = 'array'
    THEN p.alert_thresholds ELSE '[]' END) AS t
WHERE p.id = %(id)s AND p."limit" > 0 AND t.type = 'integer'
    AND t.value BETWEEN 1 AND {MAX_THRESHOLD}
    AND CAST(p.spent AS REAL) * 100 >= CAST(p."limit" AS REAL) * t.value
ON CONFLICT DO NOTHING
RETURNING id
""",
}


def thresholds_clean(values) -> list[int]:
    """Sorted distinct whole percents 1..1000; ValueError otherwise."""
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_THRESHOLD for v in values
    ):
        raise ValueError(f"Thresholds are a list of whole percents from 1 to {MAX_THRESHOLD}.")
    return sorted(set(values))


def thresholds_crossed(before, after, limit, thresholds) -> bool:
    """Whether a spend going from `before` to `after` reached a threshold (percent of
    `limit`) it had not reached: the settlement that does it checks the package."""
    if isinstance(thresholds, str):
        thresholds = json.loads(thresholds)
    if before is None or after is None or not limit or not isinstance(thresholds, list):
        return False
    return any(isinstance(t, int) and before * 100 < limit * t <= after * 100 for t in thresholds)


def package_alerts_check(package_id: int, *, at: dt.datetime | None = None) -> list[BudgetAlert]:
    """Claim and tell the package's thresholds its spend has reached this period (call
    right after the spend grew, in its transaction). The alerts made now."""
    at = at or timezone.now()
    with transaction.atomic(savepoint=False), connection.cursor() as cur:
        cur.execute(
            _PACKAGE_SQL[connection.vendor],
            {"id": package_id, "at": connection.ops.adapt_datetimefield_value(at)},
        )
        ids = [row[0] for row in cur.fetchall()]
        if not ids:
            return []
        alerts = list(
            BudgetAlert.objects.filter(pk__in=ids).select_related("package").order_by("threshold")
        )
        for alert in alerts:
            _tell(alert, name=alert.package.name, period_end=alert.package.next_reset_at)
        return alerts


def key_alerts_record(
    *, key: ApiKey, spent: Decimal, period_start: dt.datetime, period_end, at: dt.datetime
) -> list[BudgetAlert]:
    """Claim and tell the key's thresholds `spent` has reached in the period from
    `period_start` (routing.accounts.scopes computes the spend)."""
    if not key.spend_limit or key.spend_limit <= 0:
        return []
    try:
        thresholds = thresholds_clean(key.alert_thresholds or [])
    except ValueError:
        return []
    reached = [t for t in thresholds if spent * 100 >= key.spend_limit * t]
    if not reached:
        return []
    subject = f"key:{key.pk}"
    told = set(
        BudgetAlert.objects.filter(
            subject=subject, period_start=period_start, threshold__in=reached
        ).values_list("threshold", flat=True)
    )
    made = []
    for threshold in (t for t in reached if t not in told):
        try:
            with transaction.atomic():
                alert = BudgetAlert.objects.create(
                    account_id=key.account_id,
                    subject=subject,
                    api_key=key,
                    period_start=period_start,
                    threshold=threshold,
                    spent=spent,
                    limit=key.spend_limit,
                    created_at=at,
                )
                _tell(alert, name=key.name, period_end=period_end)
            made.append(alert)
        except IntegrityError:
            continue  # claimed by a concurrent check
    return made


def alert_body(alert: BudgetAlert, *, name: str, period_end) -> dict:
    """The notice's and the webhook event's content."""
    scope = "package" if alert.package_id else "key"
    subject_id = alert.package_id or alert.api_key_id
    what = f"Quota package {name!r}" if scope == "package" else f"API key {name!r}"
    return {
        "kind": Notice.QUOTA_THRESHOLD,
        "scope": scope,
        scope: {"id": subject_id, "name": name},
        "threshold": alert.threshold,
        "spent": f"{alert.spent:.6f}",
        "limit": f"{alert.limit:.6f}",
        "period_start": iso(alert.period_start),
        "period_end": iso(period_end),
        "message": f"{what} has used {alert.threshold} % of its {alert.limit:.2f} credits "
        f"this period ({alert.spent:.2f} spent).",
    }


def _tell(alert: BudgetAlert, *, name: str, period_end) -> None:
    body = alert_body(alert, name=name, period_end=period_end)
    Notice.objects.create(
        account_id=alert.account_id,
        kind=Notice.QUOTA_THRESHOLD,
        body={"object": "notice", **body},
        delivery=Notice.Delivery.NONE,
    )
    event_emit(
        account_id=alert.account_id,
        type="quota.threshold",
        key=f"quota.threshold:{alert.subject}:{iso(alert.period_start)}:{alert.threshold}",
        data=body,
    )

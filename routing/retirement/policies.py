"""What a retirement does to quota: each package tied to the retired model (scope
"models") follows its `on_retirement` policy, once.

- keep: the package stays until its own expiry and also covers the successor;
- migrate: the package moves to the successor (optionally one tier) and its remaining
  credits are converted at the stated rate;
- expire: the package stops covering anything from the retirement date (it stays
  visible, with its dates, in GET /api/v1/quota: a package never silently disappears).

Each (package, model) is claimed by a unique row in the same transaction as its change,
so running twice, or again after a crash half-way, applies every policy exactly once.
Credits held for work already accepted stay reserved and settle as usual.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing.models import LedgerEntry, QuotaPackage, RetirementApplication
from routing.quota import credits, tied_packages


def quota_apply_retirement(*, model: ModelVersion, at: dt.datetime | None = None) -> dict:
    """Apply the policies of every package tied to a retired model. Idempotent."""
    at = at or timezone.now()
    if lifecycle.model_status(model, at) != lifecycle.RETIRED:
        raise lifecycle.LifecycleError(f"{model.slug} is not retired; nothing to apply.")
    res = lifecycle.resolve_successor(model, at)
    successor = res.model if res.model.pk != model.pk else None
    done = {"applied": 0, "already": 0}
    for package_id in tied_packages(model).values_list("pk", flat=True):
        if _apply_one(package_id, model, successor, at):
            done["applied"] += 1
        else:
            done["already"] += 1
    return done


def _apply_one(package_id: int, model: ModelVersion, successor, at: dt.datetime) -> bool:
    with transaction.atomic():
        package = QuotaPackage.objects.select_for_update().get(pk=package_id)
        try:
            with transaction.atomic():
                claim = RetirementApplication.objects.create(
                    package=package, model=model, policy=package.on_retirement, successor=successor
                )
        except IntegrityError:
            return False  # applied before
        policy = package.on_retirement
        if policy == QuotaPackage.OnRetirement.EXPIRE or successor is None:
            ends = lifecycle.day_start(model.retires_on)
            if package.valid_until is None or package.valid_until > ends:
                package.valid_until = ends
                package.save(update_fields=["valid_until"])
            detail = f"{model.slug} retired: expires {ends:%Y-%m-%d}" + (
                "" if successor else " (no successor)"
            )
        elif policy == QuotaPackage.OnRetirement.KEEP:
            package.model_versions.add(successor)
            detail = f"{model.slug} retired: kept, now also covers {successor.slug}"
        else:
            remaining = package.remaining
            converted = credits(remaining * package.conversion)
            package.limit = package.spent + package.reserved + converted
            package.save(update_fields=["limit"])
            package.model_versions.remove(model)
            package.model_versions.add(successor)
            if package.migrate_tier_id:
                package.tiers.set([package.migrate_tier_id])
            tier = f" on {package.migrate_tier.slug}" if package.migrate_tier_id else ""
            detail = (
                f"{model.slug} retired: migrated to {successor.slug}{tier}; "
                f"{remaining:.6f} credits x {package.conversion} = {converted:.6f}"
            )
        claim.detail = detail[:300]
        claim.save(update_fields=["detail"])
        LedgerEntry.objects.create(
            package=package,
            kind=LedgerEntry.Kind.RETIREMENT,
            delta_reserved=Decimal(0),
            delta_spent=Decimal(0),
            note=detail[:200],
        )
        return True


def package_retirements(package: QuotaPackage, at: dt.datetime) -> list[dict]:
    """For the client: each tied model that is deprecated or retired, with what its
    retirement does (or did) to this package. Uses prefetched relations."""
    applied = {a.model_id: a for a in package.retirements.all()}
    out = []
    if package.scope != QuotaPackage.Scope.MODELS:
        return out
    for model in package.model_versions.all():
        status = lifecycle.model_status(model, at)
        if status not in (lifecycle.DEPRECATED, lifecycle.RETIRED) and model.pk not in applied:
            continue
        a = applied.get(model.pk)
        out.append(
            {
                "model": model.slug,
                "status": status,
                "retires_on": model.retires_on,
                "successor": model.successor.slug if model.successor_id else None,
                "policy": a.policy if a else package.on_retirement,
                "migrate_tier": package.migrate_tier.slug if package.migrate_tier_id else None,
                "conversion": str(package.conversion),
                "applied_at": a.applied_at if a else None,
                "detail": a.detail if a else "",
            }
        )
    return out

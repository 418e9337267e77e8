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
from django.db.models import QuerySet
from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing.models import Job, LedgerEntry, QuotaPackage, RetirementApplication
from routing.quota.service import credits


def tied_packages(model: ModelVersion) -> QuerySet[QuotaPackage]:
    return QuotaPackage.objects.filter(
        scope=QuotaPackage.Scope.MODELS, model_versions=model
    ).distinct()


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
            remaining = package.limit - package.spent - package.reserved
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


def retirements_apply_due(*, at: dt.datetime | None = None) -> dict:
    """The retirement day's quota work for every retired model with tied packages not
    yet handled (beat, every minute; also the admin's retire-now)."""
    at = at or timezone.now()
    totals = {"models": 0, "applied": 0, "rerouted": 0, "batch_lines_moved": 0}
    through = QuotaPackage.model_versions.through.objects.filter(
        quotapackage__scope=QuotaPackage.Scope.MODELS
    )
    tied = set(through.values_list("quotapackage_id", "modelversion_id"))
    tied -= set(RetirementApplication.objects.values_list("package_id", "model_id"))
    pending = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.RETIRED, at), pk__in={m for _, m in tied}
    )
    for model in pending:
        result = quota_apply_retirement(model=model, at=at)
        totals["models"] += 1
        totals["applied"] += result["applied"]
    # Jobs not yet started on models that re-route them (retired ones only).
    rerouting = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.RETIRED, at),
        in_flight_on_retirement=ModelVersion.InFlight.REROUTE,
        jobs__status=Job.Status.QUEUED,
    ).distinct()
    totals["rerouted"] = sum(jobs_reroute(model=m, at=at)["rerouted"] for m in rerouting)
    # Batch lines not yet started on retired models: re-planned on the successor.
    from routing.batches.reroute import batches_reroute
    from routing.models import BatchRequest

    with_lines = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.RETIRED, at),
        pk__in=BatchRequest.objects.filter(status=BatchRequest.Status.QUEUED).values("model_id"),
    )
    totals["batch_lines_moved"] = sum(batches_reroute(model=m, at=at)["moved"] for m in with_lines)
    return totals


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


def on_model_retired(sender, model: ModelVersion, **kwargs) -> None:
    """Retire-now in the admin applies the day's work at once (beat would within a
    minute anyway): quota policies, re-routing of jobs where the model's policy says so,
    and re-planning of batch lines not yet started."""
    from routing.batches.reroute import batches_reroute

    quota_apply_retirement(model=model)
    jobs_reroute(model=model)
    batches_reroute(model=model)


def jobs_reroute(*, model: ModelVersion, at: dt.datetime | None = None) -> dict:
    """On the day, for a model whose policy says so: jobs accepted but not yet started
    move to the successor (re-routed and re-reserved in one transaction each). Running
    jobs finish where they are; a job the successor cannot take (deadline, quota) stays
    and finishes on the retired model. Idempotent: only queued jobs still on the retired
    model are touched."""
    from routing.jobs.service import placement_fields
    from routing.quota.service import account_packages, quota_release, quota_reserve_for
    from routing.router.route import RouteRequest, route
    from routing.router.snapshot import model_option, pool_loads

    at = at or timezone.now()
    done = {"rerouted": 0, "kept": 0}
    if model.in_flight_on_retirement != ModelVersion.InFlight.REROUTE:
        return done
    res = lifecycle.resolve_successor(model, at)
    if res.model.pk == model.pk or lifecycle.model_status(model, at) != lifecycle.RETIRED:
        return done
    successor, option = res.model, model_option(res.model)
    loads = pool_loads()
    for job_id in Job.objects.filter(model=model, status=Job.Status.QUEUED).values_list(
        "pk", flat=True
    ):
        with transaction.atomic():
            job = (
                Job.objects.select_for_update(of=("self",))
                .filter(pk=job_id, model=model, status=Job.Status.QUEUED)
                .select_related("reservation")
                .first()
            )
            if job is None:
                continue
            request = RouteRequest(
                input_tokens=job.input_tokens,
                output_tokens=job.output_tokens,
                turns=job.turns,
                tool_seconds=job.tool_seconds,
                deadline_seconds=job.deadline_seconds,
                max_cost=job.max_cost,
                tier=res.tier.slug if res.tier else None,
            )
            decision = route(
                request,
                models=[option],
                packages=account_packages(job.account_id),
                loads=loads,
                now=at,
            )
            c = decision.chosen
            if c is None:
                done["kept"] += 1
                continue
            quota_release(reference=job.reservation.reference, now=at)
            reservation = quota_reserve_for(
                account=job.account_id,
                model_id=successor.pk,
                family_id=successor.family_id,
                tier_id=c.tier_id,
                amount=c.cost,
                reference=f"job:{job.pk}:to:{successor.slug}",
                at=at,
                note=f"job {job.pk} re-routed from {model.slug}",
            )
            job.rerouted_from = model.slug
            job.model = successor
            for name, value in placement_fields(c, reservation, at).items():
                setattr(job, name, value)
            job.save()
            done["rerouted"] += 1
    return done

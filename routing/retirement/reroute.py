"""Retirement day for jobs: queued jobs of a model whose policy says so move to its
successor, each re-routed and re-reserved in one transaction."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing import quota
from routing.jobs.submit import placement_fields
from routing.models import Job
from routing.router.route import RouteRequest, route
from routing.router.snapshot import model_option, pool_state


def jobs_reroute(*, model: ModelVersion, at: dt.datetime | None = None) -> dict:
    """On the day, for a model whose policy says so: jobs accepted but not yet started
    move to the successor (re-routed and re-reserved in one transaction each). Running
    jobs finish where they are; a job the successor cannot take (deadline, quota) stays
    and finishes on the retired model. Idempotent: only queued jobs still on the retired
    model are touched."""
    at = at or timezone.now()
    done = {"rerouted": 0, "kept": 0}
    if model.in_flight_on_retirement != ModelVersion.InFlight.REROUTE:
        return done
    res = lifecycle.resolve_successor(model, at)
    if res.model.pk == model.pk or lifecycle.model_status(model, at) != lifecycle.RETIRED:
        return done
    successor, option = res.model, model_option(res.model)
    pools = pool_state(at)
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
                packages=quota.account_packages(job.account_id),
                loads=pools.loads,
                own=pools.own,
                now=at,
            )
            c = decision.chosen
            if c is None:
                done["kept"] += 1
                continue
            quota.quota_release(reference=job.reservation.reference, at=at)
            reservation = quota.quota_reserve_for(
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
            for name, value in placement_fields(c, reservation, at, job.created_at).items():
                setattr(job, name, value)
            job.save()
            done["rerouted"] += 1
    return done

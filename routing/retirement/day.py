"""The retirement day's work, run by beat every minute and at once by the admin's
retire-now: quota policies of tied packages, re-routing of queued jobs, re-planning of
batch lines not yet started."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from catalog import lifecycle
from catalog.models import ModelVersion
from routing.batches.reroute import batches_reroute
from routing.models import BatchRequest, Job, RetirementApplication
from routing.quota import tied_pairs
from routing.retirement.events import model_retired_emit, retirement_events_due
from routing.retirement.policies import quota_apply_retirement
from routing.retirement.reroute import jobs_reroute


def retirements_apply_due(*, at: dt.datetime | None = None) -> dict:
    """The retirement day's quota work for every retired model with tied packages not
    yet handled (beat, every minute; also the admin's retire-now)."""
    at = at or timezone.now()
    totals = {"models": 0, "applied": 0, "rerouted": 0, "batch_lines_moved": 0}
    tied = tied_pairs() - set(RetirementApplication.objects.values_list("package_id", "model_id"))
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
    with_lines = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.RETIRED, at),
        pk__in=BatchRequest.objects.filter(status=BatchRequest.Status.QUEUED).values("model_id"),
    )
    totals["batch_lines_moved"] = sum(batches_reroute(model=m, at=at)["moved"] for m in with_lines)
    # The webhook events: model.retiring before the day, model.retired on it.
    retirement_events_due(at=at)
    return totals


def on_model_retired(sender, model: ModelVersion, **kwargs) -> None:
    """Retire-now in the admin applies the day's work at once (beat would within a
    minute anyway): quota policies, re-routing of jobs where the model's policy says so,
    and re-planning of batch lines not yet started."""
    quota_apply_retirement(model=model)
    jobs_reroute(model=model)
    batches_reroute(model=model)
    model_retired_emit(model=model)

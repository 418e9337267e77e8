"""Read-side queries of the catalog, shared by the API, the admin and commands."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet

from catalog.lifecycle import STATUSES, LifecycleError, retiring_within_q, status_q
from catalog.models import ModelVersion
from catalog.serializers import deployments_prefetch
from httpedge.text import echo


class ModelNotFound(LookupError):
    def __init__(self, slug: str):
        self.slug = slug
        known = list(ModelVersion.objects.order_by("slug").values_list("slug", flat=True))
        super().__init__(f"No model {echo(slug)}. Known models: {', '.join(known)}.")


def model_list(
    *,
    status: str | None = None,
    family: str | None = None,
    vendor: str | None = None,
    retiring_within_days: int | None = None,
    at: dt.datetime | None = None,
) -> QuerySet[ModelVersion]:
    qs = ModelVersion.objects.select_related("family", "successor", "successor_tier")
    if status:
        if status not in STATUSES:
            raise LifecycleError(
                f"Unknown status {echo(status)}; expected one of {', '.join(STATUSES)}."
            )
        qs = qs.filter(status_q(status, at))
    if family:
        qs = qs.filter(family__slug=family)
    if vendor:
        qs = qs.filter(vendor__iexact=vendor)
    if retiring_within_days is not None:
        qs = qs.filter(retiring_within_q(retiring_within_days, at))
    return qs


def model_get(*, slug: str) -> ModelVersion:
    model = (
        ModelVersion.objects.select_related("family", "successor", "successor_tier")
        .prefetch_related(deployments_prefetch(), "prices", "benchmarks", "speeds__tier")
        .filter(slug=slug)
        .first()
    )
    if model is None:
        raise ModelNotFound(slug)
    return model

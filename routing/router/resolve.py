"""Which model a request names and runs on: lifecycle resolution for routing (a retired
model's successor when the account opted in), and the refusals it raises."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from catalog import lifecycle
from catalog.models import ModelVersion, Tier
from routing.router.route import normalise_task
from routing.router.snapshot import catalog_rows


@dataclass(frozen=True)
class Resolved:
    requested: str
    requested_model: ModelVersion
    model: ModelVersion
    status: str
    migrated: bool
    recommended_tier: Tier | None


class ModelUnknown(LookupError):
    pass


class ModelRetired(Exception):
    def __init__(self, model: ModelVersion, successor: ModelVersion | None, tier: Tier | None):
        self.model, self.successor, self.tier = model, successor, tier
        super().__init__(model.slug)


class ModelNotServing(Exception):
    def __init__(self, model: ModelVersion, status: str):
        self.model, self.status = model, status
        super().__init__(model.slug)


def resolve_for_routing(ref: str, *, auto_migrate: bool, at: dt.datetime) -> Resolved:
    """The model a request will run on: the one named, or for a retired model its
    successor when the account opted in to automatic migration (never silently)."""
    model = lifecycle.pick_model_reference(ref, catalog_rows(), at)
    if model is None:
        raise ModelUnknown(ref)
    status = lifecycle.model_status(model, at)
    if status == lifecycle.RETIRED:
        res = lifecycle.resolve_successor(model, at)
        successor = res.model if res.model.pk != model.pk else None
        if successor is None or not auto_migrate or not lifecycle.is_serving(successor, at):
            raise ModelRetired(model, successor, res.tier)
        return Resolved(ref, model, successor, status, True, res.tier)
    if status == lifecycle.UPCOMING:
        raise ModelNotServing(model, status)
    return Resolved(ref, model, model, status, False, None)


def auto_candidates(task: str, at: dt.datetime) -> list[ModelVersion]:
    """Serving models with a published result for the task class (model "auto")."""
    wanted = normalise_task(task)
    serving = ModelVersion.objects.filter(
        lifecycle.status_q(lifecycle.ACTIVE, at)
        | lifecycle.status_q(lifecycle.PREVIEW, at)
        | lifecycle.status_q(lifecycle.DEPRECATED, at)
    ).prefetch_related("benchmarks")
    return [m for m in serving if any(normalise_task(b.name) == wanted for b in m.benchmarks.all())]

"""Lifecycle rules for model versions: one place for successors and lifecycle changes.

The status rule itself (`model_status`, `status_q`, the status names, `utc_today`) lives
in `catalog.status`, the lowest catalog module, so that `catalog.models` can use it
without importing this module; every name of it is re-exported here, so callers keep
importing them from `catalog.lifecycle`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from email.utils import format_datetime

from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal

from catalog.models import LifecycleChange, ModelVersion, NoticePolicy, Tier
from catalog.status import (  # noqa: F401 - the status rule, re-exported for callers
    ACTIVE,
    DEPRECATED,
    PREVIEW,
    RETIRED,
    STATUSES,
    UPCOMING,
    LifecycleError,
    day_start,
    is_serving,
    model_status,
    status_q,
    utc_today,
)

LIFECYCLE_FIELDS = (
    "released_on",
    "generally_available_on",
    "retirement_announced_on",
    "retires_on",
    "successor",
    "successor_tier",
)


# Sent (after commit) when a model is retired now; other apps react (quota policies)
# without the catalog knowing them. Beat covers a retirement that simply arrives.
model_retired = Signal()  # kwargs: model
# Sent (after commit) when a retirement is scheduled with an announcement date today or
# earlier: clients are to be told. A future announcement date is picked up by beat.
retirement_announced = Signal()  # kwargs: model


# `retiring_within_days` beyond a century is a typo (and past year 9999 a date overflow).
MAX_RETIRING_WITHIN_DAYS = 36_525


def retiring_within_q(days: int, at: dt.datetime | None = None) -> Q:
    today = utc_today(at)
    return Q(retires_on__gt=today, retires_on__lte=today + dt.timedelta(days=days))


@dataclass(frozen=True)
class Resolution:
    """Where a successor chain leads today, and the path taken."""

    model: ModelVersion
    chain: tuple[ModelVersion, ...]
    tier: Tier | None


def resolve_successor(model: ModelVersion, at: dt.datetime | None = None) -> Resolution:
    """Follow successors from a deprecated or retired model to the model to use today.

    An active model resolves to itself. The tier is the last recommendation on the way
    (Spark -> Sol recommends Ultrafast).
    """
    chain = [model]
    seen = {model.pk}
    tier = None
    current = model
    while current.successor_id is not None and model_status(current, at) in (DEPRECATED, RETIRED):
        nxt = current.successor
        if nxt.pk in seen:  # refused on write; guard against hand-edited rows anyway
            raise LifecycleError(f"Successor chain of {model.slug} loops at {nxt.slug}.")
        tier = current.successor_tier
        seen.add(nxt.pk)
        chain.append(nxt)
        current = nxt
    return Resolution(model=current, chain=tuple(chain), tier=tier)


def pick_model_reference(
    ref: str, models: Iterable[ModelVersion], at: dt.datetime | None = None
) -> ModelVersion | None:
    """The model `ref` names among `models`: the version with that slug, or for a family
    alias (`sol`) the family's newest serving version (the newest of any status when
    none serves, so the caller can say it is retired)."""
    family = []
    for m in models:
        if m.slug == ref:
            return m
        if m.family.slug == ref:
            family.append(m)
    serving = [m for m in family if model_status(m, at) in (ACTIVE, PREVIEW, DEPRECATED)]
    pool = serving or family
    if not pool:
        return None
    return min(pool, key=lambda m: (-m.released_on.toordinal(), m.slug))


def resolve_model_reference(ref: str, at: dt.datetime | None = None) -> ModelVersion | None:
    """A model slug, or a family alias (`sol`) meaning its newest serving version."""
    candidates = ModelVersion.objects.select_related("family", "successor").filter(
        Q(slug=ref) | Q(family__slug=ref)
    )
    return pick_model_reference(ref, candidates, at)


def validate_lifecycle(
    model: ModelVersion,
    *,
    released_on: dt.date,
    retirement_announced_on: dt.date | None,
    retires_on: dt.date | None,
    successor: ModelVersion | None,
    generally_available_on: dt.date | None = None,
) -> None:
    """Refuse impossible lifecycles with a message a person can act on."""
    if retires_on is not None and retires_on < released_on:
        raise LifecycleError(
            f"{model.slug} cannot retire on {retires_on} before its release on {released_on}."
        )
    if generally_available_on is not None and generally_available_on < released_on:
        raise LifecycleError(
            f"{model.slug} cannot be generally available ({generally_available_on}) "
            f"before its release ({released_on})."
        )
    if retirement_announced_on is not None:
        if retires_on is None:
            raise LifecycleError("An announcement date needs a retirement date.")
        if retirement_announced_on > retires_on:
            raise LifecycleError(
                f"The retirement of {model.slug} cannot be announced ({retirement_announced_on}) "
                f"after it takes effect ({retires_on})."
            )
    if retires_on is not None and model.pk is not None:
        # This model may itself be someone's successor: it must not leave first.
        early = model.predecessors.filter(retires_on__gt=retires_on).order_by("slug").first()
        if early is not None:
            raise LifecycleError(
                f"{model.slug} is the successor of {early.slug}, which retires on "
                f"{early.retires_on}; {model.slug} cannot retire before it ({retires_on})."
            )
    if successor is None:
        return
    if model.pk is not None and successor.pk == model.pk:
        raise LifecycleError(f"{model.slug} cannot be its own successor.")
    # Walk the successor's chain: meeting this model again would close a cycle.
    seen = {successor.pk}
    node = successor
    while node.successor_id is not None:
        if model.pk is not None and node.successor_id == model.pk:
            path = " -> ".join([model.slug, *_chain_slugs(successor, stop=model.pk)])
            raise LifecycleError(f"Successor cycle: {path} -> {model.slug}.")
        if node.successor_id in seen:
            break
        seen.add(node.successor_id)
        node = node.successor
    if successor.retires_on is not None and (
        retires_on is None or successor.retires_on < retires_on
    ):
        when = f"on {retires_on}" if retires_on else "with no retirement scheduled"
        raise LifecycleError(
            f"Successor {successor.slug} retires on {successor.retires_on}, before "
            f"{model.slug} does ({when}); choose a successor that outlives it."
        )


def _chain_slugs(start: ModelVersion, stop: int) -> list[str]:
    slugs, node, seen = [], start, set()
    while node is not None and node.pk != stop and node.pk not in seen:
        seen.add(node.pk)
        slugs.append(node.slug)
        node = node.successor
    return slugs


def _display(value) -> str:
    if value is None:
        return ""
    if isinstance(value, ModelVersion | Tier):
        return value.slug
    return str(value)


@transaction.atomic
def model_update_lifecycle(
    *,
    model: ModelVersion,
    actor: str,
    user=None,
    reason: str = "",
    **changes,
) -> ModelVersion:
    """Change lifecycle fields of a model, validated, with one history row per change.

    Every writer (admin form and actions, loadcatalog, future retirement workflow) goes
    through here, so the history is complete.
    """
    unknown = set(changes) - set(LIFECYCLE_FIELDS)
    if unknown:
        raise LifecycleError(f"Not lifecycle fields: {', '.join(sorted(unknown))}.")
    locked = ModelVersion.objects.select_for_update().get(pk=model.pk)
    proposed = {f: changes.get(f, getattr(locked, f)) for f in LIFECYCLE_FIELDS}
    validate_lifecycle(
        locked,
        released_on=proposed["released_on"],
        generally_available_on=proposed["generally_available_on"],
        retirement_announced_on=proposed["retirement_announced_on"],
        retires_on=proposed["retires_on"],
        successor=proposed["successor"],
    )
    rows = []
    for field in LIFECYCLE_FIELDS:
        old, new = getattr(locked, field), proposed[field]
        if old != new:
            rows.append(
                LifecycleChange(
                    model=locked,
                    field=field,
                    old_value=_display(old),
                    new_value=_display(new),
                    changed_by=user,
                    actor=actor,
                    reason=reason,
                )
            )
            setattr(locked, field, new)
    if rows:
        locked.save()
        LifecycleChange.objects.bulk_create(rows)
    # Keep the caller's object current.
    for field in LIFECYCLE_FIELDS:
        setattr(model, field, getattr(locked, field))
    return locked


class NoticeTooShort(LifecycleError):
    """A retirement inside the notice policy without an override reason."""


def check_notice(
    model: ModelVersion, *, announced_on: dt.date, retires_on: dt.date, override: str
) -> str:
    """The history note for a retirement's notice: empty when the policy is met, the
    override reason when it is not (NoticeTooShort without one)."""
    policy = NoticePolicy.objects.filter(kind=model.kind).first()
    if policy is None:
        return ""
    notice = (retires_on - announced_on).days
    if notice >= policy.minimum_days:
        return ""
    if not override.strip():
        earliest = announced_on + dt.timedelta(days=policy.minimum_days)
        raise NoticeTooShort(
            f"{model.slug} is a {model.kind} model: it gets at least {policy.minimum_days} "
            f"days' notice; {notice} given. Retire on {earliest} or later, or override "
            "the policy with a reason."
        )
    return f"notice override ({notice} of {policy.minimum_days} days): {override.strip()}"


def _with_note(reason: str, note: str) -> str:
    return "; ".join(x for x in (note, reason) if x)


def model_schedule_retirement(
    *,
    model: ModelVersion,
    retires_on: dt.date,
    successor: ModelVersion | None,
    successor_tier: Tier | None = None,
    announced_on: dt.date | None = None,
    actor: str,
    user=None,
    reason: str = "",
    notice_override: str = "",
) -> ModelVersion:
    if model_status(model) == RETIRED:
        raise LifecycleError(f"{model.slug} is already retired (on {model.retires_on}).")
    announced = announced_on or min(utc_today(), retires_on)
    # An impossible lifecycle is refused for that first; the notice question comes after.
    validate_lifecycle(
        model,
        released_on=model.released_on,
        generally_available_on=model.generally_available_on,
        retirement_announced_on=announced,
        retires_on=retires_on,
        successor=successor,
    )
    note = check_notice(
        model, announced_on=announced, retires_on=retires_on, override=notice_override
    )
    with transaction.atomic():
        scheduled = model_update_lifecycle(
            model=model,
            actor=actor,
            user=user,
            reason=_with_note(reason, note),
            retires_on=retires_on,
            retirement_announced_on=announced,
            successor=successor,
            successor_tier=successor_tier,
        )
        if announced <= utc_today():
            transaction.on_commit(
                lambda: retirement_announced.send(sender=ModelVersion, model=scheduled),
                robust=True,
            )
    return scheduled


def model_retire_now(
    *,
    model: ModelVersion,
    actor: str,
    user=None,
    reason: str = "",
    notice_override: str = "",
    at: dt.datetime | None = None,
) -> ModelVersion:
    """Retire from today (00:00 UTC): new work is refused from this moment. Unless the
    retirement was announced long enough ago, this overrides the notice policy and
    needs a reason."""
    if model_status(model, at) == RETIRED:
        raise LifecycleError(f"{model.slug} is already retired (on {model.retires_on}).")
    today = utc_today(at)
    announced = min(model.retirement_announced_on or today, today)
    note = check_notice(model, announced_on=announced, retires_on=today, override=notice_override)
    with transaction.atomic():
        retired = model_update_lifecycle(
            model=model,
            actor=actor,
            user=user,
            reason=_with_note(reason, note) or "retired now",
            retires_on=today,
            retirement_announced_on=announced,
        )
        transaction.on_commit(
            lambda: model_retired.send(sender=ModelVersion, model=retired), robust=True
        )
    return retired


def model_cancel_retirement(
    *, model: ModelVersion, actor: str, user=None, reason: str = ""
) -> ModelVersion:
    status = model_status(model)
    if status == RETIRED:
        raise LifecycleError(
            f"{model.slug} retired on {model.retires_on}; a retirement that has taken effect "
            "cannot be cancelled."
        )
    if model.retires_on is None:
        raise LifecycleError(f"{model.slug} has no retirement scheduled.")
    return model_update_lifecycle(
        model=model,
        actor=actor,
        user=user,
        reason=reason or "retirement cancelled",
        retires_on=None,
        retirement_announced_on=None,
    )


def http_date(day: dt.date) -> str:
    return format_datetime(day_start(day), usegmt=True)


def deprecation_headers(
    model: ModelVersion, *, successor_url: str | None, at: dt.datetime | None = None
) -> dict[str, str]:
    """RFC 9745 Deprecation, RFC 8594 Sunset and a successor Link for a model.

    Empty for a model with no retirement in force (active, preview, or scheduled but
    not yet announced).
    """
    status = model_status(model, at)
    if status not in (DEPRECATED, RETIRED):
        return {}
    deprecated_from = model.retirement_announced_on or model.retires_on
    headers = {
        "Deprecation": f"@{int(day_start(deprecated_from).timestamp())}",
        "Sunset": http_date(model.retires_on),
    }
    if successor_url:
        headers["Link"] = f'<{successor_url}>; rel="successor-version"'
    return headers

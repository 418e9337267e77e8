"""Usage and cost of an account (issue 27): requests, tokens and credits charged, per
UTC time bucket, grouped by key, model, tier, package, user (and batch or not).

One rule, one place: the native `GET /api/v1/usage`, OpenAI's
`/v1/organization/usage/completions` and `/v1/organization/costs`, and the admin's CSV
all read `account_usage`.

What is counted, and when:
- an interactive or native job, once charged: succeeded, or ended early with a charge
  (a stream cut after delivering tokens, a client that left mid-answer). Its credits
  are its `cost`, which is what the ledger's settle row charged; its output tokens
  are those it was charged for (all of them, or the delivered / generated ones). It is
  bucketed at its settlement time, `finished_at` (the same instant the settle passes
  the ledger as the reservation's `closed_at`);
- a batch line, once completed: its `cost` is what the ledger drew for it (in the
  same transaction that completed it); bucketed at its `finished_at`; its key is its
  batch's key, its user the `user` of its request body.
Work released without a charge (refused, cancelled before a token, failed) is not
usage. So a bucket's credits, summed over an account (or one package), equal the sum
of the ledger's settle and draw `delta_spent` for the same work (tested under load on
PostgreSQL).

Deadline attainment is the share of the counted jobs that met their deadline among
those with an outcome (issue 24's `deadline_met`); batch lines have a window instead
and are not part of it (null when no job has an outcome).

A few grouped queries (one per source, one per name look-up), on PostgreSQL and SQLite.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    IntegerField,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Trunc

from catalog.models import ModelVersion, Tier
from routing.models import ApiKey, BatchRequest, Job, QuotaPackage
from routing.quota.packages import credits

UTC = dt.UTC

# Bucket widths: their Trunc kind and length.
BUCKETS = {
    "minute": ("minute", dt.timedelta(minutes=1)),
    "hour": ("hour", dt.timedelta(hours=1)),
    "day": ("day", dt.timedelta(days=1)),
}
# How far back a query reaches by default (in buckets), and at most.
DEFAULT_BUCKETS = {"minute": 60, "hour": 24, "day": 7}
MAX_BUCKETS = {"minute": 1440, "hour": 744, "day": 366}

GROUPS = ("key", "model", "tier", "package", "user", "batch")

# Each group's column on a job and on a batch line.
_JOB_COLUMNS = {
    "key": F("api_key_id"),
    "model": F("model_id"),
    "tier": F("tier_id"),
    "package": F("package_id"),
    "user": F("user"),
}
_LINE_COLUMNS = {
    "key": F("batch__api_key_id"),
    "model": F("model_id"),
    "tier": F("tier_id"),
    "package": F("reservation__package_id"),
    "user": Coalesce(KT("request__body__user"), Value(""), output_field=CharField()),
}


class UsageError(ValueError):
    """A usage query that cannot be answered; `parameter` names the culprit."""

    def __init__(self, parameter: str, message: str):
        super().__init__(message)
        self.parameter = parameter


@dataclass
class UsageRow:
    """One group's usage in one bucket. `group` holds only the grouped dimensions: key
    (id or None: the service, e.g. a schedule), model and tier (slugs), package (id),
    user ("" when none was sent), batch (bool)."""

    group: dict
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    credits: Decimal = Decimal(0)
    deadline_met: int = 0
    deadline_judged: int = 0

    def add(self, other: UsageRow) -> None:
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.credits += other.credits
        self.deadline_met += other.deadline_met
        self.deadline_judged += other.deadline_judged

    @property
    def deadline_met_share(self) -> float | None:
        return self.deadline_met / self.deadline_judged if self.deadline_judged else None


@dataclass
class UsageBucket:
    start: dt.datetime
    end: dt.datetime
    rows: list[UsageRow] = field(default_factory=list)


@dataclass
class Usage:
    start: dt.datetime
    end: dt.datetime
    bucket: str
    group_by: tuple[str, ...]
    buckets: list[UsageBucket]
    # Names of what the rows refer to (for display): key id -> name and prefix,
    # package id -> name.
    keys: dict[int, dict] = field(default_factory=dict)
    packages: dict[int, str] = field(default_factory=dict)


FIRST_YEAR, LAST_YEAR = 1970, 2099


def usage_moment(at: dt.datetime, parameter: str) -> dt.datetime:
    """`at` (UTC when naive) if it is a time usage can be asked about (1970 to 2099);
    UsageError naming `parameter` otherwise."""
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    if not FIRST_YEAR <= at.astimezone(UTC).year <= LAST_YEAR:
        raise UsageError(parameter, f"{parameter} must be between {FIRST_YEAR} and {LAST_YEAR}.")
    return at


def bucket_floor(at: dt.datetime, bucket: str) -> dt.datetime:
    """The start of the UTC bucket holding `at`."""
    at = at.astimezone(UTC)
    if bucket == "day":
        return at.replace(hour=0, minute=0, second=0, microsecond=0)
    if bucket == "hour":
        return at.replace(minute=0, second=0, microsecond=0)
    return at.replace(second=0, microsecond=0)


def usage_range(
    *,
    bucket: str,
    start: dt.datetime | None,
    end: dt.datetime | None,
    now: dt.datetime,
    max_buckets: int | None = None,
) -> tuple[dt.datetime, dt.datetime]:
    """The whole buckets a query covers: `start` rounded down, `end` (exclusive) rounded
    up to bucket boundaries. Defaults: `end` now, `start` DEFAULT_BUCKETS before `end`.
    UsageError naming the parameter when `end` is not after `start` or the range spans
    more than `max_buckets` (MAX_BUCKETS of the width by default)."""
    if bucket not in BUCKETS:
        raise UsageError("bucket", f"Unknown bucket {bucket[:20]!r}; one of {', '.join(BUCKETS)}.")
    width = BUCKETS[bucket][1]
    limit = max_buckets or MAX_BUCKETS[bucket]
    given_start = start is not None
    end = end or now
    floor_end = bucket_floor(end, bucket)
    end = floor_end if floor_end == end else floor_end + width
    start = bucket_floor(start, bucket) if start else end - width * DEFAULT_BUCKETS[bucket]
    if end <= start:
        raise UsageError("end", "end must be after start.")
    n = (end - start) // width
    if n > limit:
        raise UsageError(
            "start" if given_start else "end",
            f"The range spans {n} {bucket} buckets; at most {limit} per query.",
        )
    return start, end


def parse_group_by(values: Iterable[str], allowed: Iterable[str] = GROUPS) -> tuple[str, ...]:
    """Group names in their canonical order, without repeats (UsageError on an unknown
    one)."""
    allowed = tuple(allowed)
    wanted = set()
    for raw in values:
        name = raw.strip()
        if not name:
            continue
        if name not in allowed:
            raise UsageError(
                "group_by", f"Unknown group_by {name[:40]!r}; any of {', '.join(allowed)}."
            )
        wanted.add(name)
    return tuple(g for g in allowed if g in wanted)


def _job_output_tokens():
    """The output tokens a job was charged for: all of them once succeeded; a stream
    cut early: those it delivered; an abandoned answer: those generated by then."""
    return Case(
        When(status=Job.Status.SUCCEEDED, then=F("output_tokens")),
        When(delivered_tokens__isnull=False, then=F("delivered_tokens")),
        default=Coalesce(Cast(KT("simulated__generated_tokens"), IntegerField()), Value(0)),
        output_field=IntegerField(),
    )


def _grouped(qs, time_field: str, kind: str, columns: dict, group_by, aggregates: dict):
    cols = {f"g_{g}": columns[g] for g in group_by if g in columns}
    return (
        qs.annotate(bucket_at=Trunc(time_field, kind, tzinfo=UTC), **cols)
        .values("bucket_at", *cols)
        .annotate(**aggregates)
        .order_by()
    )


def account_usage(
    *,
    account_id: int,
    start: dt.datetime,
    end: dt.datetime,
    bucket: str = "day",
    group_by: Iterable[str] = (),
    key_ids: Iterable[int] | None = None,
    model_slugs: Iterable[str] | None = None,
    include_empty: bool = True,
) -> Usage:
    """The account's usage from `start` to `end` (exclusive; widened to bucket
    boundaries, see `usage_range`) per `bucket` and group. `key_ids`: only the work of those keys (a
    member key sees its own only); `model_slugs`: only those models. Buckets in time
    order (every bucket of the range with `include_empty`), rows in each by credits
    then group, largest first."""
    group_by = tuple(g for g in GROUPS if g in set(group_by))
    kind, width = BUCKETS[bucket]
    start = bucket_floor(start, bucket)
    if bucket_floor(end, bucket) != end:
        end = bucket_floor(end, bucket) + width
    jobs = Job.objects.filter(
        account_id=account_id, finished_at__gte=start, finished_at__lt=end
    ).filter(Q(status=Job.Status.SUCCEEDED) | Q(cost__gt=0))
    lines = BatchRequest.objects.filter(
        batch__account_id=account_id,
        status=BatchRequest.Status.COMPLETED,
        finished_at__gte=start,
        finished_at__lt=end,
    )
    if key_ids is not None:
        key_ids = list(key_ids)
        jobs = jobs.filter(api_key_id__in=key_ids)
        lines = lines.filter(batch__api_key_id__in=key_ids)
    if model_slugs is not None:
        model_slugs = list(model_slugs)
        jobs = jobs.filter(model__slug__in=model_slugs)
        lines = lines.filter(model__slug__in=model_slugs)
    job_rows = _grouped(
        jobs,
        "finished_at",
        kind,
        _JOB_COLUMNS,
        group_by,
        {
            "n": Count("id"),
            "inp": Sum("input_tokens"),
            "out": Sum(_job_output_tokens()),
            "spent": Sum("cost"),
            "met": Count("id", filter=Q(deadline_met=True)),
            "judged": Count("id", filter=Q(deadline_met__isnull=False)),
        },
    )
    line_rows = _grouped(
        lines,
        "finished_at",
        kind,
        _LINE_COLUMNS,
        group_by,
        {
            "n": Count("id"),
            "inp": Sum("input_tokens"),
            "out": Sum("output_tokens"),
            "spent": Sum("cost"),
        },
    )
    merged: dict[tuple, UsageRow] = {}
    model_ids, tier_ids, key_seen, package_seen = set(), set(), set(), set()
    for is_batch, rows in ((False, job_rows), (True, line_rows)):
        for r in rows:
            group = {g: r.get(f"g_{g}") for g in group_by if g != "batch"}
            if "batch" in group_by:
                group["batch"] = is_batch
            at = r["bucket_at"].astimezone(UTC)
            row = merged.setdefault((at, tuple(group.items())), UsageRow(group=group))
            row.add(
                UsageRow(
                    group=group,
                    requests=r["n"],
                    input_tokens=r["inp"] or 0,
                    output_tokens=r["out"] or 0,
                    credits=credits(r["spent"] or 0),
                    deadline_met=r.get("met", 0),
                    deadline_judged=r.get("judged", 0),
                )
            )
            model_ids.add(group.get("model"))
            tier_ids.add(group.get("tier"))
            key_seen.add(group.get("key"))
            package_seen.add(group.get("package"))
    models = dict(ModelVersion.objects.filter(pk__in=model_ids - {None}).values_list("pk", "slug"))
    tiers = dict(Tier.objects.filter(pk__in=tier_ids - {None}).values_list("pk", "slug"))
    usage = Usage(start=start, end=end, bucket=bucket, group_by=group_by, buckets=[])
    usage.keys = {
        pk: {"name": name, "prefix": prefix}
        for pk, name, prefix in ApiKey.objects.filter(pk__in=key_seen - {None}).values_list(
            "pk", "name", "prefix"
        )
    }
    usage.packages = dict(
        QuotaPackage.objects.filter(pk__in=package_seen - {None}).values_list("pk", "name")
    )
    by_bucket: dict[dt.datetime, list[UsageRow]] = {}
    for (at, _), row in merged.items():
        if "model" in row.group:
            row.group["model"] = models.get(row.group["model"])
        if "tier" in row.group:
            row.group["tier"] = tiers.get(row.group["tier"])
        if "user" in row.group:
            row.group["user"] = row.group["user"] or ""
        by_bucket.setdefault(at, []).append(row)
    at = start
    starts = []
    while at < end:
        starts.append(at)
        at += width
    for at in starts if include_empty else sorted(by_bucket):
        rows = by_bucket.get(at, [])
        rows.sort(key=lambda r: (-r.credits, -r.requests, repr(sorted(r.group.items()))))
        usage.buckets.append(UsageBucket(start=at, end=at + width, rows=rows))
    return usage


def usage_totals(usage: Usage) -> UsageRow:
    """Every row of every bucket added up (the group is empty)."""
    total = UsageRow(group={})
    for b in usage.buckets:
        for r in b.rows:
            total.add(r)
    return total


CSV_GROUP_COLUMNS = {
    "key": ["key_id", "key_name"],
    "model": ["model"],
    "tier": ["tier"],
    "package": ["package_id", "package"],
    "user": ["user"],
    "batch": ["batch"],
}
CSV_VALUE_COLUMNS = [
    "requests",
    "input_tokens",
    "output_tokens",
    "credits",
    "deadline_met_share",
    "deadline_outcomes",
]


def usage_csv_rows(usage: Usage) -> Iterable[list]:
    """The usage as CSV rows: a header (bucket start and end, the grouped columns, the
    numbers), then one row per group and bucket (empty buckets left out)."""
    groups = [c for g in usage.group_by for c in CSV_GROUP_COLUMNS[g]]
    yield ["bucket_start", "bucket_end", *groups, *CSV_VALUE_COLUMNS]
    for b in usage.buckets:
        for r in b.rows:
            g = r.group
            named = {
                "key_id": g.get("key"),
                "key_name": usage.keys.get(g.get("key"), {}).get("name"),
                "model": g.get("model"),
                "tier": g.get("tier"),
                "package_id": g.get("package"),
                "package": usage.packages.get(g.get("package")),
                "user": g.get("user"),
                "batch": g.get("batch"),
            }
            share = r.deadline_met_share
            yield [
                b.start.isoformat(),
                b.end.isoformat(),
                *("" if named[c] is None else named[c] for c in groups),
                r.requests,
                r.input_tokens,
                r.output_tokens,
                f"{r.credits:f}",
                "" if share is None else f"{share:.6f}",
                r.deadline_judged,
            ]

"""GET /api/v1/usage: the account's requests, tokens, credits and deadline attainment
per UTC hour or day, grouped by key, model, tier, package and user (the selector:
routing.quota.usage). An admin key sees the whole account and may pick keys with
`key`; a member key sees its own key's usage only."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from httpedge.problems import Problem
from httpedge.query import invalid_parameter, query_value
from routing.accounts.scopes import KeyNotAllowed, usage_keys
from routing.api.base import ClientAPIView, key_problem
from routing.api.shapes import money
from routing.core.formats import echo, iso
from routing.quota.usage import (
    GROUPS,
    MAX_BUCKETS,
    Usage,
    UsageError,
    UsageRow,
    account_usage,
    parse_group_by,
    usage_moment,
    usage_range,
    usage_totals,
)

# Unix seconds up to 2100-01-01 (a bigger number is no time we can have data for).
LAST_UNIX = 4_102_444_800
NATIVE_BUCKETS = ("hour", "day")
NATIVE_GROUPS = tuple(g for g in GROUPS if g != "batch")


def usage_problem(exc: UsageError) -> Problem:
    return invalid_parameter(exc.parameter, str(exc))


def parse_moment(raw: str, name: str) -> dt.datetime:
    """A time given as unix seconds (ASCII digits) or ISO-8601 (UTC when it names no
    offset); a 400 naming the parameter otherwise."""
    if raw.isascii() and raw.isdigit():
        if len(raw) > 10 or int(raw) > LAST_UNIX:
            raise invalid_parameter(name, f"{name} is past 2100.")
        return dt.datetime.fromtimestamp(int(raw), tz=dt.UTC)
    try:
        at = dt.datetime.fromisoformat(raw) if raw.isascii() and len(raw) <= 40 else None
    except ValueError:
        at = None
    if at is None:
        raise invalid_parameter(
            name, f"{name} must be unix seconds or an ISO-8601 time, not {echo(raw)}."
        )
    try:
        return usage_moment(at, name)
    except UsageError as exc:
        raise usage_problem(exc) from None


def query_ids(values: list[str], name: str) -> list[int]:
    """Key ids from comma lists (ASCII digits, at most 18; `key_` prefix allowed, as
    OpenAI's ids have one)."""
    ids = []
    for value in values:
        for part in value.split(","):
            part = part.strip().removeprefix("key_")
            if not (part.isascii() and part.isdigit() and len(part) <= 18):
                raise invalid_parameter(name, f"{name} takes key ids, not {echo(part)}.")
            ids.append(int(part))
    return ids


def visible_keys(request, wanted: list[int] | None) -> list[int] | None:
    try:
        return usage_keys(request.user.key, wanted)
    except KeyNotAllowed as exc:
        raise key_problem(exc) from None


def row_json(row: UsageRow, usage: Usage) -> dict:
    g = row.group
    body: dict = {}
    if "key" in g:
        named = usage.keys.get(g["key"], {})
        body |= {
            "key_id": g["key"],
            "key_name": named.get("name"),
            "key_prefix": named.get("prefix"),
        }
    if "model" in g:
        body["model"] = g["model"]
    if "tier" in g:
        body["tier"] = g["tier"]
    if "package" in g:
        body |= {"package_id": g["package"], "package": usage.packages.get(g["package"])}
    if "user" in g:
        body["user"] = g["user"] or None
    share = row.deadline_met_share
    return body | {
        "requests": row.requests,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "credits": money(row.credits),
        "deadline_met_share": None if share is None else round(share, 6),
        "deadline_outcomes": row.deadline_judged,
    }


class UsageRowSerializer(serializers.Serializer):
    """One group of one bucket: only the grouped members are present."""

    key_id = serializers.IntegerField(required=False, allow_null=True)
    key_name = serializers.CharField(required=False, allow_null=True)
    key_prefix = serializers.CharField(required=False, allow_null=True)
    model = serializers.CharField(required=False, allow_null=True)
    tier = serializers.CharField(required=False, allow_null=True)
    package_id = serializers.IntegerField(required=False, allow_null=True)
    package = serializers.CharField(required=False, allow_null=True)
    user = serializers.CharField(required=False, allow_null=True)
    requests = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    credits = serializers.CharField(help_text="Credits charged (1 credit = 1 USD of list price).")
    deadline_met_share = serializers.FloatField(
        allow_null=True, help_text="Share of jobs with an outcome that met their deadline."
    )
    deadline_outcomes = serializers.IntegerField(help_text="Jobs with a deadline outcome.")


class UsageBucketSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    results = UsageRowSerializer(many=True)


class UsageSerializer(serializers.Serializer):
    object = serializers.CharField(default="usage")
    bucket = serializers.ChoiceField(choices=NATIVE_BUCKETS)
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    group_by = serializers.ListField(child=serializers.CharField())
    scope = serializers.ChoiceField(
        choices=["account", "keys"], help_text="The whole account, or some keys only."
    )
    key_ids = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    data = UsageBucketSerializer(many=True)
    totals = UsageRowSerializer()


class UsageView(ClientAPIView):
    """Usage and cost per UTC hour or day: requests, input and output tokens, credits
    charged and deadline attainment, grouped by any of key, model, tier, package, user.
    A job's charge counts at its settlement (`finished_at`), a batch line's when it
    completed. An admin key sees the whole account (and may pick keys with `key`); a
    member key sees its own key's usage only."""

    @extend_schema(
        parameters=[
            OpenApiParameter("bucket", str, enum=list(NATIVE_BUCKETS), default="day"),
            OpenApiParameter(
                "start",
                str,
                description="Unix seconds or ISO-8601 (UTC without an offset), rounded "
                "down to its bucket; default: 24 hours or 7 days before `end`.",
            ),
            OpenApiParameter(
                "end",
                str,
                description="Unix seconds or ISO-8601, exclusive, rounded up to its "
                f"bucket; default: now. At most {MAX_BUCKETS['hour']} hours or "
                f"{MAX_BUCKETS['day']} days.",
            ),
            OpenApiParameter(
                "group_by",
                str,
                description=f"A comma list of {', '.join(NATIVE_GROUPS)}.",
            ),
            OpenApiParameter(
                "key",
                str,
                description="A comma list of key ids (an admin key; a member key may "
                "name its own only).",
            ),
            OpenApiParameter("model", str, description="A comma list of model ids."),
        ],
        responses={
            200: UsageSerializer,
            400: OpenApiResponse(description="A bad parameter, named (problem+json)"),
            401: OpenApiResponse(description="Missing, invalid or revoked API key"),
            403: OpenApiResponse(description="A member key asked for another key's usage"),
        },
    )
    def get(self, request):
        bucket = query_value(request, "bucket")
        bucket = "day" if bucket is None else bucket
        if bucket not in NATIVE_BUCKETS:
            raise invalid_parameter(
                "bucket", f"Unknown bucket {echo(bucket)}; one of {', '.join(NATIVE_BUCKETS)}."
            )
        start, end = (query_value(request, n) for n in ("start", "end"))
        raw_groups = query_value(request, "group_by")
        raw_keys, raw_models = query_value(request, "key"), query_value(request, "model")
        wanted = query_ids([raw_keys], "key") if raw_keys is not None else None
        models = [m.strip() for m in raw_models.split(",")] if raw_models is not None else None
        try:
            group_by = parse_group_by((raw_groups or "").split(","), NATIVE_GROUPS)
            start_at, end_at = usage_range(
                bucket=bucket,
                start=parse_moment(start, "start") if start is not None else None,
                end=parse_moment(end, "end") if end is not None else None,
                now=timezone.now(),
            )
        except UsageError as exc:
            raise usage_problem(exc) from None
        keys = visible_keys(request, wanted)
        usage = account_usage(
            account_id=self.account.pk,
            start=start_at,
            end=end_at,
            bucket=bucket,
            group_by=group_by,
            key_ids=keys,
            model_slugs=models,
        )
        return Response(
            {
                "object": "usage",
                "bucket": bucket,
                "start": iso(usage.start),
                "end": iso(usage.end),
                "group_by": list(group_by),
                "scope": "account" if keys is None else "keys",
                "key_ids": keys,
                "data": [
                    {
                        "start": iso(b.start),
                        "end": iso(b.end),
                        "results": [row_json(r, usage) for r in b.rows],
                    }
                    for b in usage.buckets
                ],
                "totals": row_json(usage_totals(usage), usage),
            }
        )

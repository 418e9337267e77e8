"""GET /v1/organization/usage/completions and /v1/organization/costs: the account's
usage in the shapes of OpenAI's Usage and Costs APIs (pages of time buckets), through
the native API's selector (routing.quota.usage) and visibility rule (an admin key:
the whole account; a member key: its own key only).

What maps: `start_time` (required) and `end_time` in unix seconds, `bucket_width`
(`1m`, `1h`, `1d`; costs: `1d` only, as OpenAI), `group_by` (completions:
`api_key_id`, `user_id`, `model`, `service_tier`, `batch`, `project_id`; costs:
`line_item`, `project_id`), `api_key_ids`, `models`, `limit` (buckets per page) and
`page` (the cursor in `next_page`). OpenAI's other filters (`project_ids`,
`user_ids`, `batch`) are refused with a 400 naming them rather than ignored. There is
one project per account: `project_id` is always null. Costs are in credits, and
1 credit is 1 USD of list price on the tier served, so the currency is "usd";
`line_item` is "<model>, <service tier>".
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from rest_framework.response import Response

from httpedge.query import invalid_parameter, query_int, query_value
from routing.api.usage import parse_moment, query_ids, usage_problem, visible_keys
from routing.compat.base import CompatAPIView
from routing.core.formats import echo
from routing.core.openai_shapes import service_tier_word, unix
from routing.quota.usage import (
    BUCKETS,
    Usage,
    UsageError,
    UsageRow,
    account_usage,
    parse_group_by,
    usage_range,
)

WIDTHS = {"1m": "minute", "1h": "hour", "1d": "day"}
# OpenAI's page sizes per width: (default, most).
LIMITS = {"minute": (60, 1440), "hour": (24, 168), "day": (7, 31)}
COST_LIMITS = (7, 180)
# A query reaches at most this far (pages included).
MAX_RANGE = dt.timedelta(days=366)
# OpenAI's group names -> ours.
COMPLETION_GROUPS = {
    "project_id": None,
    "user_id": "user",
    "api_key_id": "key",
    "model": "model",
    "batch": "batch",
    "service_tier": "tier",
}
COST_GROUPS = {"project_id": None, "line_item": ("model", "tier")}


def _list(request, name: str) -> list[str]:
    """A list parameter as OpenAI's SDK sends it (`name[]=a&name[]=b`), or repeated, or
    a comma list."""
    values = request.query_params.getlist(name) + request.query_params.getlist(f"{name}[]")
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def _groups(request, allowed: dict) -> tuple[set[str], tuple[str, ...]]:
    """OpenAI group names asked for, and our groups they need."""
    try:
        names = parse_group_by(_list(request, "group_by"), allowed)
    except UsageError as exc:
        raise usage_problem(exc) from None
    ours: list[str] = []
    for n in names:
        mapped = allowed[n]
        ours += [mapped] if isinstance(mapped, str) else list(mapped or ())
    return set(names), tuple(ours)


def _page(request, *, widths: dict, limits: tuple[int, int] | None) -> tuple:
    """The page's bucket width, start and end (bucket boundaries) and whether more
    follow, from start_time, end_time, bucket_width, limit and page."""
    raw_width = query_value(request, "bucket_width") or "1d"
    if raw_width not in widths:
        raise invalid_parameter(
            "bucket_width",
            f"bucket_width {echo(raw_width)} is not supported here; one of {', '.join(widths)}.",
        )
    bucket = widths[raw_width]
    default, most = limits or LIMITS[bucket]
    raw_start = query_value(request, "start_time")
    if raw_start is None:
        raise invalid_parameter("start_time", "start_time (unix seconds) is required.")
    if not (raw_start.isascii() and raw_start.isdigit()):
        raise invalid_parameter("start_time", "start_time must be unix seconds.")
    raw_end = query_value(request, "end_time")
    if raw_end is not None and not (raw_end.isascii() and raw_end.isdigit()):
        raise invalid_parameter("end_time", "end_time must be unix seconds.")
    limit = query_int(request, "limit", minimum=1, maximum=most) or default
    width = BUCKETS[bucket][1]
    try:
        start, end = usage_range(
            bucket=bucket,
            start=parse_moment(raw_start, "start_time"),
            end=parse_moment(raw_end, "end_time") if raw_end is not None else None,
            now=timezone.now(),
            max_buckets=MAX_RANGE // width,
        )
    except UsageError as exc:
        name = {"start": "start_time", "end": "end_time"}.get(exc.parameter, exc.parameter)
        raise invalid_parameter(name, str(exc).replace("end ", "end_time ")) from None
    page = query_value(request, "page")
    if page is not None:
        at = parse_moment(page, "page") if page.isascii() and page.isdigit() else None
        if at is None or not start <= at < end or (at - start) % width:
            raise invalid_parameter("page", f"Unknown page {echo(page)}: use next_page.")
        start = at
    page_end = min(end, start + width * limit)
    return bucket, start, page_end, page_end < end


UNSUPPORTED = ("project_ids", "user_ids", "batch")


def _usage(request, bucket, start, end, groups) -> Usage:
    for name in UNSUPPORTED:
        if _list(request, name):
            raise invalid_parameter(name, f"{name} is not supported here (see the README).")
    wanted = _list(request, "api_key_ids")
    keys = visible_keys(request, query_ids(wanted, "api_key_ids") if wanted else None)
    models = _list(request, "models") or None
    return account_usage(
        account_id=request.user.account.pk,
        start=start,
        end=end,
        bucket=bucket,
        group_by=groups,
        key_ids=keys,
        model_slugs=models,
    )


def _pages(usage: Usage, rows_json, more: bool) -> dict:
    return {
        "object": "page",
        "data": [
            {
                "object": "bucket",
                "start_time": unix(b.start),
                "end_time": unix(b.end),
                "results": [rows_json(r) for r in b.rows],
            }
            for b in usage.buckets
        ],
        "has_more": more,
        "next_page": str(unix(usage.end)) if more else None,
    }


class CompletionsUsageView(CompatAPIView):
    """OpenAI's completions usage: input and output tokens and requests per bucket."""

    def get(self, request):
        names, groups = _groups(request, COMPLETION_GROUPS)
        bucket, start, end, more = _page(request, widths=WIDTHS, limits=None)
        usage = _usage(request, bucket, start, end, groups)

        def result(r: UsageRow) -> dict:
            g = r.group
            key = g.get("key")
            return {
                "object": "organization.usage.completions.result",
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "input_cached_tokens": 0,
                "input_audio_tokens": 0,
                "output_audio_tokens": 0,
                "num_model_requests": r.requests,
                "project_id": None,
                "user_id": (g.get("user") or None) if "user_id" in names else None,
                "api_key_id": (str(key) if key is not None else None)
                if "api_key_id" in names
                else None,
                "model": g.get("model") if "model" in names else None,
                "batch": g.get("batch") if "batch" in names else None,
                "service_tier": service_tier_word(g.get("tier"))
                if "service_tier" in names
                else None,
            }

        return Response(_pages(usage, result, more))


class CostsView(CompatAPIView):
    """OpenAI's costs: credits charged per day (1 credit = 1 USD of list price)."""

    def get(self, request):
        names, groups = _groups(request, COST_GROUPS)
        bucket, start, end, more = _page(request, widths={"1d": "day"}, limits=COST_LIMITS)
        usage = _usage(request, bucket, start, end, groups)

        def result(r: UsageRow) -> dict:
            g = r.group
            line = f"{g.get('model')}, {service_tier_word(g.get('tier'))}"
            return {
                "object": "organization.costs.result",
                "amount": {"value": float(r.credits), "currency": "usd"},
                "line_item": line if "line_item" in names else None,
                "project_id": None,
            }

        return Response(_pages(usage, result, more))

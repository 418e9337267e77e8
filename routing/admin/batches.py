"""Admin for batches and their lines (requests). Batches are written only by
routing.batches (API, tasks, beat); the admin watches them and its actions call the batch
services."""

from __future__ import annotations

import logging
import uuid

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from routing.admin.base import ReadOnlyAdmin, readable_fields, stacked, when
from routing.batches.cancel import batch_cancel, batch_retry_failed
from routing.batches.errors import BatchError
from routing.batches.progress import batch_chart, batch_progress
from routing.core.formats import credits_text, duration_long, moment, rows_to_total
from routing.models import Batch, BatchRequest, File

logger = logging.getLogger(__name__)


def _pct(part: int, total: int) -> str:
    return f"{min(100.0, 100.0 * part / total):.1f}" if total else "0"


# Colours of the bar's parts: done, failed, cancelled requests, the rest (not yet run).
_BAR_DONE = "#3c8f4f"
_BAR_FAILED = "#ba2121"
_BAR_STOPPED_DONE = "#8c9890"  # what a cancelled batch did complete: neutral, not green
_BAR_CANCELLED = "repeating-linear-gradient(135deg,#c9c9c9 0 3px,#e4e4e4 3px 6px)"


def _progress_bar(total: int, done: int, failed: int, *, cancelled: int = 0, stopped=False):
    """A small bar: done in green, failed in red, the rest grey. A cancelled (or
    cancelling) batch, `stopped`, draws its done share in a neutral grey and its
    cancelled requests hatched, under the word 'cancelled', so it never reads as a
    finished green bar; `failed` counts the cancelled requests too (as the batch does)."""
    failed = max(0, failed - cancelled)
    label = _bar_label(total, done, failed, cancelled, stopped)
    bar = format_html(
        '<div role="img" aria-label="{}" title="{}" style="display:flex;width:140px;height:8px;'
        'margin-top:3px;border-radius:2px;overflow:hidden;background:#e4e4e4">'
        '<div style="width:{}%;background:{}"></div><div style="width:{}%;background:{}">'
        '</div><div style="width:{}%;background:{}"></div></div>',
        label,
        label,
        _pct(done, total),
        _BAR_STOPPED_DONE if stopped else _BAR_DONE,
        _pct(failed, total),
        _BAR_FAILED,
        _pct(cancelled, total),
        _BAR_CANCELLED,
    )
    if not stopped:
        return bar
    return format_html('<span class="quiet nowrap">cancelled: {}</span>{}', label, bar)


def _bar_label(total: int, done: int, failed: int, cancelled: int, stopped: bool) -> str:
    parts = [f"{done:,} of {total:,} done"]
    if failed:
        parts.append(f"{failed:,} failed")
    if cancelled or stopped:
        parts.append(f"{cancelled:,} cancelled")
    return ", ".join(parts)


def _stopped(batch: Batch) -> bool:
    return batch.status in (Batch.Status.CANCELLING, Batch.Status.CANCELLED)


def _cancelled_requests(batch: Batch) -> int:
    """How many of a cancelled (or cancelling) batch's requests were cancelled (one
    indexed count, asked only of those batches)."""
    if not _stopped(batch):
        return 0
    return batch.requests.filter(status=BatchRequest.Status.CANCELLED).count()


def _seconds(value) -> str:
    return "-" if value is None else duration_long(float(value))


def _streams(n) -> str:
    n = int(n or 0)
    return f"{n:,} stream" + ("" if n == 1 else "s")


def _plan_lanes(batch: Batch) -> list[dict]:
    lanes = (batch.plan or {}).get("lanes") if isinstance(batch.plan, dict) else None
    return [x for x in lanes or [] if isinstance(x, dict)]


def _file_links(f: File | None):
    if f is None:
        return "-"
    return format_html(
        '<a href="{}">{}</a> ({} lines, {} bytes) &middot; <a href="{}">download</a>',
        reverse("admin:routing_file_change", args=[f.pk]),
        f.id,
        f"{f.lines:,}",
        f"{f.bytes:,}",
        reverse("admin:routing_file_download", args=[f.pk]),
    )


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    """Batches are written only by routing.batches (API, tasks, beat); the admin watches
    them, and its actions cancel them or retry their failed requests through the
    services. The change page stays read-only: saving the whole row could overwrite what
    a running chain link just wrote."""

    # Fits 1,366 px next to the filters: short ids (the full one is on the batch page),
    # cost charged over predicted, the predicted finish over the window's end.
    list_display = [
        "short_id",
        "account",
        "status_progress",
        "plan_tiers",
        "cost_column",
        "finish_column",
    ]
    list_filter = ["status", "account"]
    search_fields = ["id", "metadata"]
    date_hierarchy = "created_at"
    list_select_related = ["account"]
    actions = ["cancel_batches", "retry_failed"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "account",
                    "status",
                    "progress_detail",
                    "endpoint",
                    "completion_window",
                    "metadata",
                    "schedule",
                    "scheduled_for",
                    "retry_of",
                    "retries_list",
                ]
            },
        ),
        ("Files and requests", {"fields": ["input_file", "result_files", "requests_link"]}),
        (
            "Plan and cost",
            {
                "fields": [
                    "plan_table",
                    "run_chart",
                    "plan_summary",
                    "predicted_finish_at",
                    "predicted_cost_text",
                    "cost_text",
                ]
            },
        ),
        (
            "Timeline",
            {
                "fields": [
                    "start_at",
                    "expires_at",
                    "created_at",
                    "validated_at",
                    "in_progress_at",
                    "finalizing_at",
                    "completed_at",
                    "failed_at",
                    "expired_at",
                    "cancelling_at",
                    "cancelled_at",
                    "last_advanced_at",
                    "next_advance_at",
                ]
            },
        ),
        ("Errors", {"fields": ["error_table"]}),
        (
            "Stored record",
            {
                "classes": ["collapse"],
                "fields": [
                    "window_seconds",
                    "predicted_cost",
                    "cost",
                    "total",
                    "completed",
                    "failed",
                    "output_file",
                    "error_file",
                    "plan",
                    "errors",
                ],
            },
        ),
    ]
    computed_fields = [
        "progress_detail",
        "retries_list",
        "result_files",
        "requests_link",
        "plan_table",
        "run_chart",
        "plan_summary",
        "error_table",
        "predicted_cost_text",
        "cost_text",
    ]

    def get_readonly_fields(self, request, obj=None):
        return readable_fields(Batch, [f.name for f in Batch._meta.fields] + self.computed_fields)

    def has_operate_permission(self, request):
        """Cancel and retry: whoever may change batches (superusers, or staff given
        routing.change_batch); the change form itself stays read-only."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    # List columns -----------------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_progress(self, obj: Batch):
        cancelled = _cancelled_requests(obj)
        failed = format_html(
            ', <span style="color:#ba2121">{} failed</span>', f"{obj.failed - cancelled:,}"
        )
        return format_html(
            '{}<br><span class="quiet nowrap">{} / {} done{}</span>{}',
            obj.get_status_display(),
            f"{obj.completed:,}",
            f"{obj.total:,}",
            failed if obj.failed - cancelled else "",
            _progress_bar(
                obj.total, obj.completed, obj.failed, cancelled=cancelled, stopped=_stopped(obj)
            ),
        )

    @admin.display(description="id", ordering="id")
    def short_id(self, obj: Batch):
        return format_html('<span title="{}">{}</span>', obj.pk, str(obj.pk)[:8])

    @admin.display(description="plan")
    def plan_tiers(self, obj: Batch):
        lanes = _plan_lanes(obj)
        if not lanes:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            '{} <span class="quiet">({})</span>',
            ((x.get("key", "?"), _streams(x.get("streams"))) for x in lanes),
        )

    @admin.display(description="cost", ordering="cost")
    def cost_column(self, obj: Batch):
        return format_html(
            '{}<br><span class="quiet">predicted {}</span>',
            credits_text(obj.cost),
            credits_text(obj.predicted_cost),
        )

    @admin.display(description="finish / window end", ordering="expires_at")
    def finish_column(self, obj: Batch):
        """When it ended (or is predicted to), over when its window ends (UTC)."""
        done = obj.completed_at or obj.failed_at or obj.expired_at or obj.cancelled_at
        return format_html(
            '<span class="nowrap">{}</span><br><span class="quiet nowrap">{}</span>',
            moment(done or obj.predicted_finish_at).removesuffix(" UTC"),
            moment(obj.expires_at).removesuffix(" UTC"),
        )

    # Detail fields ----------------------------------------------------------------------

    @admin.display(description="progress")
    def progress_detail(self, obj: Batch):
        p = batch_progress(obj)
        cancelled = f", {p['cancelled']:,} cancelled" if p["cancelled"] or _stopped(obj) else ""
        return format_html(
            "{} / {} completed, {} failed{}, {} running, {} queued{}",
            f"{p['completed']:,}",
            f"{p['total']:,}",
            f"{p['failed'] - p['cancelled']:,}",
            cancelled,
            f"{p['running']:,}",
            f"{p['queued']:,}",
            _progress_bar(
                p["total"],
                p["completed"],
                p["failed"],
                cancelled=p["cancelled"],
                stopped=_stopped(obj),
            ),
        )

    @admin.display(description="predicted cost")
    def predicted_cost_text(self, obj: Batch):
        return f"{credits_text(obj.predicted_cost)} credits"

    @admin.display(description="cost")
    def cost_text(self, obj: Batch):
        return f"{credits_text(obj.cost)} credits charged so far"

    @admin.display(description="retries")
    def retries_list(self, obj: Batch):
        retries = list(obj.retries.order_by("created_at"))
        if not retries:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> ({})',
            (
                (reverse("admin:routing_batch_change", args=[r.pk]), r.pk, r.get_status_display())
                for r in retries
            ),
        )

    @admin.display(description="output and errors")
    def result_files(self, obj: Batch):
        return format_html(
            "output: {}<br>errors: {}", _file_links(obj.output_file), _file_links(obj.error_file)
        )

    @admin.display(description="requests")
    def requests_link(self, obj: Batch):
        url = reverse("admin:routing_batchrequest_changelist")
        return format_html(
            '<a href="{}?batch={}">{} requests</a> (<a href="{}?batch={}&amp;status__exact=failed">'
            "failed ones</a>)",
            url,
            obj.pk,
            f"{obj.total:,}",
            url,
            obj.pk,
        )

    @admin.display(description="run")
    def run_chart(self, obj: Batch):
        uri = batch_chart(obj)
        if uri is None:
            return "-"
        return format_html('<img src="{}" alt="requests completed over time, per tier">', uri)

    @admin.display(description="plan")
    def plan_table(self, obj: Batch):
        """The plan's lanes with their cost: the rows add up to the total under them, the
        batch's predicted cost (rounded together, see rows_to_total; what per-request
        prices rounded to the credit's last digit add or take is its own row)."""
        lanes = _plan_lanes(obj)
        if not lanes:
            return "-"
        priced = [i for i, x in enumerate(lanes) if x.get("cost") is not None]
        costs, total = rows_to_total([lanes[i]["cost"] for i in priced])
        cost_of = dict(zip(priced, costs, strict=True))
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    x.get("key", "?"),
                    x.get("pool", "?"),
                    f"{int(x.get('streams') or 0):,}",
                    f"{int(x.get('requests') or 0):,}",
                    credits_text(cost_of[i]) if i in cost_of else "-",
                    _seconds(x.get("makespan_seconds")),
                )
                for i, x in enumerate(lanes)
            ),
        )
        shown = total
        if obj.predicted_cost is not None:
            shown = rows_to_total([obj.predicted_cost])[1]
        if shown != total:
            rows += format_html(
                '<tr><td colspan="4" class="quiet">rounding of per-request prices</td>'
                "<td>{}</td><td></td></tr>",
                f"{shown - total:+,.2f}",
            )
        return format_html(
            "<table><thead><tr><th>model/tier</th><th>pool</th><th>streams</th>"
            "<th>requests</th><th>cost</th><th>predicted makespan</th></tr></thead>"
            '<tbody>{}</tbody><tfoot><tr><th colspan="4">total (the predicted cost)</th>'
            "<th>{}</th><th></th></tr></tfoot></table>",
            rows,
            credits_text(shown),
        )

    @admin.display(description="plan summary")
    def plan_summary(self, obj: Batch):
        plan = obj.plan if isinstance(obj.plan, dict) else None
        if not plan:
            return "-"
        return format_html(
            "feasible: {}; makespan {} (fastest possible {}) in a window of {}; cost {}; "
            "replanned {} time(s){}",
            "yes" if plan.get("feasible") else "no",
            _seconds(plan.get("makespan_seconds")),
            _seconds(plan.get("fastest_makespan_seconds")),
            _seconds(plan.get("window_seconds")),
            credits_text(plan["cost"]) if plan.get("cost") is not None else "-",
            len(plan.get("replans") or []),
            format_html("<br>{}", "; ".join(map(str, plan["notes"]))) if plan.get("notes") else "",
        )

    @admin.display(description="errors")
    def error_table(self, obj: Batch):
        errors = [e for e in obj.errors or [] if isinstance(e, dict)]
        if not errors:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((e.get("line") or "-", e.get("code", "?"), e.get("message", "")) for e in errors),
        )
        return format_html(
            "<table><thead><tr><th>line</th><th>code</th><th>message</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
        )

    # Actions ----------------------------------------------------------------------------

    def _each(self, request, queryset, call, what: str):
        """Run `call(batch)` for each batch in its own savepoint; a refusal (BatchError)
        or an unexpected error becomes a message, never a 500."""
        results = []
        for batch in queryset:
            try:
                with transaction.atomic():
                    results.append((batch, call(batch)))
            except BatchError as exc:
                self.message_user(request, str(exc), level=messages.WARNING)
            except Exception:
                logger.exception("admin: %s of batch %s failed", what, batch.pk)
                self.message_user(
                    request,
                    f"Batch {batch.pk}: {what} failed unexpectedly (see the server log).",
                    level=messages.ERROR,
                )
        return results

    @admin.action(description="Cancel selected batches", permissions=["operate"])
    def cancel_batches(self, request, queryset):
        at = timezone.now()
        done = self._each(request, queryset, lambda b: batch_cancel(batch=b, at=at), "cancel")
        if done:
            self.message_user(
                request,
                format_html(
                    "Cancelled {} batch(es): {}",
                    len(done),
                    format_html_join(
                        ", ",
                        "{} ({})",
                        ((b.pk, new.get_status_display().lower()) for b, new in done),
                    ),
                ),
                level=messages.SUCCESS,
            )

    @admin.action(description="Retry failed requests (as a new batch)", permissions=["operate"])
    def retry_failed(self, request, queryset):
        at = timezone.now()
        made = self._each(request, queryset, lambda b: batch_retry_failed(batch=b, at=at), "retry")
        if made:
            self.message_user(
                request,
                format_html(
                    "Created {} retry batch(es): {}",
                    len(made),
                    format_html_join(
                        ", ",
                        '<a href="{}">{}</a> (retry of {}, {} requests)',
                        (
                            (
                                reverse("admin:routing_batch_change", args=[new.pk]),
                                new.pk,
                                old.pk,
                                f"{new.total:,}",
                            )
                            for old, new in made
                        ),
                    ),
                ),
                level=messages.SUCCESS,
            )


class BatchRequestBatchFilter(admin.SimpleListFilter):
    """Filter by batch: the latest batches are offered; any batch id works in the URL
    (?batch=<id>), as the batch page links it."""

    title = "batch"
    parameter_name = "batch"

    def lookups(self, request, model_admin):
        return [
            (str(b.pk), f"{str(b.pk)[:8]} {b.created_at:%Y-%m-%d %H:%M} ({b.status})")
            for b in Batch.objects.only("pk", "created_at", "status").order_by("-created_at")[:15]
        ]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        try:
            batch_id = uuid.UUID(self.value())
        except ValueError:
            raise IncorrectLookupParameters(f"{self.value()!r} is not a batch id.") from None
        return queryset.filter(batch_id=batch_id)


@admin.register(BatchRequest)
class BatchRequestAdmin(ReadOnlyAdmin):
    """The lines of batches (up to 50,000 a batch): read-only, filtered by batch and
    status. No full-table count on the list page."""

    list_display = [
        "custom_id",
        "batch_link",
        "line",
        "status",
        "model_tier",
        "run_times",
        "cost_text",
    ]
    list_filter = [BatchRequestBatchFilter, "status"]
    search_fields = ["=custom_id"]
    list_select_related = ["model", "tier"]
    raw_id_fields = ["batch", "model", "tier", "pool", "reservation"]
    show_full_result_count = False
    list_per_page = 100

    def get_readonly_fields(self, request, obj=None):
        return readable_fields(BatchRequest, [f.name for f in BatchRequest._meta.fields])

    @admin.display(description="model / tier", ordering="model__slug")
    def model_tier(self, obj: BatchRequest):
        model = obj.model.slug if obj.model_id else "-"
        tier = obj.tier.slug if obj.tier_id else "-"
        moved = f" (moved from {obj.rerouted_from})" if obj.rerouted_from else ""
        return stacked(model, f"{tier}{moved}")

    @admin.display(description="started / finished", ordering="started_at")
    def run_times(self, obj: BatchRequest):
        return stacked(when(obj.started_at), when(obj.finished_at))

    @admin.display(description="cost", ordering="cost")
    def cost_text(self, obj: BatchRequest):
        return credits_text(obj.cost)

    @admin.display(description="batch", ordering="batch_id")
    def batch_link(self, obj: BatchRequest):
        url = reverse("admin:routing_batch_change", args=[obj.batch_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.batch_id)[:8])

"""Admin for accounts, keys, quota, pool load, jobs and batches. Balance columns are
read-only here: they change only through routing.quota (with a ledger row). Batches and
their files are written only by routing.batches.service; the admin watches them and its actions
call the services."""

from __future__ import annotations

import logging
import uuid

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.http import FileResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from catalog import lifecycle
from catalog.models import ModelVersion
from routing import quota
from routing.accounts.keys import api_key_create, api_key_revoke
from routing.batches.service import (
    BatchError,
    batch_cancel,
    batch_chart,
    batch_progress,
    batch_retry_failed,
    parse_window,
    schedule_check,
    schedule_sync,
)
from routing.jobs.cancel import job_cancel
from routing.jobs.errors import JobNotCancellable
from routing.models import (
    Account,
    ApiKey,
    Batch,
    BatchRequest,
    BatchSchedule,
    File,
    Job,
    LedgerEntry,
    Notice,
    PoolLoad,
    QuotaPackage,
    QuotaReservation,
    RetirementApplication,
)
from routing.router.quotes import quote_build
from routing.router.resolve import ModelNotServing, ModelRetired, ModelUnknown
from routing.router.route import RouteRequest

logger = logging.getLogger(__name__)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["prefix", "name", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class QuotaPackageInline(admin.TabularInline):
    model = QuotaPackage
    extra = 0
    fields = ["name", "scope", "period", "limit", "spent", "reserved", "order", "independent"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


class RouterTryForm(forms.Form):
    model = forms.CharField(initial="sol", help_text="Slug, family alias or 'auto'.")
    input_tokens = forms.IntegerField(min_value=1, initial=8000)
    output_tokens = forms.IntegerField(min_value=1, initial=22000)
    turns = forms.IntegerField(min_value=1, initial=30)
    tool_seconds = forms.FloatField(min_value=0, initial=15)
    deadline_seconds = forms.FloatField(min_value=0.001, initial=300)
    max_cost = forms.DecimalField(min_value=0, required=False)
    tier = forms.ChoiceField(
        choices=[("", "router chooses")]
        + [(t, t) for t in ("flex", "standard", "priority", "ultrafast")],
        required=False,
    )
    task = forms.CharField(required=False, help_text="Task class for 'auto'.")


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = ["name", "auto_migrate", "webhook_url", "created_at", "keys", "try_router"]
    search_fields = ["name"]
    list_filter = ["auto_migrate"]
    inlines = [ApiKeyInline, QuotaPackageInline]
    actions = ["create_key"]

    @admin.display(description="active keys")
    def keys(self, obj):
        return obj.api_keys.filter(revoked_at__isnull=True).count()

    @admin.display(description="router")
    def try_router(self, obj):
        url = reverse("admin:routing_account_quote", args=[obj.pk])
        return format_html('<a href="{}">Try a quote</a>', url)

    @admin.action(description="Create an API key (shown once)", permissions=["change"])
    def create_key(self, request, queryset):
        for account in queryset:
            _, raw = api_key_create(account=account, name=f"admin:{request.user.get_username()}")
            self.message_user(
                request,
                f"New key for {account.name} (copy it now, it is not shown again): {raw}",
                level=messages.WARNING,
            )

    def get_urls(self):
        return [
            path(
                "<int:pk>/quote/",
                self.admin_site.admin_view(self.quote_view),
                name="routing_account_quote",
            )
        ] + super().get_urls()

    def quote_view(self, request, pk: int):
        """The router's answer for this account, as a client would get it."""
        account = Account.objects.get(pk=pk)
        form = RouterTryForm(request.POST or None)
        result = error = None
        if request.method == "POST" and form.is_valid():
            d = form.cleaned_data
            req = RouteRequest(
                input_tokens=d["input_tokens"],
                output_tokens=d["output_tokens"],
                turns=d["turns"],
                tool_seconds=d["tool_seconds"],
                deadline_seconds=d["deadline_seconds"],
                max_cost=d["max_cost"],
                tier=d["tier"] or None,
                task=d["task"] or None,
            )
            try:
                result = quote_build(
                    account=account, model=d["model"], request=req, at=timezone.now()
                )
            except ModelUnknown:
                error = f"Unknown model {d['model']!r}."
            except ModelRetired as exc:
                error = f"{exc.model.slug} is retired; successor: {exc.successor or 'none'}."
            except (ModelNotServing, ValueError) as exc:
                error = str(exc)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Try the router for {account.name}",
            "opts": self.model._meta,
            "account": account,
            "form": form,
            "result": result,
            "error": error,
        }
        return TemplateResponse(request, "admin/routing/router_try.html", context)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "account", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "account__name", "name"]
    readonly_fields = ["account", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # keys are made with the account action, so the raw key is shown once

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", level=messages.SUCCESS)


class QuotaPackageForm(forms.ModelForm):
    class Meta:
        model = QuotaPackage
        fields = [
            "account",
            "name",
            "scope",
            "family",
            "model_versions",
            "tiers",
            "period",
            "limit",
            "order",
            "independent",
            "valid_from",
            "valid_until",
            "on_retirement",
            "migrate_tier",
            "conversion",
        ]

    def clean(self):
        data = super().clean()
        if data.get("scope") == QuotaPackage.Scope.FAMILY and not data.get("family"):
            self.add_error("family", "A family scope names a family.")
        if data.get("scope") == QuotaPackage.Scope.MODELS and not data.get("model_versions"):
            self.add_error("model_versions", "A models scope names at least one model.")
        if self.instance.pk and data.get("limit") is not None:
            used = self.instance.spent + self.instance.reserved
            if data["limit"] < used:
                self.add_error("limit", f"Already {used} spent or reserved this period.")
        return data


@admin.register(QuotaPackage)
class QuotaPackageAdmin(admin.ModelAdmin):
    form = QuotaPackageForm
    list_display = [
        "account",
        "name",
        "scope",
        "period",
        "limit",
        "spent",
        "reserved",
        "remaining",
        "next_reset_at",
        "order",
        "independent",
        "on_retirement",
    ]
    list_filter = ["scope", "period", "independent", "on_retirement"]
    search_fields = ["account__name", "name"]
    filter_horizontal = ["model_versions", "tiers"]
    readonly_fields = ["spent", "reserved", "period_start", "next_reset_at"]

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "model_versions":
            kwargs["queryset"] = ModelVersion.objects.order_by("slug")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if not change:
            now = timezone.now()
            start = (
                quota.period_start_for(obj.period, now)
                if obj.period != QuotaPackage.Period.ONCE
                else now
            )
            obj.period_start = start
            obj.next_reset_at = quota.next_period_start(obj.period, start)
        super().save_model(request, obj, form, change)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "package",
        "kind",
        "delta_reserved",
        "delta_spent",
        "reservation",
        "note",
    ]
    list_filter = ["kind"]
    search_fields = ["package__account__name", "reservation__reference"]
    date_hierarchy = "created_at"


@admin.register(QuotaReservation)
class QuotaReservationAdmin(ReadOnlyAdmin):
    list_display = ["reference", "package", "amount", "charged", "state", "created_at", "closed_at"]
    list_filter = ["state"]
    search_fields = ["reference", "package__account__name"]


@admin.register(RetirementApplication)
class RetirementApplicationAdmin(ReadOnlyAdmin):
    list_display = ["applied_at", "package", "model", "policy", "successor", "detail"]
    list_filter = ["policy", "model"]


@admin.register(Notice)
class NoticeAdmin(ReadOnlyAdmin):
    """Who was told what, and whether their webhook got it."""

    list_display = [
        "created_at",
        "account",
        "model",
        "retires_on",
        "successor",
        "delivery",
        "attempts",
        "last_attempt_at",
        "last_error",
    ]
    list_filter = ["delivery", "model"]
    search_fields = ["account__name", "model__slug"]
    actions = ["retry_delivery"]

    def has_change_permission(self, request, obj=None):
        return request.user.is_staff  # for the action; fields stay read-only

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Notice._meta.fields]

    @admin.action(description="Deliver again (failed or pending webhooks)")
    def retry_delivery(self, request, queryset):
        from routing.retirement.notices import send_delivery

        ids = list(
            queryset.exclude(account__webhook_url="")
            .exclude(delivery=Notice.Delivery.DELIVERED)
            .values_list("pk", flat=True)
        )
        Notice.objects.filter(pk__in=ids).update(delivery=Notice.Delivery.PENDING, attempts=0)
        for notice_id in ids:
            send_delivery(notice_id)
        self.message_user(request, f"Sent {len(ids)} notice(s) again.", level=messages.SUCCESS)


@admin.register(PoolLoad)
class PoolLoadAdmin(admin.ModelAdmin):
    list_display = ["pool", "background_utilisation", "updated_at"]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """Jobs are written only by the API and the workers; the admin watches them."""

    list_display = [
        "id",
        "account",
        "status",
        "model",
        "tier",
        "pool",
        "predicted_cost",
        "cost",
        "created_at",
        "finishes_at",
    ]
    list_filter = ["status", "tier", "pool", "model"]
    search_fields = ["id", "account__name", "idempotency_key"]
    date_hierarchy = "created_at"
    list_select_related = ["account", "model", "tier", "pool"]
    actions = ["cancel_jobs"]

    def has_change_permission(self, request, obj=None):
        return request.user.is_staff  # for the cancel action; fields stay read-only

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Job._meta.fields]

    def get_urls(self):
        return [
            path(
                "impact/<str:slug>/",
                self.admin_site.admin_view(self.impact_view),
                name="routing_retirement_impact",
            )
        ] + super().get_urls()

    def impact_view(self, request, slug: str):
        """Retirement impact of a model: users, migration replay, capacity, chart."""
        from catalog.models import ModelVersion, Tier
        from routing.retirement.impact import impact_chart, retirement_impact

        model = ModelVersion.objects.filter(slug=slug).first()
        if model is None:
            self.message_user(request, f"No model {slug!r}.", level=messages.ERROR)
            return TemplateResponse(
                request,
                "admin/routing/impact.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Retirement impact",
                    "impact": None,
                },
            )
        successor = ModelVersion.objects.filter(slug=request.GET.get("successor") or "").first()
        tier = Tier.objects.filter(slug=request.GET.get("tier") or "").first()
        impact = retirement_impact(model=model, successor=successor, tier=tier)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Retirement impact: {model.slug}",
            "impact": impact,
            "chart": impact_chart(impact) if impact.accounts else None,
            "models": ModelVersion.objects.order_by("slug"),
            "tiers": Tier.objects.all(),
            "status": lifecycle.model_status(model),
        }
        return TemplateResponse(request, "admin/routing/impact.html", context)

    @admin.action(description="Cancel selected jobs (release their quota)")
    def cancel_jobs(self, request, queryset):
        done, refused = 0, []
        for job in queryset:
            try:
                job_cancel(job=job)
                done += 1
            except JobNotCancellable as exc:
                refused.append(str(exc))
        if done:
            self.message_user(request, f"Cancelled {done} job(s).", level=messages.SUCCESS)
        for msg in refused:
            self.message_user(request, msg, level=messages.WARNING)


# --- Batches ----------------------------------------------------------------------------


def _pct(part: int, total: int) -> str:
    return f"{min(100.0, 100.0 * part / total):.1f}" if total else "0"


def _progress_bar(total: int, done: int, failed: int):
    """A small bar: done in green, failed in red, the rest grey."""
    return format_html(
        '<div style="display:flex;width:140px;height:8px;margin-top:3px;border-radius:2px;'
        'overflow:hidden;background:#e4e4e4"><div style="width:{}%;background:#3c8f4f"></div>'
        '<div style="width:{}%;background:#ba2121"></div></div>',
        _pct(done, total),
        _pct(failed, total),
    )


def _seconds(value) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


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
    """Batches are written only by routing.batches.service (API, tasks, beat); the admin watches
    them, and its actions cancel them or retry their failed requests through the
    services. The change page stays read-only: saving the whole row could overwrite what
    a running chain link just wrote."""

    list_display = [
        "id",
        "account",
        "status",
        "progress",
        "plan_tiers",
        "predicted_finish_at",
        "predicted_cost",
        "cost",
        "expires_at",
        "created_at",
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
                    "predicted_cost",
                    "cost",
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
    ]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Batch._meta.fields] + self.computed_fields

    def has_operate_permission(self, request):
        """Cancel and retry: whoever may change batches (superusers, or staff given
        routing.change_batch); the change form itself stays read-only."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    # List columns -----------------------------------------------------------------------

    @admin.display(description="progress")
    def progress(self, obj: Batch):
        return format_html(
            "{}{}",
            f"{obj.completed:,} / {obj.total:,} done, {obj.failed:,} failed",
            _progress_bar(obj.total, obj.completed, obj.failed),
        )

    @admin.display(description="plan")
    def plan_tiers(self, obj: Batch):
        lanes = _plan_lanes(obj)
        if not lanes:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            "{} x {} streams",
            ((x.get("key", "?"), f"{int(x.get('streams') or 0):,}") for x in lanes),
        )

    # Detail fields ----------------------------------------------------------------------

    @admin.display(description="progress")
    def progress_detail(self, obj: Batch):
        p = batch_progress(obj)
        return format_html(
            "{} / {} completed, {} failed, {} running, {} queued{}",
            f"{p['completed']:,}",
            f"{p['total']:,}",
            f"{p['failed']:,}",
            f"{p['running']:,}",
            f"{p['queued']:,}",
            _progress_bar(p["total"], p["completed"], p["failed"]),
        )

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
        lanes = _plan_lanes(obj)
        if not lanes:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    x.get("key", "?"),
                    x.get("pool", "?"),
                    f"{int(x.get('streams') or 0):,}",
                    f"{int(x.get('requests') or 0):,}",
                    x.get("cost", "-"),
                    _seconds(x.get("makespan_seconds")),
                )
                for x in lanes
            ),
        )
        return format_html(
            "<table><thead><tr><th>model/tier</th><th>pool</th><th>streams</th>"
            "<th>requests</th><th>cost</th><th>predicted makespan</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            rows,
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
            plan.get("cost", "-"),
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
        "model",
        "tier",
        "started_at",
        "finished_at",
        "cost",
        "rerouted_from",
    ]
    list_filter = [BatchRequestBatchFilter, "status"]
    search_fields = ["=custom_id"]
    list_select_related = ["model", "tier"]
    raw_id_fields = ["batch", "model", "tier", "pool", "reservation"]
    show_full_result_count = False
    list_per_page = 100

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in BatchRequest._meta.fields]

    @admin.display(description="batch", ordering="batch_id")
    def batch_link(self, obj: BatchRequest):
        url = reverse("admin:routing_batch_change", args=[obj.batch_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.batch_id)[:8])


class BatchScheduleForm(forms.ModelForm):
    class Meta:
        model = BatchSchedule
        fields = [
            "name",
            "account",
            "input_file",
            "completion_window",
            "crontab",
            "enabled",
            "metadata",
        ]

    def clean_completion_window(self):
        try:
            text, _ = parse_window(self.cleaned_data.get("completion_window"))
        except BatchError as exc:
            raise forms.ValidationError(str(exc)) from None
        return text

    def clean(self):
        # The rules live in the service (routing.batches.service.schedule_check).
        data = super().clean()
        account, f = data.get("account"), data.get("input_file")
        if account is None or f is None or "completion_window" not in data:
            return data
        try:
            schedule_check(
                account=account,
                input_file=f,
                completion_window=data["completion_window"],
                metadata=data.get("metadata"),
            )
        except BatchError as exc:
            field = exc.param if exc.param in self.fields else None
            message = str(exc)
            if exc.param == "metadata":
                message += " Each run adds the key 'schedule'."
            self.add_error(field, message)
        return data


@admin.register(BatchSchedule)
class BatchScheduleAdmin(admin.ModelAdmin):
    """Recurring batches. Saving keeps the django-celery-beat periodic task in step
    (routing.batches.service.schedule_sync); deleting a schedule deletes its periodic task."""

    form = BatchScheduleForm
    list_display = [
        "name",
        "account",
        "runs",
        "completion_window",
        "enabled",
        "periodic_task_link",
        "last_batch",
    ]
    list_filter = ["enabled", "account"]
    search_fields = ["name", "account__name"]
    list_select_related = ["account", "crontab", "periodic_task"]
    fields = [
        "name",
        "account",
        "input_file",
        "completion_window",
        "crontab",
        "enabled",
        "metadata",
        "periodic_task_link",
        "recent_batches",
        "created_at",
    ]
    readonly_fields = ["periodic_task_link", "recent_batches", "created_at"]
    actions = ["sync_periodic_tasks"]

    def get_queryset(self, request):
        last = Batch.objects.filter(schedule=OuterRef("pk")).order_by("-created_at")
        return (
            super()
            .get_queryset(request)
            .annotate(
                last_batch_id=Subquery(last.values("pk")[:1]),
                last_batch_status=Subquery(last.values("status")[:1]),
                last_batch_for=Subquery(last.values("scheduled_for")[:1]),
            )
        )

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "input_file":
            kwargs["queryset"] = File.objects.filter(purpose=File.Purpose.BATCH).order_by(
                "-created_at"
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="runs", ordering="crontab")
    def runs(self, obj: BatchSchedule):
        return obj.crontab.human_readable

    @admin.display(description="periodic task")
    def periodic_task_link(self, obj: BatchSchedule):
        if obj.pk is None:
            return "made on save"
        task = obj.periodic_task
        if task is None:
            return "missing: use the action 'Re-sync periodic tasks'"
        url = reverse("admin:django_celery_beat_periodictask_change", args=[task.pk])
        state = "enabled" if task.enabled else "disabled"
        return format_html('<a href="{}">{}</a> ({})', url, task.name, state)

    @admin.display(description="last batch")
    def last_batch(self, obj: BatchSchedule):
        batch_id = getattr(obj, "last_batch_id", None)
        if batch_id is None:
            return "-"
        when = getattr(obj, "last_batch_for", None)
        return format_html(
            '<a href="{}">{}</a> ({})',
            reverse("admin:routing_batch_change", args=[batch_id]),
            f"{when:%Y-%m-%d %H:%M}" if when else str(batch_id)[:8],
            obj.last_batch_status,
        )

    @admin.display(description="recent batches")
    def recent_batches(self, obj: BatchSchedule):
        if obj.pk is None:
            return "-"
        batches = list(obj.batches.order_by("-created_at")[:10])
        if not batches:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> {}: {}',
            (
                (
                    reverse("admin:routing_batch_change", args=[b.pk]),
                    f"{b.scheduled_for:%Y-%m-%d %H:%M}" if b.scheduled_for else b.pk,
                    b.get_status_display(),
                    f"{b.completed:,} / {b.total:,} done, {b.failed:,} failed",
                )
                for b in batches
            ),
        )

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        schedule_sync(obj)

    def delete_model(self, request, obj):
        task = obj.periodic_task
        super().delete_model(request, obj)
        if task is not None:
            task.delete()

    def delete_queryset(self, request, queryset):
        from django_celery_beat.models import PeriodicTask

        task_ids = [pk for pk in queryset.values_list("periodic_task_id", flat=True) if pk]
        super().delete_queryset(request, queryset)
        for task in PeriodicTask.objects.filter(pk__in=task_ids):
            task.delete()  # one by one: beat's change signal fires for each

    @admin.action(description="Re-sync periodic tasks", permissions=["change"])
    def sync_periodic_tasks(self, request, queryset):
        n = 0
        for schedule in queryset.select_related("account", "input_file", "crontab"):
            schedule_sync(schedule)
            n += 1
        self.message_user(request, f"Synced {n} periodic task(s).", level=messages.SUCCESS)


@admin.register(File)
class FileAdmin(ReadOnlyAdmin):
    """Batch inputs and the output/error files of batches (read-only; download here)."""

    list_display = ["id", "account", "purpose", "filename", "bytes", "lines", "created_at"]
    list_filter = ["purpose"]
    search_fields = ["id", "filename", "account__name"]
    list_select_related = ["account"]
    date_hierarchy = "created_at"
    fields = [
        "id",
        "account",
        "purpose",
        "filename",
        "bytes",
        "lines",
        "sha256",
        "created_at",
        "download",
    ]
    readonly_fields = fields

    def get_urls(self):
        return [
            path(
                "<str:pk>/download/",
                self.admin_site.admin_view(self.download_view),
                name="routing_file_download",
            )
        ] + super().get_urls()

    @admin.display(description="content")
    def download(self, obj: File):
        url = reverse("admin:routing_file_download", args=[obj.pk])
        return format_html('<a href="{}">download {}</a>', url, obj.filename)

    def download_view(self, request, pk: str):
        f = get_object_or_404(File, pk=pk)
        if not self.has_view_permission(request, f):
            raise PermissionDenied
        try:
            fh = f.content.open("rb")
        except OSError:
            self.message_user(
                request, f"The content of {f.id} is no longer stored.", level=messages.ERROR
            )
            return HttpResponseRedirect(reverse("admin:routing_file_change", args=[f.pk]))
        return FileResponse(
            fh, as_attachment=True, filename=f.filename, content_type="application/jsonl"
        )

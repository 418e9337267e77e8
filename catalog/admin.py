"""Django admin for the catalog: retirements are scheduled, carried out and cancelled
here. Every action calls the lifecycle service (catalog.lifecycle), like the API and
the commands do."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from catalog import lifecycle
from catalog.forms import (
    ModelVersionAdminForm,
    ReasonForm,
    RetireNowForm,
    ScheduleRetirementForm,
)
from catalog.models import (
    Benchmark,
    Deployment,
    HardwarePool,
    LifecycleChange,
    ModelFamily,
    ModelVersion,
    NoticePolicy,
    Price,
    PublishedSpeed,
    Tier,
)

STATUS_COLOURS = {
    lifecycle.UPCOMING: "#6c757d",
    lifecycle.PREVIEW: "#6f42c1",
    lifecycle.ACTIVE: "#198754",
    lifecycle.DEPRECATED: "#fd7e14",
    lifecycle.RETIRED: "#dc3545",
}


def actor_for(request) -> str:
    return f"admin:{request.user.get_username()}"


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"
    RETIRING_SOON = "retiring-30d"

    def lookups(self, request, model_admin):
        return [(s, s.capitalize()) for s in lifecycle.STATUSES] + [
            (self.RETIRING_SOON, "Retiring within 30 days")
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value == self.RETIRING_SOON:
            return queryset.filter(lifecycle.retiring_within_q(30))
        if value in lifecycle.STATUSES:
            return queryset.filter(lifecycle.status_q(value))
        return queryset


class DeploymentInline(admin.TabularInline):
    model = Deployment
    extra = 0


class PriceInline(admin.TabularInline):
    model = Price
    extra = 0


class BenchmarkInline(admin.TabularInline):
    model = Benchmark
    extra = 0


class PublishedSpeedInline(admin.TabularInline):
    model = PublishedSpeed
    extra = 0


class LifecycleChangeInline(admin.TabularInline):
    model = LifecycleChange
    fk_name = "model"
    extra = 0
    can_delete = False
    fields = ["changed_at", "field", "old_value", "new_value", "actor", "reason"]
    readonly_fields = fields
    verbose_name_plural = "lifecycle history"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    form = ModelVersionAdminForm
    list_display = [
        "slug",
        "name",
        "family",
        "vendor",
        "status_badge",
        "released_on",
        "retires_on",
        "successor",
        "successor_tier",
        "impact_link",
    ]
    list_filter = [StatusFilter, "family", "vendor", "kind"]
    list_select_related = ["family", "successor", "successor_tier"]
    search_fields = ["slug", "name", "vendor"]
    date_hierarchy = "retires_on"
    ordering = ["slug"]
    actions = ["schedule_retirement", "retire_now", "cancel_retirement"]
    inlines = [
        DeploymentInline,
        PriceInline,
        BenchmarkInline,
        PublishedSpeedInline,
        LifecycleChangeInline,
    ]
    fieldsets = [
        (None, {"fields": ["slug", "name", "vendor", "family", "kind", "notes"]}),
        (
            "Lifecycle (UTC days; every change is kept in the history below)",
            {
                "fields": [
                    "released_on",
                    "generally_available_on",
                    "retirement_announced_on",
                    "retires_on",
                    "successor",
                    "successor_tier",
                    "in_flight_on_retirement",
                ]
            },
        ),
        (
            "Capabilities and architecture",
            {
                "fields": [
                    "context_window",
                    "input_modalities",
                    "total_params",
                    "active_params_prefill",
                    "active_params_decode",
                    "layers",
                    "hidden_size",
                    "bytes_per_param",
                    "kv_bytes_per_token",
                    "architecture_is_estimate",
                    "estimated_fields",
                ]
            },
        ),
    ]

    @admin.display(description="status")
    def status_badge(self, obj: ModelVersion):
        status = lifecycle.model_status(obj)
        return format_html(
            '<strong style="color:{}" data-status="{}">{}</strong>',
            STATUS_COLOURS[status],
            status,
            status,
        )

    @admin.display(description="impact")
    def impact_link(self, obj: ModelVersion):
        # The impact view lives with the usage data (routing); found by URL name only.
        try:
            url = reverse("admin:routing_retirement_impact", args=[obj.slug])
        except NoReverseMatch:
            return "-"
        return format_html('<a href="{}">impact</a>', url)

    def save_model(self, request, obj, form, change):
        # Lifecycle fields go through the service so the history records them.
        changes = {f: getattr(obj, f) for f in lifecycle.LIFECYCLE_FIELDS if f in form.changed_data}
        if not change:
            changes.pop("released_on", None)  # a new row is created with its release date
        saved = ModelVersion.objects.get(pk=obj.pk) if change else None
        for f in changes:
            setattr(obj, f, getattr(saved, f) if saved else None)
        super().save_model(request, obj, form, change)
        if changes:
            lifecycle.model_update_lifecycle(
                model=obj, actor=actor_for(request), user=request.user, **changes
            )

    def _selected(
        self,
        request,
        queryset,
        title: str,
        form,
        template: str = "admin/catalog/lifecycle_action.html",
    ):
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "queryset": queryset,
            "form": form,
            "action": request.POST.get("action"),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, template, context)

    def _run(self, request, queryset, fn, done: str) -> None:
        ok = []
        for model in queryset:
            try:
                fn(model)
                ok.append(model.slug)
            except lifecycle.LifecycleError as exc:
                self.message_user(
                    request, f"Not changed, {model.slug}: {exc}", level=messages.ERROR
                )
        if ok:
            self.message_user(request, f"{done}: {', '.join(ok)}.", level=messages.SUCCESS)

    @admin.action(description="Schedule a retirement…", permissions=["change"])
    def schedule_retirement(self, request, queryset):
        form = ScheduleRetirementForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            d = form.cleaned_data
            self._run(
                request,
                queryset,
                lambda m: lifecycle.model_schedule_retirement(
                    model=m,
                    retires_on=d["retires_on"],
                    announced_on=d["announced_on"],
                    successor=d["successor"],
                    successor_tier=d["successor_tier"],
                    actor=actor_for(request),
                    user=request.user,
                    reason=d["reason"],
                    notice_override=d["notice_override"],
                ),
                "Retirement scheduled",
            )
            return None
        return self._selected(request, queryset, "Schedule a retirement", form)

    @admin.action(description="Retire now", permissions=["change"])
    def retire_now(self, request, queryset):
        form = RetireNowForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            self._run(
                request,
                queryset,
                lambda m: lifecycle.model_retire_now(
                    model=m,
                    actor=actor_for(request),
                    user=request.user,
                    reason=form.cleaned_data["reason"],
                    notice_override=form.cleaned_data["notice_override"],
                ),
                "Retired",
            )
            return None
        return self._selected(request, queryset, "Retire now: new work is refused from today", form)

    @admin.action(description="Cancel a scheduled retirement", permissions=["change"])
    def cancel_retirement(self, request, queryset):
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            self._run(
                request,
                queryset,
                lambda m: lifecycle.model_cancel_retirement(
                    model=m,
                    actor=actor_for(request),
                    user=request.user,
                    reason=form.cleaned_data["reason"],
                ),
                "Retirement cancelled",
            )
            return None
        return self._selected(request, queryset, "Cancel a scheduled retirement", form)


@admin.register(LifecycleChange)
class LifecycleChangeAdmin(admin.ModelAdmin):
    list_display = ["changed_at", "model", "field", "old_value", "new_value", "actor", "reason"]
    list_filter = ["field", "actor"]
    search_fields = ["model__slug", "actor", "reason"]
    date_hierarchy = "changed_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(NoticePolicy)
class NoticePolicyAdmin(admin.ModelAdmin):
    list_display = ["kind", "minimum_days", "description"]


@admin.register(Tier)
class TierAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "rank", "price_multiplier", "speed_vs_standard"]


@admin.register(HardwarePool)
class HardwarePoolAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "device", "nodes", "is_estimate"]
    list_filter = ["device"]


@admin.register(ModelFamily)
class ModelFamilyAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "vendor"]


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ["model", "tier", "pool", "available_from"]
    list_filter = ["tier", "pool"]
    list_select_related = ["model", "tier", "pool"]


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ["model", "tier", "input_per_million", "output_per_million", "is_estimate"]
    list_filter = ["tier", "is_estimate"]
    list_select_related = ["model", "tier"]

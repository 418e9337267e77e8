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


def impact_url(model: ModelVersion) -> str | None:
    """The model's retirement impact page: it lives with the usage data (routing) and is
    found by URL name only (catalog never imports routing)."""
    try:
        return reverse("admin:routing_retirement_impact", args=[model.slug])
    except NoReverseMatch:
        return None


def status_sentence(model: ModelVersion) -> str:
    """'retired since 2026-09-18, successor gpt-5.6-sol on ultrafast' and the like."""
    status = lifecycle.model_status(model)
    today = lifecycle.utc_today()
    parts = []
    if status == lifecycle.RETIRED:
        parts.append(f"since {model.retires_on:%Y-%m-%d}")  # after the badge: "retired"
    elif model.retires_on:
        days = (model.retires_on - today).days
        announced = model.retirement_announced_on
        parts.append(f"retires on {model.retires_on:%Y-%m-%d} (in {days} days)")
        if announced and announced > today:
            parts.append(f"to be announced on {announced:%Y-%m-%d}")
    elif status == lifecycle.UPCOMING:
        parts.append(f"released on {model.released_on:%Y-%m-%d}")
    elif status == lifecycle.PREVIEW and model.generally_available_on:
        parts.append(f"generally available from {model.generally_available_on:%Y-%m-%d}")
    final = final_successor(model)
    if final is not None:
        model_, tier, via = final
        parts.append(f"successor {model_.slug}{f' on {tier.slug}' if tier else ''}{via}")
    return ", ".join(parts)


def final_successor(model: ModelVersion):
    """(the model to use in its place, the recommended tier, " (via ...)" text) for a
    model with a successor: the end of the chain when the successor is itself retired or
    deprecated (gpt-5.2 -> gpt-5.4 -> gpt-5.6-sol), as the router resolves it. None
    without a successor."""
    if not model.successor_id:
        return None
    res = lifecycle.resolve_successor(model)
    if res.model.pk == model.pk:  # still serving: its named successor
        return model.successor, model.successor_tier, ""
    steps = [m.slug for m in res.chain[1:-1]]
    return res.model, res.tier, f" (via {', '.join(steps)})" if steps else ""


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


HISTORY_WORDS = {
    "released_on": "release",
    "generally_available_on": "general availability",
    "retirement_announced_on": "retirement announcement",
    "retires_on": "retirement",
    "successor": "successor",
    "successor_tier": "successor's tier",
    "in_flight_on_retirement": "jobs in flight on retirement",
}
DATE_FIELDS = {"released_on", "generally_available_on", "retirement_announced_on", "retires_on"}


def history_event(change: LifecycleChange) -> str:
    """A history row in words: 'retirement set for 2026-09-18', 'successor gpt-5.6-sol
    replaced by gpt-5.6-terra', 'retirement cancelled (was 2026-09-18)'."""
    what = HISTORY_WORDS.get(change.field, change.field.replace("_", " "))
    old, new = change.old_value, change.new_value
    verb = "on" if change.field in DATE_FIELDS else ":"
    if not new:
        return f"{what} cleared (was {old})"
    if not old:
        return f"{what} {verb} {new}" if verb == "on" else f"{what}: {new}"
    return f"{what} moved from {old} to {new}" if verb == "on" else f"{what}: {old} → {new}"


class LifecycleChangeInline(admin.TabularInline):
    """The history, readable: what changed (with the date the event is set for) and
    when, by whom and why it was recorded."""

    model = LifecycleChange
    fk_name = "model"
    extra = 0
    can_delete = False
    fields = ["event", "event_date", "recorded", "actor", "reason"]
    readonly_fields = fields
    verbose_name_plural = "lifecycle history"

    @admin.display(description="change")
    def event(self, obj: LifecycleChange) -> str:
        return history_event(obj)

    @admin.display(description="event date")
    def event_date(self, obj: LifecycleChange) -> str:
        """The day the event happens (a date field's new value); '-' for the others."""
        return obj.new_value if obj.field in DATE_FIELDS and obj.new_value else "-"

    @admin.display(description="recorded")
    def recorded(self, obj: LifecycleChange):
        return format_html(
            '<span class="nowrap">{}</span>', obj.changed_at.strftime("%Y-%m-%d %H:%M:%S")
        )

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    form = ModelVersionAdminForm
    # Fits 1,366 px next to the filters: name, family and vendor are on the change page
    # (and in the filters); the successor column carries its tier.
    list_display = [
        "slug",
        "status_badge",
        "released_on",
        "retires_on",
        "successor_column",
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
    readonly_fields = ["lifecycle_status", "impact_page"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "lifecycle_status",
                    "impact_page",
                    "slug",
                    "name",
                    "vendor",
                    "family",
                    "kind",
                    "notes",
                ]
            },
        ),
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
            "Capabilities and architecture (for the simulation engine)",
            {
                "classes": ["collapse"],
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
                ],
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

    @admin.display(description="successor", ordering="successor__slug")
    def successor_column(self, obj: ModelVersion):
        """The final successor (a retired successor's own successor, and so on)."""
        final = final_successor(obj)
        if final is None:
            return "-"
        model, tier, via = final
        if tier is None and not via:
            return model.slug
        return format_html(
            '{}<br><span class="quiet">{}{}</span>',
            model.slug,
            f"on {tier.slug}" if tier else "",
            via,
        )

    @admin.display(description="impact")
    def impact_link(self, obj: ModelVersion):
        url = impact_url(obj)
        return format_html('<a href="{}">impact</a>', url) if url else "-"

    @admin.display(description="status")
    def lifecycle_status(self, obj: ModelVersion | None):
        """The derived status in words, with the dates it follows from."""
        if obj is None or obj.pk is None:
            return "-"
        return format_html(
            '{} <span id="lifecycle-status-text">{}</span>',
            self.status_badge(obj),
            status_sentence(obj),
        )

    @admin.display(description="retirement impact")
    def impact_page(self, obj: ModelVersion | None):
        url = impact_url(obj) if obj is not None and obj.pk else None
        if url is None:
            return "-"
        return format_html(
            '<a id="impact-link" href="{}">Who uses it and what retiring it does</a> '
            "(accounts, migration replayed on the successor, capacity, notices, batches)",
            url,
        )

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
    list_display = ["changed_at", "model", "event", "actor", "reason"]
    list_filter = ["field", "actor"]
    search_fields = ["model__slug", "actor", "reason"]
    date_hierarchy = "changed_at"

    @admin.display(description="change")
    def event(self, obj: LifecycleChange) -> str:
        return history_event(obj)

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
    list_display = ["model", "tier", "pool_slug", "available_from"]
    list_filter = ["tier", "pool"]
    list_select_related = ["model", "tier", "pool"]

    @admin.display(description="pool", ordering="pool__slug")
    def pool_slug(self, obj: Deployment):
        return format_html('<span title="{}">{}</span>', obj.pool.name, obj.pool.slug)


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ["model", "tier", "input_per_million", "output_per_million", "is_estimate"]
    list_filter = ["tier", "is_estimate"]
    list_select_related = ["model", "tier"]

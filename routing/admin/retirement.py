"""Admin for what retirements did (quota policies applied, notices sent) and the
retirement impact page of a model (linked from the catalog's model versions by its URL
name, admin:routing_retirement_impact)."""

from __future__ import annotations

from types import SimpleNamespace

from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import path, reverse

from catalog import lifecycle
from catalog.admin import status_sentence
from catalog.models import ModelVersion, Tier
from routing.admin.base import ReadOnlyAdmin, delivery_state, stacked, when
from routing.models import Notice, RetirementApplication
from routing.retirement.impact import impact_chart, retirement_impact
from routing.retirement.notices import notices_resend


def _status_text(model: ModelVersion) -> str:
    """'retired since 2026-09-18, successor ...', 'deprecated: retires on ...'."""
    status, sentence = lifecycle.model_status(model), status_sentence(model)
    if not sentence:
        return status
    if status == lifecycle.RETIRED:
        return f"{status} {sentence}"  # the sentence starts "since ..."
    return f"{status}: {sentence}"


@admin.register(RetirementApplication)
class RetirementApplicationAdmin(ReadOnlyAdmin):
    list_display = ["applied_at", "package", "model", "policy", "successor", "detail"]
    list_filter = ["policy", "model"]

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
        context = {
            **self.admin_site.each_context(request),
            "title": "Retirement impact",
            # The sidebar highlights the entry whose URL the path starts with: this page
            # belongs to Model versions, not to where its URL happens to live.
            "nav_request": SimpleNamespace(path=reverse("admin:catalog_modelversion_changelist")),
        }
        model = ModelVersion.objects.filter(slug=slug).first()
        if model is None:
            self.message_user(request, f"No model {slug!r}.", level=messages.ERROR)
            return TemplateResponse(
                request, "admin/routing/impact.html", {**context, "impact": None}
            )
        successor = ModelVersion.objects.filter(slug=request.GET.get("successor") or "").first()
        tier = Tier.objects.filter(slug=request.GET.get("tier") or "").first()
        impact = retirement_impact(model=model, successor=successor, tier=tier)
        context |= {
            "title": f"Retirement impact: {model.slug}",
            "impact": impact,
            "chart": impact_chart(impact) if impact.accounts else None,
            "models": ModelVersion.objects.order_by("slug"),
            "tiers": Tier.objects.all(),
            "status": lifecycle.model_status(model),
            "status_text": _status_text(model),
        }
        return TemplateResponse(request, "admin/routing/impact.html", context)


@admin.register(Notice)
class NoticeAdmin(ReadOnlyAdmin):
    """Who was told what, and whether their webhook got it."""

    list_display = ["created", "account", "model_retiring", "delivery_column", "error"]
    list_select_related = ["account", "model", "successor"]
    list_filter = ["kind", "delivery", "model"]
    search_fields = ["account__name", "model__slug"]
    actions = ["retry_delivery"]

    def has_change_permission(self, request, obj=None):
        return request.user.is_staff  # for the action; fields stay read-only

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Notice):
        return when(obj.created_at)

    @admin.display(description="model / retires on", ordering="model__slug")
    def model_retiring(self, obj: Notice):
        if obj.model_id is None:  # a budget alert (kind quota.threshold)
            return stacked(obj.kind, obj.body.get("message", ""))
        successor = f", successor {obj.successor.slug}" if obj.successor_id else ""
        return stacked(obj.model.slug, f"{obj.retires_on:%Y-%m-%d}{successor}")

    @admin.display(description="delivery", ordering="delivery")
    def delivery_column(self, obj: Notice):
        return delivery_state(obj.get_delivery_display(), obj.attempts, obj.last_attempt_at)

    @admin.display(description="last error")
    def error(self, obj: Notice):
        text = obj.last_error or "-"
        return text if len(text) <= 80 else text[:79] + "…"

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Notice._meta.fields]

    @admin.action(description="Deliver again (failed or pending webhooks)")
    def retry_delivery(self, request, queryset):
        sent = notices_resend(notices=queryset)
        self.message_user(request, f"Sent {sent} notice(s) again.", level=messages.SUCCESS)

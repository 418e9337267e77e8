"""Admin for accounts, keys, quota and pool load. Balance columns are read-only here:
they change only through routing.quota (with a ledger row)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from catalog import lifecycle
from catalog.models import ModelVersion
from routing import quota
from routing.jobs import JobNotCancellable, job_cancel
from routing.keys import api_key_create, api_key_revoke
from routing.models import (
    Account,
    ApiKey,
    Job,
    LedgerEntry,
    Notice,
    PoolLoad,
    QuotaPackage,
    QuotaReservation,
    RetirementApplication,
)
from routing.quotes import quote_build
from routing.router import RouteRequest
from routing.selectors import ModelNotServing, ModelRetired, ModelUnknown


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
        from routing.notices import send_delivery

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
        from routing.impact import impact_chart, retirement_impact

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

"""Admin for accounts and their API keys, the account's "Try a quote" page (the
router's answer for the account, built exactly as the quotes API builds it) and its
usage export (CSV, from the usage API's selector, routing.quota.usage)."""

from __future__ import annotations

import csv
import datetime as dt

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

import simengine
from routing.accounts.keys import api_key_create, api_key_revoke
from routing.accounts.scopes import fallbacks_problem
from routing.models import Account, ApiKey, QuotaPackage
from routing.quota.usage import (
    GROUPS,
    UsageError,
    account_usage,
    usage_csv_rows,
    usage_moment,
    usage_range,
)
from routing.router.quotes import quote_build, route_request_from
from routing.router.resolve import ModelNotServing, ModelRetired, ModelUnknown


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["prefix", "name", "role", "created_at", "last_used_at", "expires_at", "revoked_at"]
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
        choices=[("", "router chooses")] + [(t, t) for t in simengine.TIERS],
        required=False,
    )
    task = forms.CharField(required=False, help_text="Task class for 'auto'.")


def _day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


class UsageExportForm(forms.Form):
    start = forms.DateField(help_text="UTC day (from its start).")
    end = forms.DateField(help_text="UTC day, included.")
    bucket = forms.ChoiceField(choices=[("day", "day"), ("hour", "hour")], initial="day")
    group_by = forms.MultipleChoiceField(
        choices=[(g, g) for g in GROUPS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        initial=["key", "model", "tier"],
    )
    keys = forms.ModelMultipleChoiceField(
        queryset=ApiKey.objects.none(), required=False, help_text="None: every key."
    )

    def __init__(self, *args, account: Account, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["keys"].queryset = ApiKey.objects.filter(account=account)

    def clean(self):
        d = super().clean()
        if all(d.get(n) for n in ("start", "end", "bucket")):
            try:
                start = usage_moment(_day_start(d["start"]), "start")
                end = usage_moment(_day_start(d["end"]), "end")
                d["range"] = usage_range(
                    bucket=d["bucket"],
                    start=start,
                    end=end + dt.timedelta(days=1),
                    now=timezone.now(),
                )
            except UsageError as exc:
                raise forms.ValidationError(str(exc)) from None
        return d


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "auto_migrate",
        "rate_limits",
        "created_at",
        "keys",
        "try_router",
    ]
    search_fields = ["name"]
    list_filter = ["auto_migrate"]
    inlines = [ApiKeyInline, QuotaPackageInline]
    actions = ["create_key"]
    # Webhooks are https (routing.core.urls_safe): a URL typed without a scheme is https.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    @admin.display(description="rate limits")
    def rate_limits(self, obj):
        """Both limits in one column (the webhook URL is on the change page): the list
        fits 1,366 px."""
        parts = [
            f"{value:,} {unit}/min"
            for value, unit in ((obj.requests_per_minute, "req"), (obj.tokens_per_minute, "tok"))
            if value
        ]
        return ", ".join(parts) or "default"

    @admin.display(description="active keys")
    def keys(self, obj):
        return obj.api_keys.filter(revoked_at__isnull=True).count()

    @admin.display(description="router, usage")
    def try_router(self, obj):
        url = reverse("admin:routing_account_quote", args=[obj.pk])
        usage = reverse("admin:routing_account_usage", args=[obj.pk])
        return format_html('<a href="{}">Try a quote</a> · <a href="{}">Usage</a>', url, usage)

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
            ),
            path(
                "<int:pk>/usage/",
                self.admin_site.admin_view(self.usage_view),
                name="routing_account_usage",
            ),
        ] + super().get_urls()

    def usage_view(self, request, pk: int):
        """The account's usage as CSV (header row, one row per bucket and group), from
        the same selector as GET /api/v1/usage; the form until it is valid. Staff only
        (the admin site's login), and only for those who may view accounts."""
        account = get_object_or_404(Account, pk=pk)
        if not self.has_view_permission(request, account):
            return HttpResponse(status=403)
        today = timezone.now().date()
        form = UsageExportForm(
            request.GET or None,
            account=account,
            initial={"start": today - dt.timedelta(days=6), "end": today},
        )
        if form.is_valid():
            d = form.cleaned_data
            start, end = d["range"]
            usage = account_usage(
                account_id=account.pk,
                start=start,
                end=end,
                bucket=d["bucket"],
                group_by=d["group_by"],
                key_ids=[k.pk for k in d["keys"]] or None,
                include_empty=False,
            )
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            name = f"usage-{account.pk}-{d['start']:%Y%m%d}-{d['end']:%Y%m%d}-{d['bucket']}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            csv.writer(response).writerows(usage_csv_rows(usage))
            return response
        context = {
            **self.admin_site.each_context(request),
            "title": f"Usage of {account.name}",
            "opts": self.model._meta,
            "account": account,
            "form": form,
        }
        return TemplateResponse(request, "admin/routing/usage_export.html", context)

    def quote_view(self, request, pk: int):
        """The router's answer for this account, as a client would get it."""
        account = get_object_or_404(Account, pk=pk)
        form = RouterTryForm(request.POST or None)
        result = error = None
        if request.method == "POST" and form.is_valid():
            d = form.cleaned_data
            try:
                result = quote_build(
                    account=account,
                    model=d["model"],
                    request=route_request_from(d),
                    at=timezone.now(),
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


class ApiKeyForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = "__all__"  # noqa: DJ007 (the admin's readonly_fields say what is edited)

    def clean(self):
        data = super().clean()
        fallbacks, models = data.get("fallbacks"), data.get("allowed_models") or []
        if fallbacks is None or "fallbacks" in self.errors:
            return data
        if not isinstance(fallbacks, list) or not all(isinstance(m, str) for m in fallbacks):
            self.add_error("fallbacks", 'A list of model names, e.g. ["sol", "terra"].')
        elif isinstance(models, list) and all(isinstance(m, str) for m in models):
            why = fallbacks_problem(models, fallbacks)
            if why:
                self.add_error("fallbacks", why)
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ["prefix", "account", "name", "role", "last_used_at", "revoked_at"]
    list_filter = ["role", "read_only", "revoked_at"]
    search_fields = ["prefix", "account__name", "name"]
    readonly_fields = [
        "account",
        "prefix",
        "key_hash",
        "created_at",
        "last_used_at",
        "revoked_at",
        "rotated_to",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # keys are made with the account action, so the raw key is shown once

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).", level=messages.SUCCESS)

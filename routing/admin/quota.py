"""Admin for quota packages, their reservations and the ledger. Balance columns are
read-only here: they change only through routing.quota.ledger (with a ledger row)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils import timezone

from catalog.models import ModelVersion
from routing.admin.base import ReadOnlyAdmin
from routing.models import LedgerEntry, QuotaPackage, QuotaReservation
from routing.quota import first_period


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
            "requests_per_minute",
            "tokens_per_minute",
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
            obj.period_start, obj.next_reset_at = first_period(obj.period, at=timezone.now())
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

"""Admin for quota packages, their reservations and the ledger. Balance columns are
read-only here: they change only through routing.quota.ledger (with a ledger row)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from catalog.models import ModelVersion
from routing.admin.base import (
    ReadOnlyAdmin,
    package_column,
    readable_fields,
    short_text,
    stacked,
    when,
)
from routing.core.formats import credits_text
from routing.models import LedgerEntry, QuotaPackage, QuotaReservation
from routing.quota import first_period
from routing.quota.alerts import package_alerts_check, thresholds_clean


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
            "alert_thresholds",
        ]

    def clean_alert_thresholds(self):
        try:
            return thresholds_clean(self.cleaned_data.get("alert_thresholds") or [])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

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
    # Within 1,366 px: the balance in one column; order and independence on the page.
    list_display = ["account", "name", "scope_period", "balance", "next_reset", "retirement"]
    list_filter = ["scope", "period", "independent", "on_retirement"]
    search_fields = ["account__name", "name"]
    filter_horizontal = ["model_versions", "tiers"]
    readonly_fields = readable_fields(
        QuotaPackage, ["spent", "reserved", "period_start", "next_reset_at"]
    )

    @admin.display(description="on retirement", ordering="on_retirement")
    def retirement(self, obj: QuotaPackage):
        return format_html(
            '<span title="{}">{}</span>', obj.get_on_retirement_display(), obj.on_retirement
        )

    @admin.display(description="scope / period", ordering="scope")
    def scope_period(self, obj: QuotaPackage):
        return stacked(obj.get_scope_display(), obj.get_period_display())

    @admin.display(description="remaining of limit")
    def balance(self, obj: QuotaPackage):
        return stacked(
            f"{credits_text(obj.remaining)} of {credits_text(obj.limit)}",
            f"spent {credits_text(obj.spent)}, reserved {credits_text(obj.reserved)}",
        )

    @admin.display(description="next reset", ordering="next_reset_at")
    def next_reset(self, obj: QuotaPackage):
        return when(obj.next_reset_at)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "model_versions":
            kwargs["queryset"] = ModelVersion.objects.order_by("slug")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if not change:
            obj.period_start, obj.next_reset_at = first_period(obj.period, at=timezone.now())
        super().save_model(request, obj, form, change)
        if change and {"limit", "alert_thresholds"} & set(form.changed_data):
            # A lower limit or a new threshold may be reached already: told now, not at
            # the next settlement that crosses one.
            package_alerts_check(obj.pk)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created", "package_col", "kind", "deltas", "reservation_ref", "note_text"]
    list_filter = ["kind"]
    list_select_related = ["package__account", "reservation"]

    @admin.display(description="package", ordering="package__account__name")
    def package_col(self, obj: LedgerEntry):
        return package_column(obj.package)

    @admin.display(description="at", ordering="created_at")
    def created(self, obj: LedgerEntry):
        return when(obj.created_at)

    @admin.display(description="reserved / spent")
    def deltas(self, obj: LedgerEntry):
        def signed(d):
            return ("+" if d > 0 else "") + credits_text(d)

        return stacked(f"reserved {signed(obj.delta_reserved)}", f"spent {signed(obj.delta_spent)}")

    @admin.display(description="reservation", ordering="reservation__reference")
    def reservation_ref(self, obj: LedgerEntry):
        return short_text(obj.reservation.reference, keep=24) if obj.reservation_id else "-"

    @admin.display(description="note")
    def note_text(self, obj: LedgerEntry):
        return short_text(obj.note, keep=40)

    search_fields = ["package__account__name", "reservation__reference"]
    date_hierarchy = "created_at"


@admin.register(QuotaReservation)
class QuotaReservationAdmin(ReadOnlyAdmin):
    list_display = ["ref", "package_col", "amounts", "state", "times"]
    list_select_related = ["package__account"]

    @admin.display(description="package", ordering="package__account__name")
    def package_col(self, obj: QuotaReservation):
        return package_column(obj.package)

    @admin.display(description="reference", ordering="reference")
    def ref(self, obj: QuotaReservation):
        return short_text(obj.reference, keep=28)

    @admin.display(description="amount / charged", ordering="amount")
    def amounts(self, obj: QuotaReservation):
        return stacked(credits_text(obj.amount), f"charged {credits_text(obj.charged)}")

    @admin.display(description="created / closed", ordering="created_at")
    def times(self, obj: QuotaReservation):
        return stacked(when(obj.created_at), when(obj.closed_at))

    list_filter = ["state"]
    search_fields = ["reference", "package__account__name"]

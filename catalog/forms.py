from __future__ import annotations

from django import forms

from catalog.lifecycle import LifecycleError, utc_today, validate_lifecycle
from catalog.models import ModelVersion, Tier

MODALITIES = [("text", "text"), ("image", "image"), ("audio", "audio"), ("video", "video")]


def _estimable_fields() -> list[tuple[str, str]]:
    """The model's own figures that can be marked as estimates (name, label)."""
    skip = {"id", "slug", "name", "vendor", "family", "kind", "notes", "estimated_fields"}
    skip |= {"architecture_is_estimate", "input_modalities", "in_flight_on_retirement"}
    skip |= {"created_at", "updated_at"}
    return [
        (f.name, f.verbose_name)
        for f in ModelVersion._meta.concrete_fields
        if f.name not in skip and not f.name.endswith("_id")
    ]


class ListChoiceField(forms.MultipleChoiceField):
    """Ticked boxes for a JSON list of names; names already stored outside the choices
    stay offered (and kept) rather than being dropped by a save."""

    def prepare_value(self, value):
        return list(value or [])


class ModelVersionAdminForm(forms.ModelForm):
    """The change form: lifecycle checks show on the form, next to the fields. The JSON
    lists (input modalities, estimated fields) are ticked boxes, not raw JSON."""

    input_modalities = ListChoiceField(
        choices=MODALITIES, widget=forms.CheckboxSelectMultiple, required=False
    )
    estimated_fields = ListChoiceField(
        choices=[],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Figures that are estimates, not published.",
    )

    class Meta:
        model = ModelVersion
        fields = "__all__"  # noqa: DJ007 (the admin fieldsets choose what shows)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, known in (
            ("input_modalities", MODALITIES),
            ("estimated_fields", _estimable_fields()),
        ):
            stored = list(getattr(self.instance, name, None) or [])
            have = {value for value, _ in known}
            self.fields[name].choices = known + [(v, v) for v in stored if v not in have]

    def clean_input_modalities(self):
        value = self.cleaned_data.get("input_modalities") or []
        if not value:
            raise forms.ValidationError("A model takes at least one kind of input.")
        return value

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            validate_lifecycle(
                self.instance,
                released_on=data.get("released_on"),
                generally_available_on=data.get("generally_available_on"),
                retirement_announced_on=data.get("retirement_announced_on"),
                retires_on=data.get("retires_on"),
                successor=data.get("successor"),
            )
        except LifecycleError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


class ScheduleRetirementForm(forms.Form):
    retires_on = forms.DateField(
        help_text="Retired from 00:00 UTC on this day (YYYY-MM-DD).",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    announced_on = forms.DateField(
        required=False,
        help_text="When clients are told (defaults to today). Deprecation headers start then.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    successor = forms.ModelChoiceField(queryset=ModelVersion.objects.all(), required=False)
    successor_tier = forms.ModelChoiceField(
        queryset=Tier.objects.all(),
        required=False,
        help_text="The tier the successor is recommended on.",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    notice_override = forms.CharField(
        required=False,
        label="Override the notice policy because",
        help_text="Only when the date gives less notice than the model's kind requires; "
        "kept in the history.",
    )

    def clean(self):
        data = super().clean()
        retires_on = data.get("retires_on")
        if retires_on and retires_on < utc_today():
            self.add_error("retires_on", "The date is in the past; use 'Retire now' instead.")
        announced = data.get("announced_on")
        if announced and retires_on and announced > retires_on:
            self.add_error("announced_on", "The announcement must come before the retirement.")
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class RetireNowForm(ReasonForm):
    notice_override = forms.CharField(
        required=False,
        label="Override the notice policy because",
        help_text="Needed unless the retirement was announced long enough ago; kept in "
        "the history.",
    )

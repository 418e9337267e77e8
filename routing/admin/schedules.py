"""Admin for recurring batches. Saving a schedule keeps its django-celery-beat periodic
task in step and deleting one deletes its periodic task, both through the schedule
services (routing.batches)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from routing.batches.create import schedule_check
from routing.batches.errors import BatchError
from routing.batches.params import parse_window
from routing.batches.schedules import schedule_delete, schedule_sync
from routing.models import Batch, BatchSchedule, File


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
        # The rules live in the service (schedule_check).
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
    (schedule_sync); deleting a schedule deletes its periodic task (schedule_delete)."""

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
        schedule_delete(schedule=obj)

    def delete_queryset(self, request, queryset):
        for schedule in queryset.select_related("periodic_task"):
            schedule_delete(schedule=schedule)

    @admin.action(description="Re-sync periodic tasks", permissions=["change"])
    def sync_periodic_tasks(self, request, queryset):
        n = 0
        for schedule in queryset.select_related("account", "input_file", "crontab"):
            schedule_sync(schedule)
            n += 1
        self.message_user(request, f"Synced {n} periodic task(s).", level=messages.SUCCESS)

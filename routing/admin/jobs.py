"""Admin for jobs (watched, and cancelled through the jobs service) and the pools'
background load."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html

from routing.admin.base import ReadOnlyAdmin, readable_fields, short_id, stacked, when
from routing.core.formats import credits_text, duration_long
from routing.jobs.cancel import job_cancel
from routing.jobs.errors import JobNotCancellable
from routing.models import Job, PoolLoad


@admin.register(PoolLoad)
class PoolLoadAdmin(admin.ModelAdmin):
    list_display = ["pool", "background_utilisation", "updated_at"]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """Jobs are written only by the API and the workers; the admin watches them."""

    list_display = [
        "job_id",
        "account",
        "status_deadline",
        "model_tier",
        "cost_column",
        "times",
    ]
    list_filter = ["status", "deadline_met", "tier", "pool", "model"]
    search_fields = ["id", "account__name", "idempotency_key"]
    date_hierarchy = "created_at"
    list_select_related = ["account", "model", "tier", "pool"]
    actions = ["cancel_jobs"]

    def has_change_permission(self, request, obj=None):
        return request.user.is_staff  # for the cancel action; fields stay read-only

    @admin.display(description="id", ordering="id")
    def job_id(self, obj: Job):
        return short_id(obj.pk)

    @admin.display(description="model / tier (pool)", ordering="model__slug")
    def model_tier(self, obj: Job):
        tier = obj.tier.slug if obj.tier_id else "-"
        pool = obj.pool.slug if obj.pool_id else "-"
        return stacked(obj.model.slug if obj.model_id else "-", f"{tier} ({pool})")

    @admin.display(description="cost", ordering="cost")
    def cost_column(self, obj: Job):
        return stacked(credits_text(obj.cost), f"predicted {credits_text(obj.predicted_cost)}")

    @admin.display(description="created / finishes", ordering="created_at")
    def times(self, obj: Job):
        return stacked(when(obj.created_at), when(obj.finishes_at))

    @admin.display(description="status", ordering="status")
    def status_deadline(self, obj: Job):
        """One column (the list must fit a laptop): the status above, the deadline's
        outcome below (met, missed by how much, or the deadline while it runs)."""
        if obj.deadline_met is None:
            outcome = f"deadline {duration_long(obj.deadline_seconds)}"
        elif obj.deadline_met:
            outcome = "deadline met"
        else:
            outcome = f"missed by {duration_long(obj.late_by_seconds)}"
        promise = (
            f"promised P90 {duration_long(obj.promised_seconds)}" if obj.promised_seconds else ""
        )
        return stacked(
            obj.get_status_display(), format_html('<span title="{}">{}</span>', promise, outcome)
        )

    def get_readonly_fields(self, request, obj=None):
        return readable_fields(Job, [f.name for f in Job._meta.fields])

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

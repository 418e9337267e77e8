"""Admin for signed webhooks: the accounts' endpoints (secrets never shown), the events,
the delivery log with "send again", and the budget alerts told. Staff only."""

from __future__ import annotations

from django.contrib import admin, messages

from routing.admin.base import ReadOnlyAdmin, delivery_state, stacked, when
from routing.models import BudgetAlert, WebhookDelivery, WebhookEndpoint, WebhookEvent
from routing.webhooks.delivery import deliveries_resend


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Clients manage their endpoints through the API; staff may disable one (or change
    its description). The signing secrets are not shown."""

    list_display = ["url", "account", "enabled", "types", "created"]
    list_filter = ["enabled"]
    list_select_related = ["account"]
    search_fields = ["url", "account__name", "description"]
    fields = ["account", "url", "description", "enabled", "event_types", "created_at"]
    readonly_fields = ["account", "url", "event_types", "created_at"]

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="event types")
    def types(self, obj: WebhookEndpoint):
        return ", ".join(obj.event_types) if obj.event_types else "all"

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: WebhookEndpoint):
        return when(obj.created_at)


class DeliveryInline(admin.TabularInline):
    model = WebhookDelivery
    extra = 0
    can_delete = False
    fields = ["endpoint", "state", "attempts", "last_status_code", "last_error", "delivered_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "created", "account", "type"]
    list_filter = ["type"]
    list_select_related = ["account"]
    search_fields = ["id", "account__name", "key"]
    inlines = [DeliveryInline]

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: WebhookEvent):
        return when(obj.created_at)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: every event sent to every endpoint, its state and last answer."""

    list_display = ["created", "event_column", "endpoint", "state_column", "status", "error"]
    list_select_related = ["event", "endpoint", "endpoint__account"]
    list_filter = ["state", "event__type"]
    search_fields = ["event__id", "endpoint__url", "endpoint__account__name"]
    actions = ["send_again"]

    def has_change_permission(self, request, obj=None):
        return request.user.is_staff  # for the action; fields stay read-only

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in WebhookDelivery._meta.fields]

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: WebhookDelivery):
        return when(obj.created_at)

    @admin.display(description="event", ordering="event__type")
    def event_column(self, obj: WebhookDelivery):
        return stacked(obj.event.type, obj.event_id)

    @admin.display(description="state", ordering="state")
    def state_column(self, obj: WebhookDelivery):
        return delivery_state(obj.get_state_display(), obj.attempts, obj.last_attempt_at)

    @admin.display(description="last status")
    def status(self, obj: WebhookDelivery):
        code = obj.last_status_code or "-"
        return f"{code} ({obj.response_ms} ms)" if obj.response_ms is not None else code

    @admin.display(description="last error")
    def error(self, obj: WebhookDelivery):
        text = obj.last_error or "-"
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.action(description="Send again (failed or pending deliveries)")
    def send_again(self, request, queryset):
        sent = deliveries_resend(deliveries=queryset)
        self.message_user(request, f"Sent {sent} delivery(ies) again.", level=messages.SUCCESS)


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "account", "subject", "threshold", "spent", "limit"]
    list_filter = ["threshold"]
    list_select_related = ["account"]
    search_fields = ["account__name", "subject"]

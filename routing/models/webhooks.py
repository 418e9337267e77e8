"""Signed webhooks (issue 27): an account's endpoints, the events it is told about, one
delivery per (event, endpoint) with its log; and the budget alerts' claims."""

from __future__ import annotations

import secrets

from django.db import models

from routing.core.formats import iso
from routing.models.accounts import Account, ApiKey
from routing.models.quota import CREDIT, QuotaPackage

EVENT_TYPES = (
    "quota.threshold",
    "batch.completed",
    "batch.failed",
    "batch.expired",
    "job.failed",
    "model.deprecated",
    "model.retiring",
    "model.retired",
)
# The test event (POST /webhooks/{id}/test) goes to the endpoint asked, whatever it
# subscribes to.
TEST_EVENT = "webhook.test"


def event_id() -> str:
    """`msg_` and 24 random base32 characters: the event's id and its `webhook-id`."""
    return "msg_" + secrets.token_hex(12)


class WebhookEndpoint(models.Model):
    """A URL of the account's that gets its events, signed (Standard Webhooks) with
    `secret`; after a rotation `previous_secret` signs too until
    `previous_secret_expires_at` (then it is dropped). The secrets are kept as they are:
    signing needs them (they are shown to the client once, at creation or rotation)."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)
    event_types = models.JSONField(
        default=list, blank=True, help_text="The event types it gets; empty: all."
    )
    secret = models.CharField(max_length=100)
    previous_secret = models.CharField(max_length=100, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["account", "-created_at"]
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return f"{self.account.name}: {self.url}"

    def subscribes(self, event_type: str) -> bool:
        return not self.event_types or event_type in self.event_types


class WebhookEvent(models.Model):
    """Something that happened to an account (`type`, `data`); `key` makes emitting it
    idempotent (one event per account and key: a rerun or a redelivered task emits
    nothing new)."""

    id = models.CharField(primary_key=True, max_length=40, default=event_id, editable=False)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="webhook_events")
    type = models.CharField(max_length=40, db_index=True)
    key = models.CharField(max_length=200)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["account", "key"], name="webhook_event_once")
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"

    def payload(self) -> dict:
        """The body POSTed (Standard Webhooks' recommended shape)."""
        return {
            "id": self.id,
            "type": self.type,
            "timestamp": iso(self.created_at),
            "data": self.data,
        }


class WebhookDelivery(models.Model):
    """One event to one endpoint: the delivery log. Claimed for each attempt by a
    conditional update on (`state`, `next_attempt_at`), so a redelivered task never
    posts twice."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (retries exhausted)"

    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    response_ms = models.PositiveIntegerField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["event", "endpoint"], name="webhook_delivery_once")
        ]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id}: {self.state}"


class BudgetAlert(models.Model):
    """A budget threshold crossed: the unique (subject, period_start, threshold) is the
    claim, so each threshold is told once per period however many settlements cross it
    at once. `subject`: `package:<id>` or `key:<id>`."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=40)
    package = models.ForeignKey(
        QuotaPackage, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    period_start = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField(help_text="Percent of the limit.")
    spent = models.DecimalField(**CREDIT)
    limit = models.DecimalField(**CREDIT)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["subject", "period_start", "threshold"], name="budget_alert_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} {self.threshold}% ({self.period_start:%Y-%m-%d})"

"""What a retirement did to packages, and the notices sent to accounts."""

from __future__ import annotations

import uuid

from django.db import models

from catalog.models import ModelVersion, Tier
from routing.models.accounts import Account
from routing.models.quota import QuotaPackage


class RetirementApplication(models.Model):
    """The retirement-day policy of one package for one retired model, applied once
    (the unique pair is the claim: a second run, or a run resumed after a crash,
    skips what is done)."""

    package = models.ForeignKey(QuotaPackage, on_delete=models.CASCADE, related_name="retirements")
    model = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    policy = models.CharField(max_length=8, choices=QuotaPackage.OnRetirement.choices)
    successor = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    detail = models.CharField(max_length=300, blank=True)
    applied_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["package", "model"], name="retirement_applied_once")
        ]

    def __str__(self) -> str:
        return f"{self.package} / {self.model.slug}: {self.policy}"


class Notice(models.Model):
    """Something an account must hear about in time, with the state of its delivery to
    the account's `webhook_url`: a retirement that affects it (`kind` "retirement",
    with the model and date) or a budget threshold crossed (`kind` "quota.threshold",
    no model; also sent as a signed webhook event, routing.quota.alerts)."""

    RETIREMENT = "retirement"
    QUOTA_THRESHOLD = "quota.threshold"

    class Delivery(models.TextChoices):
        NONE = "none", "No webhook"
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (retries exhausted)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="notices")
    kind = models.CharField(max_length=20, default="retirement")
    model = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    retires_on = models.DateField(null=True, blank=True)
    successor = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    successor_tier = models.ForeignKey(
        Tier, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    body = models.JSONField(default=dict, help_text="What the client sees and the webhook gets.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    delivery = models.CharField(max_length=10, choices=Delivery.choices, default=Delivery.NONE)
    attempts = models.PositiveIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One notice per account, model and retirement date: announcing twice (or a
            # rerun after a crash) notifies once; a new date is a new notice.
            models.UniqueConstraint(
                fields=["account", "kind", "model", "retires_on"],
                condition=models.Q(kind="retirement"),
                name="notice_once",
            )
        ]

    def __str__(self) -> str:
        if self.model_id is None:
            return f"{self.account}: {self.kind}"
        return f"{self.account}: {self.kind} of {self.model.slug} on {self.retires_on}"


# --- Batches -------------------------------------------------------------------------

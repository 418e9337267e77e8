"""Files, batches, their requests and recurring schedules."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from catalog.models import HardwarePool, ModelVersion, Tier
from routing.models.accounts import Account, ApiKey
from routing.models.quota import CREDIT, QuotaReservation


def _file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


def _file_path(instance: File, filename: str) -> str:
    return f"files/{instance.account_id}/{instance.id}.jsonl"


class File(models.Model):
    """An uploaded batch input, or a batch's output/error file (JSONL, in the default
    storage under MEDIA_ROOT)."""

    class Purpose(models.TextChoices):
        BATCH = "batch", "Batch input"
        BATCH_OUTPUT = "batch_output", "Batch output"
        BATCH_ERROR = "batch_error", "Batch errors"

    id = models.CharField(primary_key=True, max_length=40, default=_file_id, editable=False)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="files")
    api_key = models.ForeignKey(
        ApiKey,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="files",
        help_text="The key that uploaded it (empty: written by the service).",
    )
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    filename = models.CharField(max_length=255)
    bytes = models.BigIntegerField()
    lines = models.PositiveIntegerField(default=0, help_text="Non-empty lines.")
    sha256 = models.CharField(max_length=64)
    content = models.FileField(upload_to=_file_path, max_length=255)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        db_index=True,
        help_text="A batch's output or error file: its content is deleted from then on "
        "(BATCH_OUTPUT_EXPIRES_DAYS); empty: kept.",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"

    def expired(self, at=None) -> bool:
        """Past its expiry (its content is deleted, or is about to be)."""
        return self.expires_at is not None and self.expires_at <= (at or timezone.now())


class BatchSchedule(models.Model):
    """A recurring batch (e.g. every night at 02:00 UTC): its input file and window; the
    timing is a django-celery-beat crontab, and the periodic task that fires it is kept
    in step by routing.batches.schedule_sync (ops see and edit both in the admin)."""

    name = models.CharField(max_length=120, unique=True)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="batch_schedules")
    input_file = models.ForeignKey(File, on_delete=models.PROTECT, related_name="schedules")
    completion_window = models.CharField(
        max_length=16, default="24h", help_text="How long each run may take: 30m, 8h, 24h, 2d."
    )
    crontab = models.ForeignKey(
        "django_celery_beat.CrontabSchedule",
        on_delete=models.PROTECT,
        related_name="+",
        help_text="When each run starts (UTC).",
    )
    enabled = models.BooleanField(default=True)
    metadata = models.JSONField(default=dict, blank=True)
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="batch_schedule",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Batch(models.Model):
    """Many requests run together inside a completion window (OpenAI's Batch API
    shape). The plan says which tiers run how many of them; requests are charged one by
    one from reservations made at start; see routing/batches.py."""

    class Status(models.TextChoices):
        VALIDATING = "validating", "Validating"
        IN_PROGRESS = "in_progress", "In progress"
        FINALIZING = "finalizing", "Finalizing"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        EXPIRED = "expired", "Expired"
        CANCELLING = "cancelling", "Cancelling"
        CANCELLED = "cancelled", "Cancelled"

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.EXPIRED, Status.CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="batches")
    api_key = models.ForeignKey(
        ApiKey,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="batches",
        help_text="The key that created it (empty: a schedule or the service).",
    )
    # NULL once the file was deleted after the batch ended (OpenAI allows it; the batch's
    # requests and results keep what it needs). Refused while the batch runs.
    input_file = models.ForeignKey(
        File, on_delete=models.SET_NULL, null=True, blank=True, related_name="batches"
    )
    endpoint = models.CharField(max_length=40, default="/v1/jobs")
    completion_window = models.CharField(max_length=16, default="24h")
    window_seconds = models.FloatField()
    metadata = models.JSONField(default=dict, blank=True)
    schedule = models.ForeignKey(
        BatchSchedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="batches"
    )
    scheduled_for = models.DateTimeField(
        null=True, blank=True, help_text="The schedule's firing this run belongs to."
    )
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries"
    )

    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.VALIDATING, db_index=True
    )
    start_at = models.DateTimeField(help_text="Earliest start.")
    expires_at = models.DateTimeField(help_text="Start + window: unfinished work expires.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    validated_at = models.DateTimeField(null=True, blank=True)
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)

    plan = models.JSONField(null=True, blank=True)
    predicted_cost = models.DecimalField(**CREDIT, null=True, blank=True)
    predicted_finish_at = models.DateTimeField(null=True, blank=True)
    cost = models.DecimalField(**CREDIT, default=Decimal(0), help_text="Charged so far.")
    errors = models.JSONField(default=list, blank=True)
    output_file = models.ForeignKey(
        File, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error_file = models.ForeignKey(
        File, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_advanced_at = models.DateTimeField(null=True, blank=True)
    next_advance_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "batches"
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "scheduled_for"],
                condition=Q(schedule__isnull=False),
                name="batch_once_per_schedule_firing",
            ),
            models.CheckConstraint(
                condition=Q(completed__lte=F("total")) & Q(failed__lte=F("total")),
                name="batch_counts",
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.id} ({self.status})"


class BatchRequest(models.Model):
    """One line of a batch: where the plan put it, when it ran, what it cost."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="requests")
    line = models.PositiveIntegerField(help_text="Line number in the input file (from 1).")
    custom_id = models.CharField(max_length=512)
    request = models.JSONField(help_text="The input line as sent.")
    model = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    turns = models.PositiveIntegerField(default=1)
    tool_seconds = models.FloatField(default=0.0)

    tier = models.ForeignKey(
        Tier, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    pool = models.ForeignKey(
        HardwarePool, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    unit_cost = models.DecimalField(**CREDIT, null=True, blank=True)
    slot_share = models.FloatField(null=True, blank=True, help_text="Pool share of one stream.")
    reservation = models.ForeignKey(
        QuotaReservation, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    finishes_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    simulated = models.JSONField(null=True, blank=True)
    cost = models.DecimalField(**CREDIT, null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    rerouted_from = models.CharField(max_length=80, blank=True)

    class Meta:
        ordering = ["batch", "line"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "custom_id"], name="batch_custom_id_unique"),
            models.UniqueConstraint(fields=["batch", "line"], name="batch_line_unique"),
        ]
        indexes = [models.Index(fields=["batch", "status", "finishes_at"])]

    def __str__(self) -> str:
        return f"{self.custom_id} ({self.status})"

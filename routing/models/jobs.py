"""Jobs and the pools' background load."""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from catalog.models import HardwarePool, ModelVersion, Tier
from routing.models.accounts import Account, ApiKey
from routing.models.quota import CREDIT, QuotaPackage, QuotaReservation


class PoolLoad(models.Model):
    """Traffic on a pool that is not ours to see job by job (other tenants, other
    regions), as a utilisation; the router adds our own queued and running work."""

    pool = models.OneToOneField(HardwarePool, on_delete=models.CASCADE, related_name="load")
    background_utilisation = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(background_utilisation__gte=0) & Q(background_utilisation__lte=1),
                name="pool_load_is_a_fraction",
            )
        ]

    def __str__(self) -> str:
        return f"{self.pool.slug}: {self.background_utilisation:.0%}"


class PoolOccupancy(models.Model):
    """Running totals of this service's active jobs per pool: the slot shares (and
    counts) of its queued and its running jobs. Kept by database triggers on the job
    table (migration 0008), so every insert, update and delete of a job changes them in
    the same transaction, whoever writes it (ORM, bulk update, raw SQL). Striped: each
    change goes to one of a few rows of the pool (at random on PostgreSQL) so concurrent
    jobs of one pool seldom wait on the same row; a pool's totals are the sum of its rows
    (a row alone may be negative). `routing.router.occupancy` reads and checks them."""

    pool = models.ForeignKey(HardwarePool, on_delete=models.CASCADE, related_name="+")
    stripe = models.PositiveSmallIntegerField()
    queued_share = models.FloatField(default=0.0)
    running_share = models.FloatField(default=0.0)
    queued = models.IntegerField(default=0)
    running = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pool", "stripe"], name="pool_occupancy_stripe")
        ]

    def __str__(self) -> str:
        return f"pool {self.pool_id}/{self.stripe}: {self.queued_share} + {self.running_share}"


class Job(models.Model):
    """One piece of work: accepted with a quota reservation, run by a worker on the
    simulated hardware of its tier, settled once.

    Timestamps are wall time; `predicted` and `simulated` timings are in simulated
    seconds (SIM_TIME_SCALE simulated seconds pass per wall second). A running job
    holds `slot_share` of its pool from `started_at` to `finishes_at`.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="jobs")
    # Who did it (issue 27): the key that sent the job, the OpenAI `user` and `metadata`
    # (bounded as OpenAI bounds them: 16 pairs, keys 64 and values 512 characters).
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    user = models.CharField(max_length=256, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # NULL, not "": the unique constraint applies only to requests that sent a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    request_fingerprint = models.CharField(max_length=64)

    requested_model = models.CharField(max_length=80)
    model = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="jobs")
    requested_tier = models.CharField(max_length=16, null=True, blank=True)  # noqa: DJ001 (NULL: router chose)
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="jobs")
    pool = models.ForeignKey(HardwarePool, on_delete=models.PROTECT, related_name="jobs")

    input_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    turns = models.PositiveIntegerField(default=1)
    tool_seconds = models.FloatField(default=0.0)
    deadline_seconds = models.FloatField()
    max_cost = models.DecimalField(**CREDIT, null=True, blank=True)
    prompt = models.TextField(blank=True)

    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    predicted = models.JSONField(default=dict)
    predicted_cost = models.DecimalField(**CREDIT)
    predicted_start_at = models.DateTimeField()
    predicted_completion_at = models.DateTimeField()
    package = models.ForeignKey(QuotaPackage, on_delete=models.PROTECT, related_name="jobs")
    reservation = models.OneToOneField(
        QuotaReservation, null=True, blank=True, on_delete=models.PROTECT, related_name="job"
    )
    slot_share = models.FloatField(help_text="Share of the pool one stream of this tier uses.")

    started_at = models.DateTimeField(null=True, blank=True, help_text="Slot start (wall).")
    finishes_at = models.DateTimeField(null=True, blank=True, db_index=True)
    simulated = models.JSONField(null=True, blank=True)
    cost = models.DecimalField(**CREDIT, null=True, blank=True, help_text="Charged.")
    attempts = models.PositiveIntegerField(default=0)
    # A streamed answer (the /v1/ chat endpoints with stream: true): output tokens the
    # stream has handed to the client, recorded before it sends them and only while the
    # job runs (NULL: not streamed). What an early end charges (routing.jobs.interactive).
    delivered_tokens = models.PositiveIntegerField(null=True, blank=True)
    # An interactive answer as planned when it was accepted (routing.agents.answer:
    # text seed and stop cut, a JSON document, or tool calls), and for /v1/responses
    # whether it is stored and what it echoes. NULL: the filler seeded by the job's id.
    answer = models.JSONField(null=True, blank=True)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    rerouted_from = models.CharField(
        max_length=80, blank=True, help_text="The retired model this job was moved from."
    )

    # The promise and its outcome, in simulated seconds from submission: the P90
    # completion the router decided on (routing.router.timing), then the completion the
    # run simulated, whether it met the deadline and by how much it was late (0 if met).
    promised_seconds = models.FloatField(null=True, blank=True)
    completion_seconds = models.FloatField(null=True, blank=True)
    deadline_met = models.BooleanField(null=True, blank=True)
    late_by_seconds = models.FloatField(null=True, blank=True)

    # Set by the caller's clock (a replay or a test passes its own `at`), now otherwise.
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_idempotency_key_unique_per_account",
            ),
            models.CheckConstraint(
                condition=Q(slot_share__gt=0) & Q(slot_share__lte=1), name="job_slot_share"
            ),
        ]
        indexes = [
            models.Index(fields=["pool", "status", "finishes_at"]),
            # Running jobs past their end, not yet finished (own_occupancy's correction).
            models.Index(fields=["status", "finishes_at"], name="job_status_finishes_at"),
            # Attainment over a sliding window (metrics, the admin home's attention list).
            models.Index(
                fields=["finished_at", "tier", "model"],
                condition=Q(deadline_met__isnull=False),
                name="job_outcome_window",
            ),
            # An account's usage over a range (routing.quota.usage): ended jobs only, so
            # accepting a job writes no entry to it.
            models.Index(
                fields=["account", "finished_at"],
                condition=Q(finished_at__isnull=False),
                name="job_account_usage",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

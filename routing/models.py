"""Accounts, API keys, quota packages with their ledger, and pool load.

Money rules (see routing/quota.py): a package's balance columns (`spent`, `reserved`)
change only through conditional UPDATEs in routing/quota.py, each in the same
transaction as an append-only `LedgerEntry`; CheckConstraints make the database
itself refuse a negative remaining balance.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from catalog.models import HardwarePool, ModelFamily, ModelVersion, Tier

CREDIT = {"max_digits": 18, "decimal_places": 6}


class Account(models.Model):
    """An organisation: the tenant every key, package and job belongs to."""

    name = models.CharField(max_length=120, unique=True)
    webhook_url = models.URLField(
        blank=True,
        help_text="Notices (e.g. a retirement affecting this account) are POSTed here as JSON.",
    )
    auto_migrate = models.BooleanField(
        default=False,
        help_text="Opted in to automatic migration: work for a retired model is quoted on "
        "its successor instead of refused with 410.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A bearer key. Only its SHA-256 is stored; the key is shown once, at creation."""

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=120, default="default")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["account", "-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.account.name}, {self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class QuotaPackage(models.Model):
    """Credits an account may spend in a period, on a scope of models and tiers.

    Credits are cost units (1 credit = 1 USD of list price on the tier served). Main
    packages are consumed in `order`; an `independent` package (a spare tank, like
    Spark's) pays only when no main package can, and never touches main quota.
    """

    class Scope(models.TextChoices):
        ALL = "all", "All models"
        FAMILY = "family", "One model family"
        MODELS = "models", "Specific model versions"

    class Period(models.TextChoices):
        DAY = "day", "Daily"
        WEEK = "week", "Weekly"
        MONTH = "month", "Monthly"
        ONCE = "once", "One-off"

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="packages")
    name = models.CharField(max_length=120)
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.ALL)
    family = models.ForeignKey(
        ModelFamily, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    model_versions = models.ManyToManyField(ModelVersion, blank=True, related_name="+")
    tiers = models.ManyToManyField(
        Tier, blank=True, related_name="+", help_text="Empty: every tier."
    )
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTH)
    limit = models.DecimalField(**CREDIT, validators=[MinValueValidator(Decimal(0))])
    spent = models.DecimalField(**CREDIT, default=Decimal(0))
    reserved = models.DecimalField(**CREDIT, default=Decimal(0))
    period_start = models.DateTimeField()
    next_reset_at = models.DateTimeField(null=True, blank=True, db_index=True)
    order = models.PositiveSmallIntegerField(default=100, help_text="Lower is consumed first.")
    independent = models.BooleanField(
        default=False, help_text="A spare tank: used only when no main package covers the work."
    )
    valid_from = models.DateTimeField(null=True, blank=True)
    valid_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class OnRetirement(models.TextChoices):
        KEEP = "keep", "Keep until its own expiry, usable for the successor"
        MIGRATE = "migrate", "Migrate to the successor (credits converted)"
        EXPIRE = "expire", "Expire on the retirement date"

    # What becomes of a package tied to a model (scope "models") when that model
    # retires: set by the admin, shown to the client before the day, applied on the day.
    on_retirement = models.CharField(
        max_length=8, choices=OnRetirement.choices, default=OnRetirement.KEEP
    )
    migrate_tier = models.ForeignKey(
        Tier,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Migrate: the successor's tier the package then covers (empty: all).",
    )
    conversion = models.DecimalField(
        max_digits=8,
        decimal_places=4,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal(0))],
        help_text="Migrate: remaining credits are multiplied by this.",
    )

    class Meta:
        ordering = ["account", "independent", "order", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(spent__gte=0), name="quota_spent_not_negative"),
            models.CheckConstraint(
                condition=Q(reserved__gte=0), name="quota_reserved_not_negative"
            ),
            # The database refuses a negative remaining balance.
            models.CheckConstraint(
                condition=Q(limit__gte=F("spent") + F("reserved")),
                name="quota_remaining_not_negative",
            ),
            models.CheckConstraint(
                condition=~Q(scope="family") | Q(family__isnull=False),
                name="quota_family_scope_names_a_family",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account.name}: {self.name}"

    @property
    def remaining(self) -> Decimal:
        return self.limit - self.spent - self.reserved


class QuotaReservation(models.Model):
    """Credits held for one piece of work until it is settled or released."""

    class State(models.TextChoices):
        HELD = "held", "Held"
        SETTLED = "settled", "Settled"
        RELEASED = "released", "Released"

    package = models.ForeignKey(QuotaPackage, on_delete=models.PROTECT, related_name="reservations")
    reference = models.CharField(
        max_length=120, unique=True, help_text="What the credits are for (a job id...)."
    )
    amount = models.DecimalField(**CREDIT, validators=[MinValueValidator(Decimal(0))])
    drawn = models.DecimalField(
        **CREDIT,
        default=Decimal(0),
        help_text="Charged while still held (a batch settles request by request).",
    )
    charged = models.DecimalField(**CREDIT, null=True, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.HELD)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="reservation_amount_positive"),
            models.CheckConstraint(
                condition=Q(drawn__gte=0) & Q(drawn__lte=F("amount")), name="reservation_drawn"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reference}: {self.amount} ({self.state})"


class LedgerEntry(models.Model):
    """Append-only: every change of a package's `spent` or `reserved`, with its delta."""

    class Kind(models.TextChoices):
        RESERVE = "reserve", "Reserve"
        SETTLE = "settle", "Settle"
        DRAW = "draw", "Settle part (batch requests)"
        RELEASE = "release", "Release"
        RESET = "reset", "Period reset"
        RETIREMENT = "retirement", "Retirement policy applied"

    package = models.ForeignKey(QuotaPackage, on_delete=models.PROTECT, related_name="ledger")
    reservation = models.ForeignKey(
        QuotaReservation, null=True, blank=True, on_delete=models.PROTECT, related_name="ledger"
    )
    kind = models.CharField(max_length=12, choices=Kind.choices)
    delta_reserved = models.DecimalField(**CREDIT, default=Decimal(0))
    delta_spent = models.DecimalField(**CREDIT, default=Decimal(0))
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            # One reserve / settle / release per reservation: a retried write cannot
            # charge twice. (Draws are many per reservation: each pays for requests a
            # conditional write completed, see routing/batches.py.)
            models.UniqueConstraint(
                fields=["reservation", "kind"],
                condition=Q(reservation__isnull=False) & ~Q(kind="draw"),
                name="ledger_one_entry_per_reservation_kind",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.package_id}: reserved {self.delta_reserved:+}, spent {self.delta_spent:+}"


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
    last_sent_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    rerouted_from = models.CharField(
        max_length=80, blank=True, help_text="The retired model this job was moved from."
    )

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
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
        indexes = [models.Index(fields=["pool", "status", "finishes_at"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


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
    """Something an account must hear about in time (today: a retirement that affects
    it), with the state of its webhook delivery."""

    class Delivery(models.TextChoices):
        NONE = "none", "No webhook"
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (retries exhausted)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="notices")
    kind = models.CharField(max_length=20, default="retirement")
    model = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    retires_on = models.DateField()
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
                fields=["account", "kind", "model", "retires_on"], name="notice_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.account}: {self.kind} of {self.model.slug} on {self.retires_on}"


# --- Batches -------------------------------------------------------------------------


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
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    filename = models.CharField(max_length=255)
    bytes = models.BigIntegerField()
    lines = models.PositiveIntegerField(default=0, help_text="Non-empty lines.")
    sha256 = models.CharField(max_length=64)
    content = models.FileField(upload_to=_file_path, max_length=255)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"


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
    input_file = models.ForeignKey(File, on_delete=models.PROTECT, related_name="batches")
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

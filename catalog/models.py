"""The model catalog: families, versions and their lifecycle dates, tiers, pools,
deployments and prices.

A version's status is never stored: it is derived from its dates by
`catalog.status.model_status` (and `status_q` for queries), so it cannot drift.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from catalog.status import PREVIEW_KIND, model_status

# Model slugs carry version numbers with dots (`gpt-5.6-sol`), which SlugField refuses.
model_slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$",
    "Use lower-case letters, digits, dots and hyphens (e.g. gpt-5.6-sol).",
)


class Tier(models.Model):
    """A service tier: the same model sold at another speed and price."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=60)
    rank = models.PositiveSmallIntegerField(
        unique=True,
        help_text="Slowest/cheapest first; on a shared pool a higher rank is served first.",
    )
    price_multiplier = models.DecimalField(
        max_digits=6, decimal_places=3, help_text="Price against Standard (published API pricing)."
    )
    speed_vs_standard = models.CharField(max_length=120, blank=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["rank"]

    def __str__(self) -> str:
        return self.name


class HardwarePool(models.Model):
    class Device(models.TextChoices):
        WSE3 = "wse-3", "Cerebras WSE-3 (CS-3)"
        H100 = "h100", "NVIDIA H100 SXM"
        H200 = "h200", "NVIDIA H200"
        B200 = "b200", "NVIDIA B200"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=120)
    device = models.CharField(max_length=16, choices=Device.choices)
    nodes = models.PositiveIntegerField(
        validators=[MinValueValidator(1)], help_text="Wafers (CS-3 systems) or GPUs in the pool."
    )
    is_estimate = models.BooleanField(default=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return f"{self.name} ({self.nodes} x {self.device})"


class ModelFamily(models.Model):
    """A product line; its slug doubles as an alias for its current version."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=120)
    vendor = models.CharField(max_length=60)

    class Meta:
        ordering = ["slug"]
        verbose_name_plural = "model families"

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    class Kind(models.TextChoices):
        GENERAL = "general", "General model"
        VARIANT = "variant", "Specialised variant (codex and similar)"
        PREVIEW = PREVIEW_KIND, "Preview"

    slug = models.CharField(max_length=80, unique=True, validators=[model_slug_validator])
    name = models.CharField(max_length=120)
    vendor = models.CharField(max_length=60, db_index=True)
    family = models.ForeignKey(ModelFamily, on_delete=models.PROTECT, related_name="versions")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.GENERAL)

    # Lifecycle (UTC calendar days). Status is derived from these, never stored.
    released_on = models.DateField()
    generally_available_on = models.DateField(
        null=True,
        blank=True,
        help_text="Leave empty: generally available at release (a preview stays a preview).",
    )
    retirement_announced_on = models.DateField(null=True, blank=True)
    retires_on = models.DateField(
        null=True, blank=True, db_index=True, help_text="Retired from 00:00 UTC on this day."
    )
    successor = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="predecessors"
    )
    successor_tier = models.ForeignKey(
        Tier,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The tier the successor is recommended on (e.g. Spark -> Sol on Ultrafast).",
    )

    context_window = models.PositiveIntegerField(help_text="Tokens.")
    input_modalities = models.JSONField(default=list)

    # Architecture figures for the simulation engine.
    total_params = models.BigIntegerField(validators=[MinValueValidator(1)])
    active_params_prefill = models.BigIntegerField(validators=[MinValueValidator(1)])
    active_params_decode = models.BigIntegerField(validators=[MinValueValidator(1)])
    layers = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    hidden_size = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    bytes_per_param = models.FloatField(validators=[MinValueValidator(0.1)])
    kv_bytes_per_token = models.PositiveIntegerField()
    architecture_is_estimate = models.BooleanField(default=True)

    class InFlight(models.TextChoices):
        FINISH = "finish", "Accepted jobs finish on it"
        REROUTE = "reroute", "Jobs not yet started move to the successor"

    in_flight_on_retirement = models.CharField(
        max_length=8,
        choices=InFlight.choices,
        default=InFlight.FINISH,
        help_text="On the retirement day: what happens to jobs accepted but not yet started.",
    )
    estimated_fields = models.JSONField(
        default=list, blank=True, help_text="Names of fields whose values are estimates."
    )
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(retires_on__isnull=True)
                | models.Q(retires_on__gte=models.F("released_on")),
                name="model_retires_after_release",
            ),
            models.CheckConstraint(
                condition=~models.Q(successor=models.F("id")), name="model_not_own_successor"
            ),
            models.CheckConstraint(
                condition=models.Q(active_params_prefill__lte=models.F("total_params"))
                & models.Q(active_params_decode__lte=models.F("total_params")),
                name="model_active_params_within_total",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def status(self) -> str:
        return model_status(self)


class Benchmark(models.Model):
    model = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="benchmarks")
    name = models.CharField(max_length=120)
    score = models.FloatField(help_text="Percent of tasks solved.")
    duration_minutes = models.FloatField(
        null=True, blank=True, help_text="Task duration at which the score was measured."
    )
    source = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["model", "name", "duration_minutes"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "name", "duration_minutes"],
                name="benchmark_unique_point",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        at = f" at {self.duration_minutes:g} min" if self.duration_minutes is not None else ""
        return f"{self.model.slug} {self.name}: {self.score:g}{at}"


class PublishedSpeed(models.Model):
    """A published output speed (tokens/s per stream): a range where the source gives one."""

    model = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="speeds")
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="+")
    tokens_per_second_low = models.FloatField()
    tokens_per_second_high = models.FloatField()
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model", "tier"], name="speed_unique_model_tier")
        ]

    def __str__(self) -> str:
        return f"{self.model.slug} {self.tier.slug}: {self.tokens_per_second_low:g}-{self.tokens_per_second_high:g} tok/s"


class Deployment(models.Model):
    """Model version x tier x pool: where a tier of a model runs."""

    model = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="deployments")
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="deployments")
    pool = models.ForeignKey(HardwarePool, on_delete=models.PROTECT, related_name="deployments")
    available_from = models.DateField(null=True, blank=True)

    class Meta:
        ordering = ["model", "tier__rank"]
        constraints = [
            models.UniqueConstraint(fields=["model", "tier"], name="deployment_unique_model_tier")
        ]

    def __str__(self) -> str:
        return f"{self.model.slug} / {self.tier.slug} on {self.pool.slug}"


class Price(models.Model):
    """Price per million tokens for a model on a tier (USD; 1 credit = 1 USD)."""

    model = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="prices")
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="prices")
    input_per_million = models.DecimalField(max_digits=12, decimal_places=4)
    output_per_million = models.DecimalField(max_digits=12, decimal_places=4)
    is_estimate = models.BooleanField(default=True)

    class Meta:
        ordering = ["model", "tier__rank"]
        constraints = [
            models.UniqueConstraint(fields=["model", "tier"], name="price_unique_model_tier"),
            models.CheckConstraint(
                condition=models.Q(input_per_million__gte=0) & models.Q(output_per_million__gte=0),
                name="price_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.slug} {self.tier.slug}: {self.input_per_million}/{self.output_per_million}"


class NoticePolicy(models.Model):
    """The least notice a kind of model gets before it retires (e.g. 6 months for a
    general model). Scheduling inside it needs an explicit override with a reason."""

    kind = models.CharField(max_length=16, choices=ModelVersion.Kind.choices, unique=True)
    minimum_days = models.PositiveIntegerField()
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["kind"]
        verbose_name_plural = "notice policies"

    def __str__(self) -> str:
        return f"{self.kind}: {self.minimum_days} days"


class LifecycleChange(models.Model):
    """Append-only history of every change to a lifecycle date or successor."""

    model = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="history")
    field = models.CharField(max_length=40)
    old_value = models.CharField(max_length=120, blank=True)
    new_value = models.CharField(max_length=120, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=120, help_text="Who or what made the change.")
    reason = models.TextField(blank=True)
    changed_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.model.slug}.{self.field}: {self.old_value!r} -> {self.new_value!r}"

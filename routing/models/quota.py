"""Quota packages with their reservations and append-only ledger.

Money rules (see routing/quota/): a package's balance columns (`spent`, `reserved`)
change only through conditional UPDATEs in routing/quota/ledger.py, each in the same
transaction as an append-only `LedgerEntry`; CheckConstraints make the database
itself refuse a negative remaining balance.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from catalog.models import ModelFamily, ModelVersion, Tier
from routing.models.accounts import Account, default_alert_thresholds

CREDIT = {"max_digits": 18, "decimal_places": 6}


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
    # Rate limits on the work this package pays for, across every replica
    # (routing.quota.ratelimits); blank: none beyond the account's.
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Jobs and completions it pays for, per minute."
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Input + output tokens of the work it pays for, per minute.",
    )
    alert_thresholds = models.JSONField(
        default=default_alert_thresholds,
        blank=True,
        help_text="Budget alerts: percents of the limit spent that are told once per "
        "period (a notice and a quota.threshold webhook); empty: none.",
    )
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

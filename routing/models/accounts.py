"""Accounts and their API keys (stored hashed)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from routing.core.limits import MAX_DEADLINE_SECONDS, MIN_DEADLINE_SECONDS
from routing.core.urls_safe import UnsafeURL, configured_check


def default_alert_thresholds() -> list[int]:
    """Budget alerts at 50, 80 and 100 % of a limit (routing.quota.alerts)."""
    return [50, 80, 100]


DEFAULT_TIER_CHOICES = [
    ("standard", "Standard"),
    ("flex", "Flex"),
    ("priority", "Priority"),
    ("ultrafast", "Ultrafast"),
    ("auto", "Auto (the cheapest tier meeting the default deadline)"),
]


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
    # Rate limits across every replica (routing.quota.ratelimits); blank: the
    # service's defaults (API_THROTTLE_RATE, API_TOKENS_PER_MINUTE).
    requests_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="API requests per minute; blank: the service default (API_THROTTLE_RATE).",
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Input + output tokens of accepted jobs and completions per minute; "
        "blank: the service default (API_TOKENS_PER_MINUTE).",
    )
    # What an OpenAI-shaped request that names no tier gets (routing.compat.defaults).
    default_tier = models.CharField(
        max_length=16,
        choices=DEFAULT_TIER_CHOICES,
        default="standard",
        help_text="The tier of a /v1 request that sends no service_tier (OpenAI's default "
        "is Standard); auto: the cheapest tier meeting the default deadline.",
    )
    default_deadline_seconds = models.FloatField(
        null=True,
        blank=True,
        validators=[
            MinValueValidator(MIN_DEADLINE_SECONDS),
            MaxValueValidator(MAX_DEADLINE_SECONDS),
        ],
        help_text="Simulated seconds: the deadline of a service_tier 'auto' request that "
        "sends none; blank: such a request is served on Standard.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean_fields(self, exclude=None):
        """The webhook URL must be one the service may call (routing.core.urls_safe);
        checked again at each delivery."""
        errors = {}
        try:
            super().clean_fields(exclude=exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if (
            self.webhook_url
            and "webhook_url" not in errors
            and "webhook_url" not in (exclude or ())
        ):
            try:
                configured_check(self.webhook_url)
            except UnsafeURL as exc:
                errors["webhook_url"] = [ValidationError(str(exc), code="unsafe-url")]
        if errors:
            raise ValidationError(errors)


class ApiKey(models.Model):
    """A bearer key. Only its SHA-256 is stored; the key is shown once, at creation.
    Its scopes (issue 27) are checked by routing.accounts.scopes."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Admin (may manage the account's keys)"
        MEMBER = "member", "Member"

    class Period(models.TextChoices):
        DAY = "day", "Day"
        WEEK = "week", "ISO week"
        MONTH = "month", "Calendar month"

    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=120, default="default")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from then on (a rotated key's overlap ends)."
    )
    allowed_models = models.JSONField(
        default=list, blank=True, help_text="Model ids or aliases it may use; empty: all."
    )
    allowed_tiers = models.JSONField(
        default=list,
        blank=True,
        help_text="Tiers it may ask for, and the router may choose among; empty: all.",
    )
    fallbacks = models.JSONField(
        default=list,
        blank=True,
        help_text="Models tried in order after the requested one (retired, out of quota, "
        "rate-limited, no tier meets the deadline) when a request names no `models` list; "
        "at most 5, each one the key may use.",
    )
    read_only = models.BooleanField(default=False, help_text="GET only: no jobs, files, batches.")
    allow_batches = models.BooleanField(default=True, help_text="May create batches.")
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    spend_limit = models.DecimalField(
        max_digits=18,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Credits this key may spend per spend_period; blank: no cap of its own.",
    )
    spend_period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTH)
    alert_thresholds = models.JSONField(
        default=default_alert_thresholds,
        blank=True,
        help_text="Budget alerts: percents of spend_limit taken in a spend_period, each "
        "told once per period; empty: none.",
    )
    rotated_to = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["account", "-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.account.name}, {self.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

"""The API's request and response shapes, declared for validation and for the OpenAPI
schema. Responses are built as plain dicts (shapes.py, file_json, notice_json); the
serializers here document them."""

from __future__ import annotations

import functools
from decimal import Decimal

from django.core.validators import RegexValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from routing.api.validation import PlainValidator, route_request_problems
from routing.batches.errors import BatchError
from routing.batches.params import ENDPOINTS, WINDOW_PATTERN, check_metadata
from routing.core.formats import cut
from routing.core.limits import (
    MAX_DEADLINE_SECONDS,
    MAX_PROMPT_CHARS,
    MAX_TASK_TOKENS,
    MAX_TOOL_SECONDS,
    MAX_TURNS,
    MIN_DEADLINE_SECONDS,
    TIER_ALIASES,
    TIERS,
    tier_word,
)
from routing.models import Batch, File, Notice, QuotaPackage
from routing.retirement.policies import package_retirements


class StrictCharField(serializers.CharField):
    """A string as sent (a number is refused, not turned into text)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """An integer as sent: a JSON number without a fraction (2000 or 2000.0). A string
    ("2000") or true/false is refused, not read as a number (DRF would read both): the
    schema says integer, and OpenAI's API refuses them too."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A number as sent (a string such as "3.5", or true/false, is refused)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false as sent (DRF would also read 0, 1, "yes", "on"...)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


# A credit amount a client sends: a JSON number or a decimal string, at most 12 digits
# before the point and 6 after (DRF reads both; "" or "." is no amount).
@extend_schema_field(
    {
        "anyOf": [
            {"type": "number", "minimum": 0, "maximum": 999999999999, "multipleOf": 0.000001},
            {"type": "string", "pattern": r"^[0-9]{1,12}(\.[0-9]{0,6})?$"},
        ],
        "nullable": True,
    }
)
class CreditsField(serializers.DecimalField):
    def __init__(self, **kwargs):
        super().__init__(max_digits=18, decimal_places=6, min_value=Decimal(0), **kwargs)

    def validate_empty_values(self, data):
        if data == "":  # no number (DRF would read it as null where null is allowed)
            self.fail("invalid")
        return super().validate_empty_values(data)


# A tier word (routing.core.limits.tier_word reads it, case-insensitive).
@extend_schema_field({"type": "string", "enum": [*TIERS, *TIER_ALIASES], "nullable": True})
class TierWordField(serializers.CharField):
    pass


class RouteRequestSerializer(serializers.Serializer):
    """The router's input; the jobs and batch APIs reuse these fields."""

    model = serializers.CharField(max_length=80, help_text="Slug, family alias (`sol`) or `auto`.")
    input_tokens = StrictIntegerField(min_value=1, max_value=MAX_TASK_TOKENS)
    output_tokens = StrictIntegerField(
        min_value=1,
        max_value=MAX_TASK_TOKENS,
        help_text=f"At least `turns`; input_tokens + output_tokens at most {MAX_TASK_TOKENS:,}.",
    )
    turns = StrictIntegerField(min_value=1, max_value=MAX_TURNS, default=1)
    tool_seconds = StrictFloatField(min_value=0, max_value=MAX_TOOL_SECONDS, default=0.0)
    deadline_seconds = StrictFloatField(
        min_value=MIN_DEADLINE_SECONDS,
        max_value=MAX_DEADLINE_SECONDS,
        help_text="Seconds from now; must be > 0.",
    )
    max_cost = CreditsField(required=False, allow_null=True)
    tier = TierWordField(
        required=False,
        allow_null=True,
        help_text="Force a tier: flex, standard (default), priority (fast), ultrafast; auto "
        "(case-insensitive).",
    )
    task = serializers.CharField(
        max_length=80,
        required=False,
        allow_null=True,
        help_text="Task class; required with model `auto`.",
    )

    def validate_tier(self, value):
        try:
            return tier_word(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs):
        problems = route_request_problems(attrs)  # one rule for this and the plain path
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class TimingsSerializer(serializers.Serializer):
    """Timings of a task in simulated seconds; each number to 6 significant digits, no
    time below 0."""

    queue_seconds = serializers.FloatField()
    ttft_seconds = serializers.FloatField()
    generation_seconds = serializers.FloatField()
    transport_seconds = serializers.FloatField()
    tool_seconds = serializers.FloatField()
    total_seconds = serializers.FloatField()
    tokens_per_second = serializers.FloatField()
    run_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="The run without any wait. Predicted: the typical run (the promise, "
        "total_seconds, is the P90 of wait + run); simulated: this job's run.",
    )


class PredictionSerializer(TimingsSerializer):
    load = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="The pool's measured utilisation (0 to 1) the prediction was made at; null: "
        "none measured (the tier's published speed).",
    )
    wafers = serializers.IntegerField(allow_null=True)
    stream_capacity = serializers.IntegerField(help_text="Concurrent streams of the pool.")
    saturated = serializers.BooleanField()


class PackageRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    independent = serializers.BooleanField()


class CandidateSerializer(serializers.Serializer):
    model = serializers.CharField()
    tier = serializers.CharField()
    pool = serializers.CharField()
    device = serializers.CharField()
    pool_utilisation = serializers.FloatField(source="load")
    predicted = PredictionSerializer(source="prediction", allow_null=True)
    cost = serializers.DecimalField(max_digits=18, decimal_places=6)
    package = PackageRefSerializer(allow_null=True)
    success_rate = serializers.FloatField(allow_null=True)
    expected_seconds = serializers.FloatField(allow_null=True)
    expected_cost = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    meets_deadline = serializers.BooleanField()
    eligible = serializers.BooleanField()
    chosen = serializers.BooleanField()
    reason = serializers.CharField()


class QuoteSerializer(serializers.Serializer):
    object = serializers.CharField(default="quote")
    model = serializers.CharField(help_text="The model asked for.")
    served_model = serializers.CharField(help_text="The model that would run.")
    migrated_from = serializers.CharField(allow_null=True)
    recommended_tier = serializers.CharField(allow_null=True)
    tier = serializers.CharField(help_text="The chosen tier (also `service_tier`).")
    service_tier = serializers.CharField()
    pool = serializers.CharField()
    deadline_seconds = serializers.FloatField()
    predicted = PredictionSerializer()
    cost = serializers.DecimalField(max_digits=18, decimal_places=6)
    package = PackageRefSerializer()
    lifecycle = serializers.DictField()
    candidates = CandidateSerializer(many=True)


class RetirementPolicySerializer(serializers.Serializer):
    policy = serializers.ChoiceField(choices=QuotaPackage.OnRetirement.choices)
    migrate_tier = serializers.CharField(allow_null=True)
    conversion = serializers.CharField()


class PackageRetirementSerializer(serializers.Serializer):
    """A tied model's retirement and what it does (or did) to the package."""

    model = serializers.CharField()
    status = serializers.CharField()
    retires_on = serializers.DateField(allow_null=True)
    successor = serializers.CharField(allow_null=True)
    policy = serializers.CharField()
    migrate_tier = serializers.CharField(allow_null=True)
    conversion = serializers.CharField()
    applied_at = serializers.DateTimeField(allow_null=True)
    detail = serializers.CharField(allow_blank=True)


class QuotaPackageSerializer(serializers.ModelSerializer):
    family = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    models = serializers.SlugRelatedField(
        source="model_versions", slug_field="slug", many=True, read_only=True
    )
    tiers = serializers.SlugRelatedField(slug_field="slug", many=True, read_only=True)
    remaining = serializers.DecimalField(max_digits=18, decimal_places=6, read_only=True)
    on_retirement = serializers.SerializerMethodField()
    retirements = serializers.SerializerMethodField()

    class Meta:
        model = QuotaPackage
        fields = [
            "id",
            "name",
            "scope",
            "family",
            "models",
            "tiers",
            "period",
            "limit",
            "spent",
            "reserved",
            "remaining",
            "period_start",
            "next_reset_at",
            "order",
            "independent",
            "valid_from",
            "valid_until",
            "on_retirement",
            "retirements",
        ]

    @extend_schema_field(RetirementPolicySerializer)
    def get_on_retirement(self, obj) -> dict:
        return {
            "policy": obj.on_retirement,
            "migrate_tier": obj.migrate_tier.slug if obj.migrate_tier_id else None,
            "conversion": str(obj.conversion),
        }

    @extend_schema_field(PackageRetirementSerializer(many=True))
    def get_retirements(self, obj) -> list[dict]:
        return PackageRetirementSerializer(
            package_retirements(obj, self.context.get("now") or timezone.now()), many=True
        ).data


class QuotaListSerializer(serializers.Serializer):
    """GET /api/v1/quota: the account's packages in payment order (one list, not paged)."""

    object = serializers.ChoiceField(choices=["list"])
    data = QuotaPackageSerializer(many=True)


# Batch metadata: at most 16 keys (routing.batches.params.check_metadata). The keys' 64
# characters need `propertyNames`, which OpenAPI 3.0 does not have (the description says).
@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": 512},
        "maxProperties": 16,
        "nullable": True,
    }
)
class MetadataField(serializers.DictField):
    pass


class BoundedMetadataField(MetadataField):
    """Metadata checked by OpenAI's rule (routing.batches.params.check_metadata) as it
    is read."""

    def __init__(self, **kwargs):
        kwargs.setdefault("child", serializers.CharField(allow_blank=True, max_length=512))
        kwargs.setdefault(
            "help_text", "At most 16 keys (64 characters each) with string values (512)."
        )
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        try:
            check_metadata(data)  # as sent: a number is not a string
        except BatchError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return super().to_internal_value(data)


class JobRequestSerializer(RouteRequestSerializer):
    """The quote's fields plus an optional prompt."""

    prompt = serializers.CharField(required=False, allow_blank=True, max_length=MAX_PROMPT_CHARS)
    user = StrictCharField(
        required=False,
        max_length=256,
        help_text="Your end user (OpenAI's `user`): recorded on the job, for usage by user.",
    )
    metadata = BoundedMetadataField(required=False)


class JobPredictedSerializer(TimingsSerializer):
    start_at = serializers.DateTimeField()
    completion_at = serializers.DateTimeField()
    cost = serializers.DecimalField(max_digits=18, decimal_places=6)


class JobOutputSerializer(serializers.Serializer):
    simulated = serializers.BooleanField()
    tokens = serializers.IntegerField(help_text="Words of the whole answer (one per token).")
    truncated = serializers.BooleanField(
        help_text="True when `text` is an excerpt (its first words); `?output=full` "
        "returns the whole text."
    )
    text = serializers.CharField(
        allow_blank=True,
        help_text="The simulated answer: its first 200 words by default, all of it with "
        "`?output=full`.",
    )
    full_url = serializers.URLField(
        required=False, help_text="Where the whole text is (present when `truncated`)."
    )


class JobSerializer(serializers.Serializer):
    """Documents the job object (the API builds it as a plain dict of these fields)."""

    id = serializers.UUIDField()
    object = serializers.CharField(default="job")
    status = serializers.ChoiceField(
        choices=["queued", "running", "succeeded", "failed", "cancelled"]
    )
    model = serializers.CharField(help_text="The model asked for.")
    served_model = serializers.CharField()
    requested_tier = serializers.CharField(allow_null=True)
    tier = serializers.CharField(help_text="The tier served (billing follows it).")
    service_tier = serializers.CharField()
    pool = serializers.CharField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    delivered_tokens = serializers.IntegerField(
        allow_null=True,
        help_text="A streamed answer (/v1/ chat with stream: true): the output tokens its "
        "stream has delivered, what an early end (cancel, client gone) is charged for; "
        "null for any other job.",
    )
    turns = serializers.IntegerField()
    tool_seconds = serializers.FloatField()
    deadline_seconds = serializers.FloatField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finishes_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    predicted = JobPredictedSerializer()
    simulated = TimingsSerializer(allow_null=True)
    meets_deadline = serializers.BooleanField(
        allow_null=True,
        help_text="Whether the simulated run (known once the job is claimed) ends within "
        "the deadline; null while queued.",
    )
    promised_seconds = serializers.FloatField(
        allow_null=True,
        help_text="The P90 completion the router promised at acceptance, in simulated "
        "seconds from submission (9 jobs in 10 finish within it).",
    )
    completion_seconds = serializers.FloatField(
        allow_null=True,
        help_text="When the job completed, in simulated seconds from submission (set when "
        "it succeeds).",
    )
    deadline_met = serializers.BooleanField(
        allow_null=True,
        help_text="Set when the job succeeds: completion_seconds <= deadline_seconds. "
        "Filter the list with ?deadline_met=false.",
    )
    late_by_seconds = serializers.FloatField(
        allow_null=True, help_text="How late the job completed (0 when it met its deadline)."
    )
    usage = serializers.DictField(allow_null=True)
    cost = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    package = PackageRefSerializer()
    time_scale = serializers.FloatField(help_text="Simulated seconds per wall second.")
    error = serializers.CharField(allow_blank=True)
    api_key_id = serializers.IntegerField(
        allow_null=True, help_text="The key that sent the job (GET /api/v1/keys)."
    )
    user = serializers.CharField(allow_null=True, help_text="Your end user, as sent.")
    metadata = serializers.DictField(child=serializers.CharField())
    output = JobOutputSerializer(required=False, help_text="Detail view of a finished job.")


class NoticeSerializer(serializers.Serializer):
    """Documents a notice (the API and the account's webhook send the same object)."""

    id = serializers.UUIDField()
    object = serializers.CharField(default="notice")
    kind = serializers.CharField(
        help_text="retirement: a model the account uses retires (model, retires_on, "
        "successor...); quota.threshold: a budget threshold crossed (scope, threshold, "
        "spent, limit...).",
    )
    model = serializers.CharField(required=False)
    retires_on = serializers.DateField(required=False)
    announced_on = serializers.DateField(required=False)
    successor = serializers.CharField(allow_null=True, required=False)
    successor_tier = serializers.CharField(allow_null=True, required=False)
    message = serializers.CharField()
    your_usage = serializers.DictField(required=False)
    quota = serializers.ListField(child=serializers.DictField(), required=False)
    scope = serializers.ChoiceField(choices=["package", "key"], required=False)
    package = serializers.DictField(required=False, help_text="scope package: id, name.")
    key = serializers.DictField(required=False, help_text="scope key: id, name.")
    threshold = serializers.IntegerField(required=False, help_text="Percent of the limit.")
    spent = serializers.CharField(required=False)
    limit = serializers.CharField(required=False)
    period_start = serializers.DateTimeField(required=False)
    period_end = serializers.DateTimeField(required=False, allow_null=True)
    created_at = serializers.DateTimeField()
    delivery = serializers.ChoiceField(choices=Notice.Delivery.values)


class FileSerializer(serializers.Serializer):
    """Documents a file."""

    id = serializers.CharField()
    object = serializers.CharField(default="file")
    purpose = serializers.ChoiceField(choices=File.Purpose.values)
    filename = serializers.CharField()
    bytes = serializers.IntegerField()
    lines = serializers.IntegerField()
    sha256 = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(
        allow_null=True,
        help_text="A batch's output or error file: when its content is deleted "
        "(then GET .../content is a 410 `file-expired`); null: kept.",
    )


# The upload reads `purpose` itself (routing.batches.files.file_create): anything but
# `batch` is a 400 invalid-purpose, which this enum says (UploadPurposeEnum in
# ENUM_NAME_OVERRIDES: the File's PurposeEnum keeps its name).
@extend_schema_field({"type": "string", "enum": [File.Purpose.BATCH]})
class UploadPurposeField(serializers.CharField):
    pass


class FileUploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="JSONL, one request a line; at most 200 MB, 50,000 lines."
    )
    purpose = UploadPurposeField(help_text="`batch` (the only purpose clients upload).")


# A batch's completion window: the schema's pattern is the very check the field makes
# (RegexValidator, on the string as sent: trimming first would let a string the schema
# calls too long through), then routing.batches.params.parse_window reads it.
@extend_schema_field({"type": "string", "minLength": 1, "maxLength": 16, "pattern": WINDOW_PATTERN})
class WindowField(serializers.CharField):
    def __init__(self, **kwargs):
        message = "a whole number of s, m, h or d from 1m to 7d, like 30m, 8h, 24h or 2d."
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("validators", [RegexValidator(WINDOW_PATTERN, message)])
        super().__init__(**kwargs)


class BoundedChoiceField(serializers.ChoiceField):
    """A choice whose refusal echoes at most ECHO_MAX characters of what was sent."""

    def to_internal_value(self, data):
        if data == "" and self.allow_blank:
            return ""
        try:
            return self.choice_strings_to_values[str(data)]
        except KeyError:
            self.fail("invalid_choice", input=cut(data))


class BatchCreateSerializer(serializers.Serializer):
    input_file_id = serializers.CharField(max_length=40)
    endpoint = BoundedChoiceField(
        choices=list(ENDPOINTS),
        default="/v1/jobs",
        error_messages={
            "invalid_choice": f'"{{input}}" is not batchable; use one of {", ".join(ENDPOINTS)}.'
        },
    )
    completion_window = WindowField(
        max_length=16,
        default="24h",
        help_text="30m, 8h, 24h (default), 2d: a whole number of s, m, h or d from 1m to 7d.",
    )
    start_at = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="Earliest start: `now` (default) or an ISO 8601 time, at most 31 days ahead.",
    )
    metadata = MetadataField(
        child=serializers.CharField(allow_blank=True, max_length=512),
        required=False,
        allow_null=True,
        help_text="At most 16 keys (64 characters each) with string values (512).",
    )


class RequestCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    completed = serializers.IntegerField()
    failed = serializers.IntegerField()


class BatchDeadlineSerializer(serializers.Serializer):
    lines_in_time = serializers.IntegerField(
        help_text="Lines completed within the completion window (a line's deadline)."
    )
    share_in_time = serializers.FloatField(
        allow_null=True, help_text="lines_in_time / request_counts.total."
    )
    window_met = serializers.BooleanField(
        allow_null=True,
        help_text="Whether the whole batch completed within its window (null while it runs).",
    )


class BatchSerializer(serializers.Serializer):
    """Documents a batch (built by batch_json)."""

    id = serializers.UUIDField()
    object = serializers.CharField(default="batch")
    endpoint = serializers.CharField()
    input_file_id = serializers.CharField(allow_null=True, help_text="null once deleted")
    completion_window = serializers.CharField()
    window_seconds = serializers.FloatField()
    status = serializers.ChoiceField(
        choices=["validating", "scheduled", *Batch.Status.values[1:]],
        help_text="`scheduled`: validated, waiting for its `start_at` (`scheduled_start_at`).",
    )
    scheduled_start_at = serializers.DateTimeField(
        allow_null=True, help_text="When a `scheduled` batch starts; null otherwise."
    )
    output_file_id = serializers.CharField(allow_null=True)
    error_file_id = serializers.CharField(allow_null=True)
    errors = serializers.DictField(allow_null=True)
    created_at = serializers.DateTimeField()
    start_at = serializers.DateTimeField()
    validated_at = serializers.DateTimeField(allow_null=True)
    in_progress_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField()
    finalizing_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    failed_at = serializers.DateTimeField(allow_null=True)
    expired_at = serializers.DateTimeField(allow_null=True)
    cancelling_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    request_counts = RequestCountsSerializer()
    metadata = serializers.DictField()
    plan = serializers.DictField(
        allow_null=True, help_text="Tiers, streams, predicted makespan and cost."
    )
    predicted_cost = serializers.CharField(allow_null=True)
    predicted_finish_at = serializers.DateTimeField(allow_null=True)
    cost = serializers.CharField(help_text="Charged so far (completed requests).")
    schedule = serializers.CharField(allow_null=True)
    retry_of = serializers.UUIDField(allow_null=True)
    deadline = BatchDeadlineSerializer()
    time_scale = serializers.FloatField()


# The plain-Python validators of the hot endpoints (routing.api.validation), built from
# these serializers' declarations and their own hooks (validate_tier, validate).
_ROUTE_REQUEST = {"cross_field": route_request_problems, "field_hooks": {"tier": tier_word}}


@functools.cache
def route_request_validator() -> PlainValidator:
    """The quote's fields (RouteRequestSerializer)."""
    return PlainValidator(RouteRequestSerializer, **_ROUTE_REQUEST)


@functools.cache
def job_request_validator() -> PlainValidator:
    """The job's: the quote's fields plus the prompt (JobRequestSerializer)."""
    return PlainValidator(JobRequestSerializer, **_ROUTE_REQUEST)

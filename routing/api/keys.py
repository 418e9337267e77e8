"""Self-service keys (issue 27): POST /keys (201, the `key` shown once), GET /keys,
GET /keys/{id}, POST /keys/{id}/rotate (an overlap window), DELETE /keys/{id} (revoke).
Only an admin key of the account may call them (403 `key-not-admin`); another
account's key id is a 404 like an id that does not exist. Services:
routing.accounts.manage; scopes: routing.accounts.scopes."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from httpedge.problems import Problem
from routing.accounts.manage import (
    MAX_OVERLAP_SECONDS,
    ROTATE_OVERLAP_SECONDS,
    key_issue,
    key_revoke,
    key_rotate,
)
from routing.accounts.scopes import MAX_FALLBACKS, check_manage_keys, fallbacks_problem
from routing.api.base import ClientAPIView, NewestFirstPagination, ascii_id, object_body
from routing.api.errors import PROBLEM_RESPONSES, domain_problems
from routing.api.parsers import BoundedJSONParser
from routing.api.serializers import (
    CreditsField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
)
from routing.api.shapes import money
from routing.core.formats import cut, iso
from routing.models import ApiKey
from routing.models.accounts import default_alert_thresholds
from routing.quota.alerts import MAX_THRESHOLD
from simengine import TIERS


class KeyCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=120, default="default")
    role = serializers.ChoiceField(choices=ApiKey.Role.values, default="member")
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    models = serializers.ListField(
        child=StrictCharField(max_length=80, trim_whitespace=False),
        max_length=50,
        required=False,
        default=list,
    )
    tiers = serializers.ListField(
        child=serializers.ChoiceField(choices=list(TIERS)),
        max_length=4,
        required=False,
        default=list,
    )
    read_only = StrictBooleanField(default=False)
    batches = StrictBooleanField(default=True)
    rpm = StrictIntegerField(min_value=1, max_value=10_000_000, required=False, allow_null=True)
    tpm = StrictIntegerField(min_value=1, max_value=10_000_000_000, required=False, allow_null=True)
    spend_limit = CreditsField(required=False, allow_null=True)
    spend_period = serializers.ChoiceField(choices=ApiKey.Period.values, default="month")
    alert_thresholds = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=MAX_THRESHOLD),
        max_length=10,
        required=False,
        help_text="Budget alerts: percents of spend_limit told once per spend_period "
        "(a notice and a quota.threshold webhook); default 50, 80, 100; empty: none.",
    )
    fallbacks = serializers.ListField(
        child=StrictCharField(max_length=80, trim_whitespace=False),
        max_length=MAX_FALLBACKS,
        required=False,
        default=list,
        help_text="Models tried in order after the requested one when a request names no "
        "`models` list (retired, out of quota, rate-limited, no tier meets the deadline); "
        "each one the key may use (`models`) and the catalog knows.",
    )

    def validate(self, attrs):
        why = fallbacks_problem(attrs.get("models", []), attrs.get("fallbacks", []))
        if why:
            raise serializers.ValidationError({"fallbacks": [why]})
        return attrs


class KeyRotateSerializer(serializers.Serializer):
    overlap_seconds = StrictIntegerField(
        min_value=0, max_value=MAX_OVERLAP_SECONDS, default=ROTATE_OVERLAP_SECONDS
    )


class KeySerializer(serializers.Serializer):
    """Documents a key (built by key_json); `key` only in the answer that made it."""

    id = serializers.IntegerField()
    object = serializers.CharField(default="api_key")
    name = serializers.CharField()
    prefix = serializers.CharField()
    role = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    models = serializers.ListField(child=serializers.CharField())
    tiers = serializers.ListField(child=serializers.CharField())
    read_only = serializers.BooleanField()
    batches = serializers.BooleanField()
    rpm = serializers.IntegerField(allow_null=True)
    tpm = serializers.IntegerField(allow_null=True)
    spend_limit = serializers.CharField(allow_null=True)
    spend_period = serializers.CharField()
    alert_thresholds = serializers.ListField(child=serializers.IntegerField())
    rotated_to = serializers.IntegerField(allow_null=True)
    fallbacks = serializers.ListField(child=serializers.CharField())
    key = serializers.CharField(required=False, help_text="The secret, shown once.")


def key_json(k: ApiKey, raw: str | None = None) -> dict:
    body = {
        "id": k.pk,
        "object": "api_key",
        "name": k.name,
        "prefix": k.prefix,
        "role": k.role,
        "created_at": iso(k.created_at),
        "last_used_at": iso(k.last_used_at),
        "expires_at": iso(k.expires_at),
        "revoked_at": iso(k.revoked_at),
        "models": list(k.allowed_models or []),
        "tiers": list(k.allowed_tiers or []),
        "read_only": k.read_only,
        "batches": k.allow_batches,
        "rpm": k.requests_per_minute,
        "tpm": k.tokens_per_minute,
        "spend_limit": money(k.spend_limit),
        "spend_period": k.spend_period,
        "alert_thresholds": list(k.alert_thresholds or []),
        "rotated_to": k.rotated_to_id,
        "fallbacks": list(k.fallbacks or []),
    }
    if raw is not None:
        body["key"] = raw
    return body


class KeyAdminView(ClientAPIView):
    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        with domain_problems(request):
            check_manage_keys(request.user.key)

    def own_key(self, key_id: str) -> ApiKey:
        # A revoked key is gone for clients (as OpenAI's deleted keys are; the admin
        # keeps the record).
        pk = ascii_id(key_id)
        k = (
            ApiKey.objects.filter(account=self.account, pk=pk, revoked_at=None).first()
            if pk is not None
            else None
        )
        if k is None:
            raise Problem(
                status_code=404,
                slug="key-not-found",
                title="Unknown key",
                detail=f"No key {cut(key_id)}.",
            )
        return k


class KeyListView(KeyAdminView, generics.GenericAPIView):
    """Make a key (POST; the secret `key` is in this answer only) or list the account's
    keys (GET, newest first). An admin key only."""

    parser_classes = [BoundedJSONParser]
    pagination_class = NewestFirstPagination

    @extend_schema(request=KeyCreateSerializer, responses={201: KeySerializer, **PROBLEM_RESPONSES})
    def post(self, request):
        ser = KeyCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        key, raw = key_issue(
            account=self.account,
            name=d["name"],
            role=d["role"],
            expires_at=d.get("expires_at"),
            allowed_models=d["models"],
            allowed_tiers=d["tiers"],
            read_only=d["read_only"],
            allow_batches=d["batches"],
            requests_per_minute=d.get("rpm"),
            tokens_per_minute=d.get("tpm"),
            spend_limit=d.get("spend_limit"),
            spend_period=d["spend_period"],
            alert_thresholds=sorted(set(d.get("alert_thresholds", default_alert_thresholds()))),
            fallbacks=d["fallbacks"],
        )
        return Response(key_json(key, raw), status=status.HTTP_201_CREATED)

    @extend_schema(responses=KeySerializer(many=True))
    def get(self, request):
        page = self.paginate_queryset(ApiKey.objects.filter(account=self.account, revoked_at=None))
        return self.get_paginated_response([key_json(k) for k in page])


class KeyDetailView(KeyAdminView):
    """One key (GET) or revoke it (DELETE: refused at once here, within a second or
    two on every replica with a shared cache, API_KEY_CACHE_SECONDS at the latest)."""

    @extend_schema(responses={200: KeySerializer, **PROBLEM_RESPONSES})
    def get(self, request, key_id):
        return Response(key_json(self.own_key(key_id)))

    @extend_schema(responses={200: KeySerializer, **PROBLEM_RESPONSES})
    def delete(self, request, key_id):
        return Response(key_json(key_revoke(key=self.own_key(key_id))))


class KeyRotateView(KeyAdminView):
    """A new key with the same scopes (201, its `key` shown once); the old one keeps
    working for `overlap_seconds` (default 3600; 0: refused at once)."""

    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=KeyRotateSerializer,
        responses={
            201: KeySerializer,
            **PROBLEM_RESPONSES,
        },
    )
    def post(self, request, key_id):
        old = self.own_key(key_id)
        ser = KeyRotateSerializer(data=object_body(request))
        ser.is_valid(raise_exception=True)
        new, raw = key_rotate(key=old, overlap_seconds=ser.validated_data["overlap_seconds"])
        return Response(key_json(new, raw), status=status.HTTP_201_CREATED)

"""Webhook endpoints, self-service (issue 27): POST /webhooks (201, the signing `secret`
shown once), GET /webhooks, GET/PATCH/DELETE /webhooks/{id},
POST /webhooks/{id}/rotate-secret (201, the new secret shown once; the old one keeps
signing for `overlap_seconds`), GET /webhooks/{id}/deliveries (the delivery log),
POST /webhooks/{id}/test (a signed `webhook.test` event to this endpoint). An admin key
of the account only (403 `key-not-admin`), as for keys; another account's id is a 404.
Services: routing.webhooks."""

from __future__ import annotations

import uuid

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from httpedge.problems import Problem
from routing.api.base import NewestFirstPagination, ascii_id, object_body
from routing.api.errors import PROBLEM_RESPONSES
from routing.api.keys import KeyAdminView
from routing.api.parsers import BoundedJSONParser
from routing.api.serializers import StrictBooleanField, StrictCharField, StrictIntegerField
from routing.core.formats import cut, iso
from routing.models import WebhookDelivery, WebhookEndpoint
from routing.models.webhooks import EVENT_TYPES, TEST_EVENT
from routing.webhooks.endpoints import (
    MAX_OVERLAP_SECONDS,
    EndpointRefused,
    endpoint_create,
    endpoint_rotate,
    endpoint_update,
)
from routing.webhooks.events import event_emit

URL_HELP = (
    "https (http only where the operator allows it), to a public address: private, "
    "loopback and link-local destinations are refused (400 unsafe-url)."
)


def _url_field(**kwargs):
    return StrictCharField(
        max_length=2000,
        help_text=URL_HELP,
        **kwargs,
    )


def _types_field(**kwargs):
    return serializers.ListField(
        child=serializers.ChoiceField(choices=list(EVENT_TYPES)),
        max_length=len(EVENT_TYPES),
        help_text="The event types it gets; empty: all.",
        **kwargs,
    )


class EndpointCreateSerializer(serializers.Serializer):
    url = _url_field()
    description = StrictCharField(max_length=200, required=False, default="", allow_blank=True)
    enabled = StrictBooleanField(default=True)
    event_types = _types_field(required=False, default=list)


class EndpointUpdateSerializer(serializers.Serializer):
    url = _url_field(required=False)
    description = StrictCharField(max_length=200, required=False, allow_blank=True)
    enabled = StrictBooleanField(required=False)
    event_types = _types_field(required=False)


class RotateSecretSerializer(serializers.Serializer):
    overlap_seconds = StrictIntegerField(
        min_value=0,
        max_value=MAX_OVERLAP_SECONDS,
        required=False,
        help_text="How long the old secret keeps signing next to the new one (default: "
        "the service's WEBHOOK_SECRET_OVERLAP_SECONDS, 24 h); 0: dropped at once.",
    )


class EndpointSerializer(serializers.Serializer):
    """Documents an endpoint (built by endpoint_json); `secret` only in the answer that
    made or rotated it."""

    id = serializers.IntegerField()
    object = serializers.CharField(default="webhook_endpoint")
    url = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    event_types = serializers.ListField(child=serializers.CharField())
    previous_secret_expires_at = serializers.DateTimeField(
        allow_null=True, help_text="Until then the previous secret signs too."
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    secret = serializers.CharField(required=False, help_text="The signing secret, shown once.")


class DeliverySerializer(serializers.Serializer):
    """Documents a delivery (built by delivery_json)."""

    id = serializers.IntegerField()
    object = serializers.CharField(default="webhook_delivery")
    event_id = serializers.CharField(help_text="The `webhook-id` header of each attempt.")
    event_type = serializers.CharField()
    state = serializers.ChoiceField(choices=WebhookDelivery.State.values)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    response_ms = serializers.IntegerField(allow_null=True)
    delivered_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    payload = serializers.DictField(help_text="The body POSTed.")


def endpoint_json(e: WebhookEndpoint, *, secret: bool = False) -> dict:
    body = {
        "id": e.pk,
        "object": "webhook_endpoint",
        "url": e.url,
        "description": e.description,
        "enabled": e.enabled,
        "event_types": list(e.event_types or []),
        "previous_secret_expires_at": iso(e.previous_secret_expires_at)
        if e.previous_secret
        else None,
        "created_at": iso(e.created_at),
        "updated_at": iso(e.updated_at),
    }
    if secret:
        body["secret"] = e.secret
    return body


def delivery_json(d: WebhookDelivery) -> dict:
    return {
        "id": d.pk,
        "object": "webhook_delivery",
        "event_id": d.event_id,
        "event_type": d.event.type,
        "state": d.state,
        "attempts": d.attempts,
        "next_attempt_at": iso(d.next_attempt_at),
        "last_attempt_at": iso(d.last_attempt_at),
        "last_status_code": d.last_status_code,
        "last_error": d.last_error,
        "response_ms": d.response_ms,
        "delivered_at": iso(d.delivered_at),
        "created_at": iso(d.created_at),
        "payload": d.event.payload(),
    }


def endpoint_refused(exc: EndpointRefused) -> Problem:
    codes = {"too-many-endpoints": (409, "Too many endpoints")}
    status_code, title = codes.get(exc.code, (400, "Invalid request"))
    return Problem(status_code=status_code, slug=exc.code, title=title, detail=str(exc))


class WebhookAdminView(KeyAdminView):
    def own_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        pk = ascii_id(endpoint_id)
        e = (
            WebhookEndpoint.objects.filter(account=self.account, pk=pk).first()
            if pk is not None
            else None
        )
        if e is None:
            raise Problem(
                status_code=404,
                slug="webhook-not-found",
                title="Unknown webhook endpoint",
                detail=f"No webhook endpoint {cut(endpoint_id)}.",
            )
        return e


class WebhookListView(WebhookAdminView, generics.GenericAPIView):
    """Make a webhook endpoint (POST; the signing `secret` is in this answer only) or
    list the account's endpoints (GET, newest first). An admin key only."""

    parser_classes = [BoundedJSONParser]
    pagination_class = NewestFirstPagination

    @extend_schema(
        request=EndpointCreateSerializer,
        responses={
            201: EndpointSerializer,
            **PROBLEM_RESPONSES,
            409: OpenApiResponse(description="Too many endpoints (problem+json)"),
        },
    )
    def post(self, request):
        ser = EndpointCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        try:
            e = endpoint_create(
                account=self.account,
                url=d["url"],
                description=d["description"],
                event_types=d["event_types"],
                enabled=d["enabled"],
            )
        except EndpointRefused as exc:
            raise endpoint_refused(exc) from exc
        return Response(endpoint_json(e, secret=True), status=status.HTTP_201_CREATED)

    @extend_schema(responses=EndpointSerializer(many=True))
    def get(self, request):
        page = self.paginate_queryset(WebhookEndpoint.objects.filter(account=self.account))
        return self.get_paginated_response([endpoint_json(e) for e in page])


class WebhookDetailView(WebhookAdminView):
    """One endpoint (GET), change it (PATCH: the fields given), or delete it (DELETE:
    204; its deliveries go with it)."""

    parser_classes = [BoundedJSONParser]

    @extend_schema(responses={200: EndpointSerializer, **PROBLEM_RESPONSES})
    def get(self, request, endpoint_id):
        return Response(endpoint_json(self.own_endpoint(endpoint_id)))

    @extend_schema(
        request=EndpointUpdateSerializer, responses={200: EndpointSerializer, **PROBLEM_RESPONSES}
    )
    def patch(self, request, endpoint_id):
        e = self.own_endpoint(endpoint_id)
        ser = EndpointUpdateSerializer(data=object_body(request), partial=True)
        ser.is_valid(raise_exception=True)
        try:
            e = endpoint_update(endpoint=e, **ser.validated_data)
        except EndpointRefused as exc:
            raise endpoint_refused(exc) from exc
        return Response(endpoint_json(e))

    @extend_schema(responses={204: None, **PROBLEM_RESPONSES})
    def delete(self, request, endpoint_id):
        self.own_endpoint(endpoint_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateView(WebhookAdminView):
    """A new signing secret (201, shown once); the old one keeps signing next to it
    (both signatures in `webhook-signature`) for `overlap_seconds`."""

    parser_classes = [BoundedJSONParser]

    @extend_schema(
        request=RotateSecretSerializer, responses={201: EndpointSerializer, **PROBLEM_RESPONSES}
    )
    def post(self, request, endpoint_id):
        e = self.own_endpoint(endpoint_id)
        ser = RotateSecretSerializer(data=object_body(request))
        ser.is_valid(raise_exception=True)
        e = endpoint_rotate(endpoint=e, overlap_seconds=ser.validated_data.get("overlap_seconds"))
        return Response(endpoint_json(e, secret=True), status=status.HTTP_201_CREATED)


class WebhookDeliveriesView(WebhookAdminView, generics.GenericAPIView):
    """The endpoint's delivery log, newest first: each event sent to it, its state
    (pending, delivered, failed), attempts, last status code, error and response time."""

    pagination_class = NewestFirstPagination

    @extend_schema(responses=DeliverySerializer(many=True))
    def get(self, request, endpoint_id):
        e = self.own_endpoint(endpoint_id)
        page = self.paginate_queryset(
            WebhookDelivery.objects.filter(endpoint=e).select_related("event")
        )
        return self.get_paginated_response([delivery_json(d) for d in page])


class WebhookTestView(WebhookAdminView):
    """Send a signed `webhook.test` event to this endpoint (202: the delivery, pending;
    its outcome in the delivery log)."""

    @extend_schema(request=None, responses={202: DeliverySerializer, **PROBLEM_RESPONSES})
    def post(self, request, endpoint_id):
        e = self.own_endpoint(endpoint_id)
        event = event_emit(
            account_id=self.account.pk,
            type=TEST_EVENT,
            key=f"{TEST_EVENT}:{uuid.uuid4()}",
            data={"endpoint_id": e.pk, "message": "A test event."},
            endpoints=[e],
        )
        d = WebhookDelivery.objects.select_related("event").get(event=event, endpoint=e)
        return Response(delivery_json(d), status=status.HTTP_202_ACCEPTED)

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from catalog.lifecycle import (
    MAX_RETIRING_WITHIN_DAYS,
    STATUSES,
    LifecycleError,
    deprecation_headers,
)
from catalog.models import Tier
from catalog.selectors import ModelNotFound, model_get, model_list
from catalog.serializers import (
    ModelDetailSerializer,
    ModelSummarySerializer,
    TierListSerializer,
    TierSerializer,
)
from httpedge.health import health_report
from httpedge.pagination import ListCursorPagination
from httpedge.problems import Problem
from httpedge.query import invalid_parameter, query_int, query_value
from httpedge.text import echo


@extend_schema(
    parameters=[
        OpenApiParameter("status", str, enum=list(STATUSES)),
        OpenApiParameter("family", str, description="Family slug, e.g. `sol`."),
        OpenApiParameter("vendor", str, description="Vendor name (case-insensitive)."),
        OpenApiParameter(
            "retiring_within_days",
            {"type": "integer", "minimum": 0, "maximum": MAX_RETIRING_WITHIN_DAYS},
            description=f"Only models retiring within N days (0 to {MAX_RETIRING_WITHIN_DAYS}).",
        ),
    ]
)
def model_or_404(slug: str):
    """The model named `slug`, or the 404 `model-not-found` problem (both surfaces)."""
    try:
        return model_get(slug=slug)
    except ModelNotFound as exc:
        raise Problem(
            status_code=404, slug="model-not-found", title="Unknown model", detail=str(exc)
        ) from exc


class ModelListView(generics.ListAPIView):
    """Model versions with their lifecycle status and retirement date."""

    serializer_class = ModelSummarySerializer
    pagination_class = ListCursorPagination

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": self.now}

    def get_queryset(self):
        self.now = timezone.now()
        request = self.request
        days = query_int(
            request, "retiring_within_days", minimum=0, maximum=MAX_RETIRING_WITHIN_DAYS
        )
        status_ = query_value(request, "status")
        if status_ is not None and status_ not in STATUSES:
            raise invalid_parameter(
                "status", f"Unknown status {echo(status_)}; one of {', '.join(STATUSES)}."
            )
        try:
            return model_list(
                status=status_,
                family=query_value(request, "family") or None,
                vendor=query_value(request, "vendor") or None,
                retiring_within_days=days,
                at=self.now,
            )
        except LifecycleError as exc:
            raise invalid_parameter("status", str(exc)) from exc


class ModelDetailView(APIView):
    """One model version: lifecycle, resolved successor, tiers with prices, benchmarks.

    A deprecated or retired model's response carries `Deprecation` (RFC 9745), `Sunset`
    (RFC 8594) and `Link: <...>; rel="successor-version"` headers.
    """

    @extend_schema(responses=ModelDetailSerializer)
    def get(self, request, slug: str):
        model = model_or_404(slug)
        now = timezone.now()
        data = ModelDetailSerializer(model, context={"request": request, "now": now}).data
        successor_url = (
            reverse("model-detail", args=[model.successor.slug], request=request)
            if model.successor_id
            else None
        )
        return Response(
            data, headers=deprecation_headers(model, successor_url=successor_url, at=now)
        )


class TierListView(APIView):
    """Service tiers, slowest first, with their price multiplier against Standard."""

    @extend_schema(responses=TierListSerializer)
    def get(self, request):
        data = TierSerializer(Tier.objects.all(), many=True).data
        return Response({"object": "list", "data": data})


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "degraded"])
    database = serializers.CharField()
    broker = serializers.CharField()


class HealthView(APIView):
    """Database and broker reachability; 503 when either is down."""

    throttle_classes = []  # probes and monitors are never rate limited

    @extend_schema(responses={200: HealthSerializer, 503: HealthSerializer})
    def get(self, request):
        report = health_report()
        code = (
            status.HTTP_200_OK if report["status"] == "ok" else status.HTTP_503_SERVICE_UNAVAILABLE
        )
        return Response(report, status=code)


class PingView(APIView):
    """A bare DRF endpoint (no database, no auth): liveness, and the baseline the quote
    benchmark compares against."""

    throttle_classes = []  # probes and monitors are never rate limited

    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response({"ok": True})

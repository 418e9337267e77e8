"""GET /quota: the account's quota packages in payment order."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.response import Response

from catalog.models import ModelVersion
from routing.api.base import ClientAPIView
from routing.api.serializers import QuotaListSerializer, QuotaPackageSerializer
from routing.models import QuotaPackage


class QuotaView(ClientAPIView, generics.GenericAPIView):
    """The account's quota packages in payment order: limit, spent, reserved,
    remaining, next reset, scope, order, independence."""

    serializer_class = QuotaPackageSerializer

    @extend_schema(responses=QuotaListSerializer)
    def get(self, request):
        packages = (
            QuotaPackage.objects.filter(account=self.account)
            .select_related("family", "migrate_tier")
            .prefetch_related(
                Prefetch(
                    "model_versions",
                    queryset=ModelVersion.objects.select_related("successor").order_by("slug"),
                ),
                "tiers",
                "retirements",
            )
            .order_by("independent", "order", "id")
        )
        return Response({"object": "list", "data": self.get_serializer(packages, many=True).data})

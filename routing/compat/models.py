"""GET /v1/models and /v1/models/{id}: the catalog in OpenAI's Model shape (`id`,
`object`, `created` in Unix seconds, `owned_by`) plus its lifecycle (status, retirement
date, successor and its tier), through the native views' selectors and serializers.

The catalog is public (like /api/v1/models/): a key is not required, but one that is
sent must be valid (401 otherwise), and with one the Deprecation/Sunset/Link headers
also link the account's notices about the model."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from catalog import lifecycle
from catalog import views as native
from catalog.serializers import ModelDetailSerializer
from routing.accounts.auth import KeyPrincipal
from routing.api.base import client_deprecation_headers, model_url
from routing.compat.base import CompatAPIView


class ModelListView(CompatAPIView, native.ModelListView):
    """Every model in one list (the SDK's `models.list()` reads one page), with the
    native filters (`status`, `family`, `vendor`, `retiring_within_days`)."""

    permission_classes = [AllowAny]
    pagination_class = None

    def list(self, request, *args, **kwargs):
        data = self.get_serializer(self.get_queryset().order_by("slug"), many=True).data
        return Response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )


class ModelDetailView(CompatAPIView):
    """A model by its id or by the family alias chat accepts (`sol`: the family's newest
    serving version), answered with the canonical id, as chat answers `model`."""

    permission_classes = [AllowAny]

    def get(self, request, model_id: str):
        now = timezone.now()
        found = lifecycle.resolve_model_reference(model_id, now)
        model = native.model_or_404(found.slug if found is not None else model_id)
        data = ModelDetailSerializer(model, context={"request": request, "now": now}).data
        if isinstance(request.user, KeyPrincipal):
            headers = client_deprecation_headers(model, request, at=now)
        else:
            succ = model.successor.slug if model.successor_id else None
            url = model_url(request, succ) if succ else None
            headers = lifecycle.deprecation_headers(model, successor_url=url, at=now)
        return Response(data, headers=headers)

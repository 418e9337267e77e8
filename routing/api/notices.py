"""GET /notices: the retirement notices for the account. The notice object is built by
routing.retirement.notices.notice_json (the webhooks send the same)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics

from httpedge.query import query_value
from routing.api.base import ClientAPIView, NewestFirstPagination
from routing.api.serializers import NoticeSerializer
from routing.models import Notice
from routing.retirement.notices import notice_json


class NoticeListView(ClientAPIView, generics.GenericAPIView):
    """Notices for the account (retirements that affect it: date, successor, what
    becomes of its quota), newest first; `model` filters."""

    pagination_class = NewestFirstPagination

    @extend_schema(
        parameters=[OpenApiParameter("model", str, description="Model slug.")],
        responses=NoticeSerializer(many=True),
    )
    def get(self, request):
        qs = Notice.objects.filter(account=self.account).select_related("model")
        model = query_value(request, "model")
        if model:
            qs = qs.filter(model__slug=model)
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([notice_json(n) for n in page])

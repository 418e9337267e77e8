"""/batches (OpenAI's Batch API shape): create a batch from an uploaded file, list,
read and cancel the account's batches. Thin: arguments, then routing.batches."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.reverse import reverse

from httpedge.problems import Problem
from httpedge.query import query_value
from routing.accounts.scopes import check_batches
from routing.api.base import ClientAPIView, NewestFirstPagination, filter_choice
from routing.api.errors import domain_problems
from routing.api.parsers import BoundedJSONParser
from routing.api.serializers import BatchCreateSerializer, BatchSerializer
from routing.api.shapes import batch_json
from routing.batches.cancel import batch_cancel
from routing.batches.create import batch_create
from routing.batches.planning import SCHEDULED, scheduled_q
from routing.core.formats import cut
from routing.models import Batch

# The native API's statuses: the stored ones, and `scheduled` (routing.batches.planning).
NATIVE_STATUSES = [Batch.Status.VALIDATING, SCHEDULED, *Batch.Status.values[1:]]


def own_batch(account, batch_id) -> Batch:
    """The account's batch; someone else's id is a 404, like an id that does not exist."""
    try:
        return Batch.objects.select_related("schedule").get(pk=batch_id, account=account)
    except (Batch.DoesNotExist, ValueError, ValidationError):
        raise Problem(
            status_code=404,
            slug="batch-not-found",
            title="Unknown batch",
            detail=f"No batch {cut(batch_id)}.",
        ) from None


def create_batch(request, account) -> Batch:
    """A batch from the request's JSON body (the native and the OpenAI-compatible
    create both)."""
    ser = BatchCreateSerializer(data=request.data)
    ser.is_valid(raise_exception=True)
    d = ser.validated_data
    with domain_problems(request):
        check_batches(request.user.key)
        return batch_create(
            account=account,
            input_file_id=d["input_file_id"],
            endpoint=d["endpoint"],
            completion_window=d["completion_window"],
            start_at=d.get("start_at"),
            metadata=d.get("metadata"),
            api_key_id=request.user.key.pk,
        )


class BatchListView(ClientAPIView, generics.GenericAPIView):
    """Create a batch from an uploaded file (POST; it is validated and planned, then runs
    from its start inside its completion window) or list the account's batches."""

    parser_classes = [BoundedJSONParser]
    pagination_class = NewestFirstPagination

    @extend_schema(
        request=BatchCreateSerializer,
        responses={
            202: BatchSerializer,
            400: OpenApiResponse(description="Bad endpoint, window, start or file (problem+json)"),
            404: OpenApiResponse(description="Unknown file"),
        },
    )
    def post(self, request):
        batch = create_batch(request, self.account)
        return Response(
            batch_json(batch),
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": reverse("batch-detail", args=[batch.pk], request=request)},
        )

    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=NATIVE_STATUSES)],
        responses=BatchSerializer(many=True),
    )
    def get(self, request):
        qs = Batch.objects.filter(account=self.account).select_related("schedule")
        # `scheduled` (validated, waiting for its start) is shown apart from `validating`.
        wanted = query_value(request, "status")
        if wanted == SCHEDULED:
            qs = qs.filter(scheduled_q())
        else:
            qs = filter_choice(request, qs, "status", NATIVE_STATUSES)
            if wanted == Batch.Status.VALIDATING:
                qs = qs.exclude(scheduled_q())
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([batch_json(b) for b in page])


class BatchDetailView(ClientAPIView):
    @extend_schema(
        responses={200: BatchSerializer, 404: OpenApiResponse(description="Unknown batch")}
    )
    def get(self, request, batch_id):
        return Response(batch_json(own_batch(self.account, batch_id)))


class BatchCancelView(ClientAPIView):
    """Cancel: requests not started are cancelled, those in flight finish and are billed,
    the rest of the reservation is released."""

    @extend_schema(
        request=None,
        responses={
            200: BatchSerializer,
            404: OpenApiResponse(description="Unknown batch"),
            409: OpenApiResponse(description="Already ended"),
        },
    )
    def post(self, request, batch_id):
        batch = own_batch(self.account, batch_id)
        with domain_problems(request):
            batch = batch_cancel(batch=batch)
        return Response(batch_json(own_batch(self.account, batch.pk)))

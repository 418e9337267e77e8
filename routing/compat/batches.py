"""/v1/batches: create from an uploaded file, list (`after`, `limit`: pages end with
`has_more: false`), read and cancel the account's batches. The same services and
lookups as the native views (routing.api.batches); OpenAI's Batch shape
(routing.compat.shapes), with our plan, predicted cost and finish as extra members.
`start_at` (our extension, via the SDK's `extra_body`) delays the start."""

from __future__ import annotations

from rest_framework import generics
from rest_framework.response import Response

from routing.api import batches as native
from routing.api.base import NewestFirstPagination, filter_choice
from routing.api.errors import domain_problems
from routing.api.parsers import BoundedJSONParser
from routing.batches.cancel import batch_cancel
from routing.compat.base import CompatAPIView
from routing.compat.shapes import batch_object
from routing.models import Batch


class BatchListView(CompatAPIView, generics.GenericAPIView):
    parser_classes = [BoundedJSONParser]
    pagination_class = NewestFirstPagination

    def post(self, request):
        batch = native.create_batch(request, self.account)
        return Response(batch_object(native.own_batch(self.account, batch.pk)))

    def get(self, request):
        qs = Batch.objects.filter(account=self.account).select_related("schedule")
        qs = filter_choice(request, qs, "status", Batch.Status.values)
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([batch_object(b) for b in page])


class BatchDetailView(CompatAPIView):
    def get(self, request, batch_id):
        return Response(batch_object(native.own_batch(self.account, batch_id)))


class BatchCancelView(CompatAPIView):
    def post(self, request, batch_id):
        batch = native.own_batch(self.account, batch_id)
        with domain_problems(request):
            batch = batch_cancel(batch=batch)
        return Response(batch_object(native.own_batch(self.account, batch.pk)))

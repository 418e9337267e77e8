"""/v1/files: upload a batch input (multipart `file`, `purpose=batch`), list the
account's files (`after`, `limit`), read, delete, and the content (any Accept, the
SDK's `application/binary` included). The same services and lookups as the native
views (routing.api.files); OpenAI's File shape (routing.compat.shapes)."""

from __future__ import annotations

from rest_framework import generics, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from routing.api import files as native
from routing.api.base import NewestFirstPagination, filter_choice
from routing.api.errors import domain_problems
from routing.batches.files import file_delete
from routing.compat.base import CompatAPIView
from routing.compat.shapes import file_deleted, file_object
from routing.models import File


class FileListView(CompatAPIView, generics.GenericAPIView):
    parser_classes = [MultiPartParser, FormParser]
    pagination_class = NewestFirstPagination

    def post(self, request):
        f = native.upload_file(request, self.account)
        return Response(file_object(f), status=status.HTTP_200_OK)

    def get(self, request):
        qs = File.objects.filter(account=self.account)
        qs = filter_choice(request, qs, "purpose", File.Purpose.values)
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([file_object(f) for f in page])


class FileDetailView(CompatAPIView):
    def get(self, request, file_id):
        return Response(file_object(native.own_file(self.account, file_id)))

    def delete(self, request, file_id):
        f = native.own_file(self.account, file_id)
        with domain_problems(request):
            file_delete(f)
        return Response(file_deleted(f.id))


class FileContentView(CompatAPIView, native.FileContentView):
    """The native content view (JSONL whatever the Accept header says), errors in
    OpenAI's envelope."""

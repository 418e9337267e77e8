"""/files: upload a batch input, list the account's files, read one and its content.
Thin: arguments, then routing.batches.files."""

from __future__ import annotations

from django.conf import settings
from django.http import FileResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.reverse import reverse

from httpedge.problems import Problem
from routing.api.base import ClientAPIView, NewestFirstPagination, filter_choice
from routing.api.errors import domain_problems
from routing.api.serializers import FileSerializer, FileUploadSerializer
from routing.batches.files import file_create, file_delete, file_json
from routing.core.formats import cut, iso
from routing.models import File


def own_file(account, file_id) -> File:
    """The account's file; someone else's id is a 404, like an id that does not exist."""
    f = File.objects.filter(pk=file_id, account=account).first()
    if f is None:
        raise Problem(
            status_code=404,
            slug="file-not-found",
            title="Unknown file",
            detail=f"No file {cut(file_id)}.",
        )
    return f


def upload_file(request, account) -> File:
    """The multipart upload (`file`, `purpose`) of a request as the account's File (the
    native and the OpenAI-compatible upload both)."""
    upload = request.FILES.get("file")
    if upload is None:
        raise Problem(
            status_code=400,
            slug="invalid-file",
            title="No file",
            detail="Send the file as multipart field `file`.",
            parameter="file",
        )
    with domain_problems(request):
        return file_create(
            account=account,
            purpose=request.data.get("purpose", ""),
            upload=upload,
            api_key_id=request.user.key.pk,
        )


class FileListView(ClientAPIView, generics.GenericAPIView):
    """Upload a batch input (multipart: `file`, `purpose=batch`) or list the account's
    files (inputs, and the output and error files of its batches)."""

    parser_classes = [MultiPartParser, FormParser]
    pagination_class = NewestFirstPagination

    @extend_schema(
        request={"multipart/form-data": FileUploadSerializer},
        responses={
            201: FileSerializer,
            400: OpenApiResponse(description="Missing file, unknown purpose, empty file"),
            413: OpenApiResponse(
                description="Over 200 MB or 50,000 requests, or the account's storage cap "
                "(`storage-full`)"
            ),
        },
    )
    def post(self, request):
        f = upload_file(request, self.account)
        return Response(
            file_json(f),
            status=status.HTTP_201_CREATED,
            headers={"Location": reverse("file-detail", args=[f.pk], request=request)},
        )

    @extend_schema(
        parameters=[OpenApiParameter("purpose", str, enum=File.Purpose.values)],
        responses=FileSerializer(many=True),
    )
    def get(self, request):
        qs = File.objects.filter(account=self.account)
        qs = filter_choice(request, qs, "purpose", File.Purpose.values)
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([file_json(f) for f in page])


class FileDetailView(ClientAPIView):
    @extend_schema(
        responses={200: FileSerializer, 404: OpenApiResponse(description="Unknown file")}
    )
    def get(self, request, file_id):
        return Response(file_json(own_file(self.account, file_id)))

    @extend_schema(
        request=None,
        responses={
            204: OpenApiResponse(description="Deleted, with its stored content"),
            404: OpenApiResponse(description="Unknown file"),
            409: OpenApiResponse(
                description="The input of a batch (not ended, or kept by its record) "
                "or of a schedule (`file-in-use`)"
            ),
        },
    )
    def delete(self, request, file_id):
        """Delete the file and its content. A batch's output or error file may go;
        an input is kept while a batch or schedule uses it."""
        f = own_file(self.account, file_id)
        with domain_problems(request):
            file_delete(f)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AnyAccept(DefaultContentNegotiation):
    """A file's content is JSONL whatever the client says it accepts (the `openai` SDK
    sends `Accept: application/binary`); an error is rendered by the first renderer (JSON)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class FileContentView(ClientAPIView):
    """The file's content (JSONL): a batch's output or errors, or an input."""

    content_negotiation_class = AnyAccept

    @extend_schema(
        responses={
            (200, "application/jsonl"): OpenApiResponse(description="JSONL"),
            404: OpenApiResponse(description="Unknown file"),
            410: OpenApiResponse(
                description="The file expired (`file-expired`: a batch output past its "
                "`expires_at`) or its content is gone (`file-gone`)"
            ),
        }
    )
    def get(self, request, file_id):
        f = own_file(self.account, file_id)
        if f.expired() or not f.content.name:
            raise Problem(
                status_code=410,
                slug="file-expired",
                title="File expired",
                detail=f"The file {f.id} expired at {iso(f.expires_at) if f.expires_at else '?'}; "
                "batch output and error files are kept "
                f"{settings.BATCH_OUTPUT_EXPIRES_DAYS:g} days and their content is then "
                "deleted. Retry the batch to produce it again.",
                expires_at=iso(f.expires_at) if f.expires_at else None,
            )
        try:
            fh = f.content.open("rb")
        except OSError as exc:
            raise Problem(
                status_code=410,
                slug="file-gone",
                title="File content gone",
                detail=f"The content of {f.id} is no longer stored.",
            ) from exc
        return FileResponse(
            fh, as_attachment=True, filename=f.filename, content_type="application/jsonl"
        )

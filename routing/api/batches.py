"""The files and batches API (OpenAI's Batch API shape). Thin: arguments, then
routing.batches.files / routing.batches.service."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import FileResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.reverse import reverse

from deploy.problems import Problem
from routing.api.views import ClientAPIView, JobCursorPagination, _iso, filter_choice
from routing.batches.cancel import batch_cancel
from routing.batches.create import batch_create
from routing.batches.errors import BatchError
from routing.batches.files import FileRejected, file_create, file_json
from routing.core.clock import sim_scale
from routing.models import Batch, File


class FileSerializer(serializers.Serializer):
    """Documents a file."""

    id = serializers.CharField()
    object = serializers.CharField(default="file")
    purpose = serializers.ChoiceField(choices=File.Purpose.values)
    filename = serializers.CharField()
    bytes = serializers.IntegerField()
    lines = serializers.IntegerField()
    sha256 = serializers.CharField()
    created_at = serializers.DateTimeField()


class FileUploadSerializer(serializers.Serializer):
    file = serializers.FileField(
        help_text="JSONL, one request a line; at most 200 MB, 50,000 lines."
    )
    purpose = serializers.CharField(help_text="`batch`.")


class BatchCreateSerializer(serializers.Serializer):
    input_file_id = serializers.CharField(max_length=40)
    endpoint = serializers.CharField(
        max_length=40, default="/v1/jobs", help_text="`/v1/jobs` or `/v1/chat/completions`."
    )
    completion_window = serializers.CharField(
        max_length=16, default="24h", help_text="30m, 8h, 24h (default), 2d; from 1m to 7d."
    )
    start_at = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="Earliest start: `now` (default) or an ISO 8601 time, at most 31 days ahead.",
    )
    metadata = serializers.DictField(child=serializers.CharField(), required=False, allow_null=True)


class RequestCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    completed = serializers.IntegerField()
    failed = serializers.IntegerField()


class BatchSerializer(serializers.Serializer):
    """Documents a batch (built by batch_json)."""

    id = serializers.UUIDField()
    object = serializers.CharField(default="batch")
    endpoint = serializers.CharField()
    input_file_id = serializers.CharField()
    completion_window = serializers.CharField()
    window_seconds = serializers.FloatField()
    status = serializers.ChoiceField(choices=Batch.Status.values)
    output_file_id = serializers.CharField(allow_null=True)
    error_file_id = serializers.CharField(allow_null=True)
    errors = serializers.DictField(allow_null=True)
    created_at = serializers.DateTimeField()
    start_at = serializers.DateTimeField()
    validated_at = serializers.DateTimeField(allow_null=True)
    in_progress_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField()
    finalizing_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    failed_at = serializers.DateTimeField(allow_null=True)
    expired_at = serializers.DateTimeField(allow_null=True)
    cancelling_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    request_counts = RequestCountsSerializer()
    metadata = serializers.DictField()
    plan = serializers.DictField(
        allow_null=True, help_text="Tiers, streams, predicted makespan and cost."
    )
    predicted_cost = serializers.CharField(allow_null=True)
    predicted_finish_at = serializers.DateTimeField(allow_null=True)
    cost = serializers.CharField(help_text="Charged so far (completed requests).")
    schedule = serializers.CharField(allow_null=True)
    retry_of = serializers.UUIDField(allow_null=True)
    time_scale = serializers.FloatField()


def batch_json(b: Batch) -> dict:
    return {
        "id": str(b.pk),
        "object": "batch",
        "endpoint": b.endpoint,
        "input_file_id": b.input_file_id,
        "completion_window": b.completion_window,
        "window_seconds": b.window_seconds,
        "status": b.status,
        "output_file_id": b.output_file_id,
        "error_file_id": b.error_file_id,
        "errors": {"object": "list", "data": b.errors} if b.errors else None,
        "created_at": _iso(b.created_at),
        "start_at": _iso(b.start_at),
        "validated_at": _iso(b.validated_at),
        "in_progress_at": _iso(b.in_progress_at),
        "expires_at": _iso(b.expires_at),
        "finalizing_at": _iso(b.finalizing_at),
        "completed_at": _iso(b.completed_at),
        "failed_at": _iso(b.failed_at),
        "expired_at": _iso(b.expired_at),
        "cancelling_at": _iso(b.cancelling_at),
        "cancelled_at": _iso(b.cancelled_at),
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": b.metadata,
        "plan": b.plan,
        "predicted_cost": str(b.predicted_cost) if b.predicted_cost is not None else None,
        "predicted_finish_at": _iso(b.predicted_finish_at),
        "cost": str(b.cost),
        "schedule": b.schedule.name if b.schedule_id else None,
        "retry_of": str(b.retry_of_id) if b.retry_of_id else None,
        "time_scale": sim_scale(),
    }


def _problem(exc: BatchError | FileRejected) -> Problem:
    param = getattr(exc, "param", None)
    return Problem(
        status_code=exc.status,
        slug=exc.code,
        title={
            404: "Not found",
            409: "Conflict",
            413: "Too large",
        }.get(exc.status, "Invalid batch request"),
        detail=str(exc),
        **({"parameter": param} if param else {}),
    )


def _own_file(account, file_id) -> File:
    f = File.objects.filter(pk=file_id, account=account).first()
    if f is None:
        raise Problem(
            status_code=404,
            slug="file-not-found",
            title="Unknown file",
            detail=f"No file {file_id}.",
        )
    return f


def _own_batch(account, batch_id) -> Batch:
    try:
        return Batch.objects.select_related("schedule").get(pk=batch_id, account=account)
    except (Batch.DoesNotExist, ValueError, ValidationError):
        raise Problem(
            status_code=404,
            slug="batch-not-found",
            title="Unknown batch",
            detail=f"No batch {batch_id}.",
        ) from None


class FileListView(ClientAPIView, generics.GenericAPIView):
    """Upload a batch input (multipart: `file`, `purpose=batch`) or list the account's
    files (inputs, and the output and error files of its batches)."""

    parser_classes = [MultiPartParser, FormParser]
    pagination_class = JobCursorPagination

    @extend_schema(
        request={"multipart/form-data": FileUploadSerializer},
        responses={
            201: FileSerializer,
            400: OpenApiResponse(description="Missing file, unknown purpose, empty file"),
            413: OpenApiResponse(description="Over 200 MB or 50,000 requests"),
        },
    )
    def post(self, request):
        upload = request.FILES.get("file")
        if upload is None:
            raise Problem(
                status_code=400,
                slug="invalid-file",
                title="No file",
                detail="Send the file as multipart field `file`.",
                parameter="file",
            )
        try:
            f = file_create(
                account=self.account, purpose=request.data.get("purpose", ""), upload=upload
            )
        except FileRejected as exc:
            raise _problem(exc) from exc
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
        return Response(file_json(_own_file(self.account, file_id)))


class FileContentView(ClientAPIView):
    """The file's content (JSONL): a batch's output or errors, or an input."""

    @extend_schema(
        responses={
            (200, "application/jsonl"): OpenApiResponse(description="JSONL"),
            404: OpenApiResponse(description="Unknown file"),
        }
    )
    def get(self, request, file_id):
        f = _own_file(self.account, file_id)
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


class BatchListView(ClientAPIView, generics.GenericAPIView):
    """Create a batch from an uploaded file (POST; it is validated and planned, then runs
    from its start inside its completion window) or list the account's batches."""

    parser_classes = [JSONParser]
    pagination_class = JobCursorPagination

    @extend_schema(
        request=BatchCreateSerializer,
        responses={
            202: BatchSerializer,
            400: OpenApiResponse(description="Bad endpoint, window, start or file (problem+json)"),
            404: OpenApiResponse(description="Unknown file"),
        },
    )
    def post(self, request):
        ser = BatchCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        try:
            batch = batch_create(
                account=self.account,
                input_file_id=d["input_file_id"],
                endpoint=d["endpoint"],
                completion_window=d["completion_window"],
                start_at=d.get("start_at"),
                metadata=d.get("metadata"),
            )
        except BatchError as exc:
            raise _problem(exc) from exc
        return Response(
            batch_json(batch),
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": reverse("batch-detail", args=[batch.pk], request=request)},
        )

    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=Batch.Status.values)],
        responses=BatchSerializer(many=True),
    )
    def get(self, request):
        qs = Batch.objects.filter(account=self.account).select_related("schedule")
        qs = filter_choice(request, qs, "status", Batch.Status.values)
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([batch_json(b) for b in page])


class BatchDetailView(ClientAPIView):
    @extend_schema(
        responses={200: BatchSerializer, 404: OpenApiResponse(description="Unknown batch")}
    )
    def get(self, request, batch_id):
        return Response(batch_json(_own_batch(self.account, batch_id)))


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
        batch = _own_batch(self.account, batch_id)
        try:
            batch = batch_cancel(batch=batch)
        except BatchError as exc:
            raise _problem(exc) from exc
        return Response(batch_json(_own_batch(self.account, batch.pk)))

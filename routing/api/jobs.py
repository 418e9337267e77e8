"""/jobs: submit (with an optional Idempotency-Key), list, read and cancel the
account's jobs. Thin: validation, then routing.jobs."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import Q
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.reverse import reverse

from httpedge.problems import Problem
from httpedge.query import invalid_parameter, query_value
from routing.api.base import (
    ClientAPIView,
    NewestFirstPagination,
    client_deprecation_headers,
    filter_boolean,
    filter_choice,
)
from routing.api.errors import PROBLEM_RESPONSES, domain_problems
from routing.api.serializers import JobRequestSerializer, JobSerializer, job_request_validator
from routing.api.shapes import job_json
from routing.core.formats import cut, echo
from routing.jobs.cancel import job_cancel
from routing.jobs.submit import job_submit
from routing.models import Job
from routing.router.quotes import route_request_from


def idempotency_key_of(request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > 255:
        raise Problem(
            status_code=400,
            slug="invalid-idempotency-key",
            title="Invalid Idempotency-Key",
            detail="Idempotency-Key must be 1 to 255 characters.",
        )
    return key


def own_job(account, job_id) -> Job:
    """The account's job; someone else's id is a 404, like an id that does not exist."""
    try:
        return Job.objects.select_related("model", "tier", "pool", "package").get(
            pk=job_id, account=account
        )
    except (Job.DoesNotExist, ValueError, ValidationError):
        raise Problem(
            status_code=404,
            slug="job-not-found",
            title="Unknown job",
            detail=f"No job {cut(job_id)}.",
        ) from None


class JobListView(ClientAPIView, generics.GenericAPIView):
    """Submit a job (POST) or list the account's jobs (GET, newest first)."""

    pagination_class = NewestFirstPagination

    @extend_schema(
        request=JobRequestSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                # 1 to 255 characters once surrounding whitespace is stripped
                {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"\S"},
                location=OpenApiParameter.HEADER,
                description="Makes retries safe: a repeat returns the same job; a "
                "concurrent duplicate gets 409.",
            )
        ],
        responses={
            202: JobSerializer,
            200: JobSerializer,
            409: OpenApiResponse(description="Duplicate in progress"),
            **PROBLEM_RESPONSES,
        },
    )
    def post(self, request):
        key = idempotency_key_of(request)
        data = job_request_validator().validate(request.data)
        prompt = data.pop("prompt", "")
        with domain_problems(request, model=data["model"]):
            sub = job_submit(
                account=self.account,
                payload=data,
                request=route_request_from(data),
                prompt=prompt,
                idempotency_key=key,
                api_key=request.user.key,
            )
        job = sub.job  # a new job comes with its model, tier, pool and package (in memory)
        if not sub.created:
            job = Job.objects.select_related("model", "tier", "pool", "package").get(pk=job.pk)
        headers = {"Location": reverse("job-detail", args=[job.pk], request=request)}
        if sub.created:
            headers.update(client_deprecation_headers(job.model, request))
        else:
            headers["Idempotent-Replayed"] = "true"
        code = status.HTTP_202_ACCEPTED if sub.created else status.HTTP_200_OK
        return Response(job_json(job), status=code, headers=headers)

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=[s.value for s in Job.Status]),
            OpenApiParameter("model", str, description="Requested or served model slug."),
            OpenApiParameter(
                "deadline_met",
                bool,
                description="Finished jobs that met (true) or missed (false) their deadline.",
            ),
        ],
        responses=JobSerializer(many=True),
    )
    def get(self, request):
        qs = Job.objects.filter(account=self.account).select_related(
            "model", "tier", "pool", "package"
        )
        qs = filter_choice(request, qs, "status", Job.Status.values)
        qs = filter_boolean(request, qs, "deadline_met")
        model = query_value(request, "model")
        if model:
            qs = qs.filter(Q(model__slug=model) | Q(requested_model=model))
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([job_json(j) for j in page])


OUTPUT_CHOICES = ("excerpt", "full")


class JobDetailView(ClientAPIView):
    """A job: status, predicted vs simulated timings, tokens, cost, and (when done) the
    synthetic output, marked as simulated: an excerpt of its first words by default,
    the whole text with `?output=full`."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "output",
                str,
                enum=list(OUTPUT_CHOICES),
                default="excerpt",
                description="How much of a finished job's simulated output to return: "
                "`excerpt` (its first 200 words; `output.truncated` says whether there "
                "is more) or `full` (the whole text: one word per output token, about "
                "5 bytes each).",
            )
        ],
        responses={
            200: JobSerializer,
            400: OpenApiResponse(description="Unknown `output` value (problem+json)"),
            404: OpenApiResponse(description="Unknown job"),
        },
    )
    def get(self, request, job_id):
        wanted = query_value(request, "output")
        wanted = "excerpt" if wanted is None else wanted
        if wanted not in OUTPUT_CHOICES:
            raise invalid_parameter(
                "output", f"Unknown output {echo(wanted)}; one of {', '.join(OUTPUT_CHOICES)}."
            )
        job = own_job(self.account, job_id)
        body = job_json(job, detail=True, full_output=wanted == "full")
        output = body.get("output")
        if output and output["truncated"]:
            url = reverse("job-detail", args=[job.pk], request=request)
            output["full_url"] = f"{url}?output=full"
        return Response(body)


class JobCancelView(ClientAPIView):
    """Cancel a queued or running job: its reservation is released, nothing is charged."""

    @extend_schema(
        request=None,
        responses={200: JobSerializer, 409: OpenApiResponse(description="Already finished")},
    )
    def post(self, request, job_id):
        job = own_job(self.account, job_id)
        with domain_problems(request):
            job = job_cancel(job=job)
        return Response(job_json(own_job(self.account, job.pk)))

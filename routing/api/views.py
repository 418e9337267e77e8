"""The client API: quotes and quota. Thin: validation, then routing.router.quotes."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.db.models import Prefetch, Q
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotAuthenticated
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from catalog import lifecycle
from catalog.models import ModelVersion
from deploy.pagination import ListCursorPagination
from deploy.problems import Problem
from routing.accounts.auth import BearerKeyAuthentication, HasAccount, KeyPrincipal
from routing.api.serializers import (
    JobRequestSerializer,
    JobSerializer,
    QuotaPackageSerializer,
    QuoteSerializer,
    RouteRequestSerializer,
    TimingsSerializer,
)
from routing.core.clock import sim_scale
from routing.jobs.cancel import job_cancel
from routing.jobs.errors import (
    IdempotencyConflict,
    IdempotencyMismatch,
    JobNotCancellable,
    NoTierChosen,
)
from routing.jobs.output import synthetic_output
from routing.jobs.submit import job_submit
from routing.models import Job, Notice, QuotaPackage
from routing.quota import QuotaExhausted
from routing.retirement.notices import notice_json
from routing.router.quotes import AutoNeedsTask, Quote, quote_build
from routing.router.resolve import ModelNotServing, ModelRetired, ModelUnknown
from routing.router.route import Candidate, RouteRequest

PROBLEM_RESPONSES = {
    code: OpenApiResponse(description=desc)
    for code, desc in {
        400: "Invalid request (problem+json)",
        401: "Missing, invalid or revoked API key",
        404: "Unknown model",
        410: "Model retired; `successor` names the replacement",
        422: "No tier meets the deadline (`fastest`), over `max_cost`, or over the context window",
        429: "No quota package can pay; `next_reset` and Retry-After",
    }.items()
}


class JobCursorPagination(ListCursorPagination):
    ordering = "-created_at"


class ClientAPIView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    permission_classes = [HasAccount]

    @property
    def account(self):
        return self.request.user.account

    def permission_denied(self, request, message=None, code=None):
        if not isinstance(request.user, KeyPrincipal):
            raise NotAuthenticated(HasAccount.message)
        super().permission_denied(request, message, code)


def route_request_from(data: dict) -> RouteRequest:
    return RouteRequest(
        input_tokens=data["input_tokens"],
        output_tokens=data["output_tokens"],
        turns=data["turns"],
        tool_seconds=data["tool_seconds"],
        deadline_seconds=data["deadline_seconds"],
        max_cost=data.get("max_cost"),
        tier=data.get("tier"),
        task=data.get("task"),
    )


def model_url(request, slug: str) -> str:
    return reverse("model-detail", args=[slug], request=request)


def build_quote(request, account, data: dict) -> Quote:
    """Run the router for an account, turning every refusal into a problem."""
    try:
        return quote_build(
            account=account,
            model=data["model"],
            request=route_request_from(data),
            at=timezone.now(),
        )
    except (ModelUnknown, ModelRetired, ModelNotServing, AutoNeedsTask) as exc:
        raise quote_refusal(exc, request, data["model"]) from exc


def quote_refusal(exc: Exception, request, model: str) -> Problem:
    """The problem for a model the router cannot quote (unknown, retired, not serving)."""
    if isinstance(exc, ModelUnknown):
        return Problem(
            status_code=404,
            slug="model-not-found",
            title="Unknown model",
            detail=f"No model {model!r}: see GET /api/v1/models/ (or use 'auto').",
        )
    if isinstance(exc, AutoNeedsTask):
        return Problem(
            status_code=400, slug="invalid-request", title="Invalid request", detail=str(exc)
        )
    if isinstance(exc, ModelRetired):
        successor = exc.successor.slug if exc.successor else None
        detail = f"{exc.model.slug} was retired on {exc.model.retires_on}."
        headers = {}
        if successor:
            detail += f" Use {successor}" + (f" on {exc.tier.slug}." if exc.tier else ".")
            detail += " Accounts that opt in to automatic migration are moved there."
            headers["Link"] = f'<{model_url(request, successor)}>; rel="successor-version"'
        return Problem(
            status_code=410,
            slug="model-retired",
            title="Model retired",
            detail=detail,
            headers=headers,
            model=exc.model.slug,
            retired_on=str(exc.model.retires_on),
            successor=successor,
            successor_tier=exc.tier.slug if exc.tier else None,
        )
    return Problem(
        status_code=422,
        slug="model-not-serving",
        title="Model not serving",
        detail=f"{exc.model.slug} is {exc.status} and has no tier serving yet.",
    )


def quota_problem(next_reset, at, **ext) -> Problem:
    headers = {}
    if next_reset:
        headers["Retry-After"] = str(max(1, int((next_reset - at).total_seconds())))
    return Problem(
        status_code=429,
        slug="quota-exhausted",
        title="No quota package can pay",
        detail="No quota package covering this work has enough credits"
        + (f"; the next reset is at {next_reset.isoformat()}." if next_reset else "."),
        headers=headers,
        next_reset=next_reset.isoformat() if next_reset else None,
        **ext,
    )


def candidate_brief(c: Candidate | None) -> dict | None:
    if c is None:
        return None
    return {
        "model": c.model,
        "tier": c.tier,
        "total_seconds": None if math.isinf(c.total_seconds) else round(c.total_seconds, 3),
        "cost": str(c.cost),
    }


def refuse(quote: Quote, request) -> Problem:
    """The problem for a quote whose router found no tier."""
    d, req = quote.decision, quote.request
    cands = [candidate_json(c) for c in d.candidates]
    if d.outcome == "deadline":
        f = d.fastest
        detail = (
            f"Fastest option: {f.tier}, {f.total_seconds:.0f} s predicted; "
            f"deadline {req.deadline_seconds:g} s."
            if f
            else "No tier can run this task now."
        )
        return Problem(
            status_code=422,
            slug="deadline-infeasible",
            title="No tier meets the deadline",
            detail=detail,
            fastest=candidate_brief(f),
            candidates=cands,
        )
    if d.outcome == "max_cost":
        c = d.fastest
        return Problem(
            status_code=422,
            slug="max-cost-exceeded",
            title="No tier meets the deadline within max_cost",
            detail=f"Cheapest tier that meets the deadline: {c.tier} at {c.cost} credits; "
            f"max_cost {req.max_cost}.",
            cheapest=candidate_brief(c),
            candidates=cands,
        )
    if d.outcome == "context":
        window = quote.resolved.model.context_window if quote.resolved else None
        return Problem(
            status_code=422,
            slug="context-window-exceeded",
            title="Task larger than the context window",
            detail=f"{req.input_tokens + req.output_tokens} tokens do not fit "
            + (f"the {window}-token context window." if window else "any candidate model."),
            context_window=window,
        )
    if d.outcome == "quota":
        return quota_problem(d.next_reset_at, quote.at, candidates=cands)
    if quote.resolved is None:  # model "auto"
        return Problem(
            status_code=422,
            slug="no-model-for-task",
            title="No model for this task class",
            detail=f"No serving model has a published {req.task!r} result to choose by.",
        )
    return Problem(
        status_code=422,
        slug="model-not-serving",
        title="Model not serving",
        detail="No tier is deployed for this model.",
    )


def lifecycle_headers(quote: Quote, request) -> dict[str, str]:
    if quote.resolved is None:
        return {}
    return client_deprecation_headers(quote.resolved.model, request, quote.at)


def client_deprecation_headers(model, request, at=None) -> dict[str, str]:
    """The catalog's Deprecation/Sunset/successor Link, plus, for a client, a
    rel="deprecation" link to its notices about the model (date, successor, quota)."""
    succ = model.successor.slug if model.successor_id else None
    headers = lifecycle.deprecation_headers(
        model, successor_url=model_url(request, succ) if succ else None, at=at
    )
    if headers:
        notices = request.build_absolute_uri(f"{reverse('notice-list')}?model={model.slug}")
        link = f'<{notices}>; rel="deprecation"; type="application/json"'
        headers["Link"] = f"{headers['Link']}, {link}" if "Link" in headers else link
    return headers


def _money(value) -> str | None:
    return None if value is None else f"{value:.6f}"


def _package_json(p) -> dict | None:
    return None if p is None else {"id": p.id, "name": p.name, "independent": p.independent}


def candidate_json(c: Candidate) -> dict:
    """One candidate as the API shows it (the shape CandidateSerializer documents; the
    quote path builds plain dicts because DRF serializers cost more than the router)."""
    return {
        "model": c.model,
        "tier": c.tier,
        "pool": c.pool,
        "device": c.device,
        "pool_utilisation": c.load,
        "predicted": c.prediction,
        "cost": _money(c.cost),
        "package": _package_json(c.package),
        "success_rate": c.success_rate,
        "expected_seconds": c.expected_seconds,
        "expected_cost": _money(c.expected_cost),
        "meets_deadline": c.meets_deadline,
        "eligible": c.eligible,
        "chosen": c.chosen,
        "reason": c.reason,
    }


def quote_json(quote: Quote) -> dict:
    """The quote as the API shows it (documented by QuoteSerializer)."""
    d = quote.decision
    c = d.chosen
    resolved = quote.resolved
    served = resolved.model if resolved else None
    return {
        "object": "quote",
        "model": quote.requested_model,
        "served_model": c.model,
        "migrated_from": resolved.requested_model.slug if resolved and resolved.migrated else None,
        "recommended_tier": resolved.recommended_tier.slug
        if resolved and resolved.recommended_tier
        else None,
        "tier": c.tier,
        "service_tier": c.tier,
        "pool": c.pool,
        "deadline_seconds": quote.request.deadline_seconds,
        "predicted": c.prediction,
        "cost": _money(c.cost),
        "package": _package_json(c.package),
        "lifecycle": {
            "status": lifecycle.model_status(served, quote.at) if served else "active",
            "retires_on": served.retires_on.isoformat() if served and served.retires_on else None,
            "successor": served.successor.slug if served and served.successor_id else None,
        },
        "candidates": [candidate_json(x) for x in d.candidates],
    }


class QuoteView(ClientAPIView):
    """Ask the router where work would run, by when and at what cost. Nothing is
    stored or reserved."""

    @extend_schema(
        request=RouteRequestSerializer,
        responses={200: QuoteSerializer, **PROBLEM_RESPONSES},
    )
    def post(self, request):
        ser = RouteRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        quote = build_quote(request, self.account, ser.validated_data)
        if quote.decision.chosen is None:
            raise refuse(quote, request)
        return Response(quote_json(quote), headers=lifecycle_headers(quote, request))


class QuotaView(ClientAPIView, generics.GenericAPIView):
    """The account's quota packages in payment order: limit, spent, reserved,
    remaining, next reset, scope, order, independence."""

    serializer_class = QuotaPackageSerializer

    @extend_schema(responses=QuotaPackageSerializer(many=True))
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


# --- Jobs ----------------------------------------------------------------------------------


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def job_json(job: Job, *, detail: bool = False) -> dict:
    """The job as the API shows it (documented by JobSerializer)."""
    p = job.predicted or {}
    sim = job.simulated
    done = job.status == Job.Status.SUCCEEDED
    body = {
        "id": str(job.pk),
        "object": "job",
        "status": job.status,
        "model": job.requested_model,
        "served_model": job.model.slug,
        "requested_tier": job.requested_tier,
        "tier": job.tier.slug,
        "service_tier": job.tier.slug,
        "pool": job.pool.slug,
        "input_tokens": job.input_tokens,
        "output_tokens": job.output_tokens,
        "turns": job.turns,
        "tool_seconds": job.tool_seconds,
        "deadline_seconds": job.deadline_seconds,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finishes_at": _iso(job.finishes_at),
        "finished_at": _iso(job.finished_at),
        "cancelled_at": _iso(job.cancelled_at),
        "predicted": {
            **{k: p.get(k) for k in TimingsSerializer().fields},
            "start_at": _iso(job.predicted_start_at),
            "completion_at": _iso(job.predicted_completion_at),
            "cost": _money(job.predicted_cost),
        },
        "simulated": sim,
        "meets_deadline": (sim["total_seconds"] <= job.deadline_seconds) if sim else None,
        "usage": {"input_tokens": job.input_tokens, "output_tokens": job.output_tokens}
        if done
        else None,
        "cost": _money(job.cost),
        "package": {
            "id": job.package_id,
            "name": job.package.name,
            "independent": job.package.independent,
        },
        "time_scale": sim_scale(),
        "error": job.error,
    }
    if detail and done:
        body["output"] = {
            "simulated": True,
            "tokens": job.output_tokens,
            "text": synthetic_output(job),
        }
    return body


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


class JobListView(ClientAPIView, generics.GenericAPIView):
    """Submit a job (POST) or list the account's jobs (GET, newest first)."""

    pagination_class = JobCursorPagination

    @extend_schema(
        request=JobRequestSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
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
        ser = JobRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        prompt = data.pop("prompt", "")
        try:
            sub = job_submit(
                account=self.account,
                payload=data,
                request=route_request_from(data),
                prompt=prompt,
                idempotency_key=key,
            )
        except NoTierChosen as exc:
            raise refuse(exc.quote, request) from exc
        except QuotaExhausted as exc:
            raise quota_problem(exc.next_reset_at, timezone.now()) from exc
        except IdempotencyConflict as exc:
            raise Problem(
                status_code=409,
                slug="idempotency-conflict",
                title="Duplicate request in progress",
                detail=str(exc),
            ) from exc
        except IdempotencyMismatch as exc:
            raise Problem(
                status_code=422,
                slug="idempotency-key-reused",
                title="Idempotency-Key reused",
                detail=str(exc),
            ) from exc
        except (ModelUnknown, ModelRetired, ModelNotServing, AutoNeedsTask) as exc:
            raise quote_refusal(exc, request, data["model"]) from exc
        job = Job.objects.select_related("model", "tier", "pool", "package").get(pk=sub.job.pk)
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
        ],
        responses=JobSerializer(many=True),
    )
    def get(self, request):
        qs = Job.objects.filter(account=self.account).select_related(
            "model", "tier", "pool", "package"
        )
        qs = filter_choice(request, qs, "status", Job.Status.values)
        model = request.query_params.get("model")
        if model:
            qs = qs.filter(Q(model__slug=model) | Q(requested_model=model))
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([job_json(j) for j in page])


def filter_choice(request, qs, name: str, choices):
    """Filter a list by a query parameter that must be one of `choices` (400 if not)."""
    wanted = request.query_params.get(name)
    if not wanted:
        return qs
    if wanted not in choices:
        raise Problem(
            status_code=400,
            slug="invalid-parameter",
            title="Invalid query parameter",
            detail=f"Unknown {name} {wanted!r}; one of {', '.join(choices)}.",
            parameter=name,
        )
    return qs.filter(**{name: wanted})


def _own_job(account, job_id) -> Job:
    # Someone else's id is a 404, like an id that does not exist.
    try:
        return Job.objects.select_related("model", "tier", "pool", "package").get(
            pk=job_id, account=account
        )
    except (Job.DoesNotExist, ValueError, ValidationError):
        raise Problem(
            status_code=404, slug="job-not-found", title="Unknown job", detail=f"No job {job_id}."
        ) from None


class JobDetailView(ClientAPIView):
    """A job: status, predicted vs simulated timings, tokens, cost, and (when done) the
    synthetic output, marked as simulated."""

    @extend_schema(responses={200: JobSerializer, 404: OpenApiResponse(description="Unknown job")})
    def get(self, request, job_id):
        return Response(job_json(_own_job(self.account, job_id), detail=True))


class JobCancelView(ClientAPIView):
    """Cancel a queued or running job: its reservation is released, nothing is charged."""

    @extend_schema(
        request=None,
        responses={200: JobSerializer, 409: OpenApiResponse(description="Already finished")},
    )
    def post(self, request, job_id):
        job = _own_job(self.account, job_id)
        try:
            job = job_cancel(job=job)
        except JobNotCancellable as exc:
            raise Problem(
                status_code=409,
                slug="job-not-cancellable",
                title="Job cannot be cancelled",
                detail=str(exc),
            ) from exc
        return Response(job_json(_own_job(self.account, job.pk)))


class NoticeSerializer(serializers.Serializer):
    """Documents a notice (built by routing.retirement.notices.notice_json)."""

    id = serializers.UUIDField()
    object = serializers.CharField(default="notice")
    kind = serializers.CharField()
    model = serializers.CharField()
    retires_on = serializers.DateField()
    announced_on = serializers.DateField()
    successor = serializers.CharField(allow_null=True)
    successor_tier = serializers.CharField(allow_null=True)
    message = serializers.CharField()
    your_usage = serializers.DictField()
    quota = serializers.ListField(child=serializers.DictField())
    created_at = serializers.DateTimeField()
    delivery = serializers.ChoiceField(choices=Notice.Delivery.values)


class NoticeListView(ClientAPIView, generics.GenericAPIView):
    """Notices for the account (retirements that affect it: date, successor, what
    becomes of its quota), newest first; `model` filters."""

    pagination_class = JobCursorPagination

    @extend_schema(
        parameters=[OpenApiParameter("model", str, description="Model slug.")],
        responses=NoticeSerializer(many=True),
    )
    def get(self, request):
        qs = Notice.objects.filter(account=self.account).select_related("model")
        model = request.query_params.get("model")
        if model:
            qs = qs.filter(model__slug=model)
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([notice_json(n) for n in page])

"""The client API: quotes and quota. Thin: validation, then routing.quotes."""

from __future__ import annotations

import math

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.exceptions import NotAuthenticated
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from catalog import lifecycle
from deploy.problems import Problem
from routing.auth import BearerKeyAuthentication, HasAccount, KeyPrincipal
from routing.models import QuotaPackage
from routing.quotes import AutoNeedsTask, Quote, quote_build
from routing.router import Candidate, RouteRequest
from routing.selectors import ModelNotServing, ModelRetired, ModelUnknown
from routing.serializers import (
    QuotaPackageSerializer,
    QuoteSerializer,
    RouteRequestSerializer,
)

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
    except ModelUnknown as exc:
        raise Problem(
            status_code=404,
            slug="model-not-found",
            title="Unknown model",
            detail=f"No model {data['model']!r}: see GET /api/v1/models/ (or use 'auto').",
        ) from exc
    except AutoNeedsTask as exc:
        raise Problem(
            status_code=400, slug="invalid-request", title="Invalid request", detail=str(exc)
        ) from exc
    except ModelRetired as exc:
        successor = exc.successor.slug if exc.successor else None
        detail = f"{exc.model.slug} was retired on {exc.model.retires_on}."
        headers = {}
        if successor:
            detail += f" Use {successor}" + (f" on {exc.tier.slug}." if exc.tier else ".")
            detail += " Accounts that opt in to automatic migration are moved there."
            headers["Link"] = f'<{model_url(request, successor)}>; rel="successor-version"'
        raise Problem(
            status_code=410,
            slug="model-retired",
            title="Model retired",
            detail=detail,
            headers=headers,
            model=exc.model.slug,
            retired_on=str(exc.model.retires_on),
            successor=successor,
            successor_tier=exc.tier.slug if exc.tier else None,
        ) from exc
    except ModelNotServing as exc:
        raise Problem(
            status_code=422,
            slug="model-not-serving",
            title="Model not serving",
            detail=f"{exc.model.slug} is {exc.status} and has no tier serving yet.",
        ) from exc


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
        nxt = d.next_reset_at
        headers = {}
        if nxt:
            headers["Retry-After"] = str(max(1, int((nxt - quote.at).total_seconds())))
        return Problem(
            status_code=429,
            slug="quota-exhausted",
            title="No quota package can pay",
            detail="No quota package covering this work has enough credits"
            + (f"; the next reset is at {nxt.isoformat()}." if nxt else "."),
            headers=headers,
            next_reset=nxt.isoformat() if nxt else None,
            candidates=cands,
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
    model = quote.resolved.model
    succ = model.successor.slug if model.successor_id else None
    return lifecycle.deprecation_headers(
        model, successor_url=model_url(request, succ) if succ else None, at=quote.at
    )


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
            .select_related("family")
            .prefetch_related("model_versions", "tiers")
            .order_by("independent", "order", "id")
        )
        return Response({"object": "list", "data": self.get_serializer(packages, many=True).data})

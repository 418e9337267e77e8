"""POST /quotes: where work would run, by when and at what cost. Thin: validation, then
routing.router.quotes."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from routing.api.base import ClientAPIView, client_deprecation_headers
from routing.api.errors import PROBLEM_RESPONSES, domain_problems, quote_refused
from routing.api.serializers import QuoteSerializer, RouteRequestSerializer, route_request_validator
from routing.api.shapes import quote_json
from routing.router.quotes import Quote, quote_build, route_request_from


def lifecycle_headers(quote: Quote, request) -> dict[str, str]:
    if quote.resolved is None:
        return {}
    return client_deprecation_headers(quote.resolved.model, request, quote.at)


class QuoteView(ClientAPIView):
    """Ask the router where work would run, by when and at what cost. Nothing is
    stored or reserved."""

    @extend_schema(
        request=RouteRequestSerializer,
        responses={200: QuoteSerializer, **PROBLEM_RESPONSES},
    )
    def post(self, request):
        data = route_request_validator().validate(request.data)
        with domain_problems(request, model=data["model"]):
            quote = quote_build(
                account=self.account,
                model=data["model"],
                request=route_request_from(data),
                at=timezone.now(),
                api_key=request.user.key,
            )
        if quote.decision.chosen is None:
            raise quote_refused(quote)
        return Response(quote_json(quote), headers=lifecycle_headers(quote, request))

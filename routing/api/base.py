"""What every client API view shares: key authentication, newest-first pagination, a
choice filter, links to models and the deprecation headers of a model."""

from __future__ import annotations

from rest_framework.exceptions import NotAuthenticated
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from catalog import lifecycle
from httpedge.pagination import ListCursorPagination
from httpedge.problems import Problem
from httpedge.query import invalid_parameter, query_value
from routing.accounts.auth import BearerKeyAuthentication, HasAccount, KeyPrincipal
from routing.accounts.scopes import KeyNotAllowed, check_method
from routing.core.formats import echo


class NewestFirstPagination(ListCursorPagination):
    """Jobs, notices, files and batches: newest first (the id breaks ties, so `after`
    pages exactly)."""

    ordering = ("-created_at", "-pk")
    after_field = "pk"


# A view for clients: an API key names the account (401 without one). No docstring on
# purpose: drf-spectacular would show it on every view that has none of its own.
class ClientAPIView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    permission_classes = [HasAccount]

    @property
    def account(self):
        return self.request.user.account

    def perform_authentication(self, request):
        # A method the resource does not serve is a 405 (with Allow) whoever asks,
        # before the 401 of a missing key.
        method = request.method.lower()
        if method not in self.http_method_names or not hasattr(self, method):
            self.http_method_not_allowed(request)
        super().perform_authentication(request)
        if isinstance(request.user, KeyPrincipal):
            try:
                check_method(request.user.key, request.method)
            except KeyNotAllowed as exc:
                raise key_problem(exc) from None

    def permission_denied(self, request, message=None, code=None):
        if not isinstance(request.user, KeyPrincipal):
            raise NotAuthenticated(HasAccount.message)
        super().permission_denied(request, message, code)


def key_problem(exc: KeyNotAllowed) -> Problem:
    """403: the key's scopes refuse the request (routing.accounts.scopes), the reason
    in `detail` and its slug in `type`."""
    return Problem(
        status_code=403, slug=exc.code, title="Not allowed for this key", detail=str(exc)
    )


def filter_choice(request, qs, name: str, choices):
    """Filter a list by a query parameter that must be one of `choices` (400 if not, blank
    included)."""
    wanted = query_value(request, name)
    if wanted is None:
        return qs
    if wanted not in choices:
        raise invalid_parameter(
            name, f"Unknown {name} {echo(wanted)}; one of {', '.join(choices)}."
        )
    return qs.filter(**{name: wanted})


BOOLEANS = {"true": True, "false": False}


def filter_boolean(request, qs, name: str):
    """Filter a list by a `true`/`false` query parameter (400 for anything else)."""
    wanted = query_value(request, name)
    if wanted is None:
        return qs
    if wanted.lower() not in BOOLEANS:
        raise invalid_parameter(name, f"{name} must be true or false, not {echo(wanted)}.")
    return qs.filter(**{name: BOOLEANS[wanted.lower()]})


def model_url(request, slug: str) -> str:
    return reverse("model-detail", args=[slug], request=request)


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


def ascii_id(value: str) -> int | None:
    """A path id as an int: ASCII digits only ('¹'.isdigit() is true), at most 18; None
    for anything else (the caller's 404)."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


def object_body(request) -> dict:
    """The JSON object sent (an empty body is {}); a 400 for any other JSON value."""
    if not isinstance(request.data, dict):
        raise Problem(
            status_code=400,
            slug="invalid-request",
            title="Invalid request",
            detail="The body must be a JSON object (or empty).",
        )
    return request.data

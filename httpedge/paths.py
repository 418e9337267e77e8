"""Routes that answer with and without a trailing slash (clients and SDKs differ: the
`openai` SDK asks for `/models`, curl users often type `/models/`). The route as
written keeps its name, so `reverse()` gives the same URL as before; the other
spelling is an unnamed alias to the same view (no redirect, so a POST works too),
which the OpenAPI schema does not list twice."""

from __future__ import annotations

from django.urls import URLPattern, path
from django.views.decorators.csrf import csrf_exempt


def _alias(view):
    # A plain function, not the view itself: drf-spectacular lists only DRF views (the
    # `cls` attribute), so the schema shows each operation once. The API is not
    # cookie-authenticated: no CSRF check, like the DRF view it calls.
    @csrf_exempt
    def alias(request, *args, **kwargs):
        return view(request, *args, **kwargs)

    alias.__wrapped__ = view  # for tools that walk the URLconf (not `cls`: see above)
    return alias


def both(route: str, view, name: str | None = None) -> list[URLPattern]:
    """`route` (named) and the same route with the trailing slash toggled."""
    other = route[:-1] if route.endswith("/") else f"{route}/"
    return [path(route, view, name=name), path(other, _alias(view))]

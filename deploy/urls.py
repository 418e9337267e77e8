from django.contrib import admin
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from httpedge.problems import handler404 as handler404_view
from httpedge.problemtypes import problem_index_view, problem_type_view
from routing.api.metrics import metrics_view

urlpatterns = [
    path("", RedirectView.as_view(url="/api/docs/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/v1/", include("catalog.urls")),
    path("api/v1/", include("routing.api.urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    # Unknown API paths answer problem+json even with DEBUG on (no HTML error page), for
    # every method: the API is not cookie-authenticated, so no CSRF page either.
    re_path(r"^api/", csrf_exempt(handler404_view)),
    # What each problem `type` URI means (HTML, or JSON on Accept: application/json).
    re_path(r"^problems/?$", problem_index_view, name="problem-index"),
    path("problems/<str:slug>", problem_type_view, name="problem-type"),
    # The OpenAI-compatible surface (the SDK's conventional base URL is http://host/v1).
    path("v1/", include("routing.compat.urls")),
    # Prometheus (routing/api/metrics.py): a bearer METRICS_TOKEN, or loopback only.
    path("metrics", metrics_view, name="metrics"),
]

handler400 = "httpedge.problems.handler400"
handler404 = "httpedge.problems.handler404"
handler500 = "httpedge.problems.handler500"

"""/v1/: the OpenAI-compatible routes. Every path answers with and without a trailing
slash (the SDK asks for `/models`, browsers and curl users often add `/`)."""

from __future__ import annotations

from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

from httpedge.paths import both
from routing.compat import batches, files, models, usage
from routing.compat import responses as stored
from routing.compat.errors import not_found
from routing.compat.interactive import chat_completions, responses

urlpatterns = [
    *both("models", models.ModelListView.as_view(), name="oai-model-list"),
    *both("models/<str:model_id>", models.ModelDetailView.as_view(), name="oai-model-detail"),
    *both("files", files.FileListView.as_view(), name="oai-file-list"),
    *both("files/<str:file_id>", files.FileDetailView.as_view(), name="oai-file-detail"),
    *both("files/<str:file_id>/content", files.FileContentView.as_view(), name="oai-file-content"),
    *both("batches", batches.BatchListView.as_view(), name="oai-batch-list"),
    *both("batches/<str:batch_id>", batches.BatchDetailView.as_view(), name="oai-batch-detail"),
    *both(
        "batches/<str:batch_id>/cancel",
        batches.BatchCancelView.as_view(),
        name="oai-batch-cancel",
    ),
    *both(
        "organization/usage/completions",
        usage.CompletionsUsageView.as_view(),
        name="oai-usage-completions",
    ),
    *both("organization/costs", usage.CostsView.as_view(), name="oai-costs"),
    re_path(r"^chat/completions/?$", chat_completions, name="v1-chat-completions"),
    re_path(r"^responses/?$", responses, name="v1-responses"),
    *both("responses/<str:response_id>", stored.ResponseDetailView.as_view(), name="v1-response"),
    # ... routes go above this line; unknown /v1/ paths: a JSON 404 for every method.
    re_path(r"^.*$", csrf_exempt(not_found)),
]

"""/v1/: the OpenAI-compatible routes. Every path answers with and without a trailing
slash (the SDK asks for `/models`, browsers and curl users often add `/`)."""

from __future__ import annotations

from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

from routing.compat.errors import not_found
from routing.compat.interactive import chat_completions, responses

urlpatterns = [
    re_path(r"^chat/completions/?$", chat_completions, name="v1-chat-completions"),
    re_path(r"^responses/?$", responses, name="v1-responses"),
    # ... routes go above this line; unknown /v1/ paths: a JSON 404 for every method.
    re_path(r"^.*$", csrf_exempt(not_found)),
]

"""What every /v1/ view shares: the native API's key authentication, and errors in
OpenAI's envelope instead of problem+json. Not part of the native OpenAPI schema."""

from __future__ import annotations

from routing.api.base import ClientAPIView
from routing.compat.errors import openai_exception_handler


class CompatAPIView(ClientAPIView):
    schema = None  # the /v1/ surface is OpenAI's API, documented by OpenAI and the README

    def get_exception_handler(self):
        return openai_exception_handler

"""What every /v1/ view shares: the native API's key authentication, and errors in
OpenAI's envelope instead of problem+json."""

from __future__ import annotations

from routing.api.base import ClientAPIView
from routing.compat.errors import openai_exception_handler


class CompatAPIView(ClientAPIView):
    def get_exception_handler(self):
        return openai_exception_handler

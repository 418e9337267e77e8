"""What OPTIONS answers on every API view: name, description, what it renders and
parses. DRF's default also describes the POST/PUT serializer, which fails on views that
build their bodies by hand (a 500); the OpenAPI schema is where bodies are described."""

from __future__ import annotations

from rest_framework.metadata import SimpleMetadata


class BriefMetadata(SimpleMetadata):
    def determine_metadata(self, request, view):
        return {
            "name": view.get_view_name(),
            "description": view.get_view_description(),
            "renders": [renderer.media_type for renderer in view.renderer_classes],
            "parses": [parser.media_type for parser in view.parser_classes],
        }

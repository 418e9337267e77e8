from rest_framework.pagination import CursorPagination
from rest_framework.response import Response


class ListCursorPagination(CursorPagination):
    """Cursor pagination in the list shape clients know: {"object": "list", "data": [...]}."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "slug"

    def get_paginated_response(self, data):
        return Response(
            {
                "object": "list",
                "data": data,
                "has_more": self.has_next,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
            }
        )

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["object", "data", "has_more"],
            "properties": {
                "object": {"type": "string", "example": "list"},
                "data": schema,
                "has_more": {"type": "boolean"},
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
            },
        }

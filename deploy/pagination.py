from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from deploy.problems import Problem


class ListCursorPagination(CursorPagination):
    """Cursor pagination in the list shape clients know: {"object": "list", "data": [...]}."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "slug"

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except NotFound as exc:  # DRF says 404 for a cursor it cannot read: it is bad input
            raise Problem(
                status_code=400,
                slug="invalid-cursor",
                title="Invalid cursor",
                detail="The cursor is not one this API gave out; start again without it.",
                parameter="cursor",
            ) from exc

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

import datetime as dt

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import Q
from django.utils import timezone
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from httpedge.problems import Problem
from httpedge.query import query_int, query_value
from httpedge.text import echo


def invalid_cursor() -> Problem:
    return Problem(
        status_code=400,
        slug="invalid-cursor",
        title="Invalid cursor",
        detail="The cursor is not one this API gave out; start again without it.",
        parameter="cursor",
    )


def invalid_after(after: str) -> Problem:
    return Problem(
        status_code=400,
        slug="invalid-parameter",
        title="Invalid query parameter",
        detail=f"after={echo(after)} names no item of this list; "
        "pass the id of the last item of the previous page, or start again without it.",
        parameter="after",
    )


class ListCursorPagination(CursorPagination):
    """Cursor pagination in the list shape clients know: {"object": "list", "data": [...],
    "has_more", "first_id", "last_id"}.

    Two ways to page, the same list either way: the `next` link (DRF's opaque cursor),
    or OpenAI's `after=<id>` (the items after that one in the list's order, as the
    `openai` SDK's auto-paging sends). `limit` sets the page size. The ordering ends in a
    unique field, so `after` neither skips nor repeats items that share a timestamp.
    """

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "slug"
    after_field = "slug"  # the field an item's `id` shows, which `after` names

    def get_page_size(self, request):
        """`limit`: a whole number of at least 1 (a 400 otherwise, never ignored); above
        max_page_size it is capped."""
        limit = query_int(request, self.page_size_query_param, minimum=1)
        return self.page_size if limit is None else min(limit, self.max_page_size)

    def paginate_queryset(self, queryset, request, view=None):
        # A cursor is base64 text a client can forge: one DRF cannot read is a NotFound;
        # its position is checked against the ordering field before any query runs.
        self._model = queryset.model
        after = request.query_params.get("after")
        if after:
            ordering = self.get_ordering(request, queryset, view)
            queryset = self._after(queryset, after, ordering, self.after_field)
        try:
            return super().paginate_queryset(queryset, request, view)
        except NotFound as exc:
            raise invalid_cursor() from exc

    @staticmethod
    def _after(queryset, after: str, ordering, after_field: str):
        """The items strictly after the one whose `after_field` is `after`, in `ordering`
        (400 if it is not in the list)."""
        if "\x00" in after:
            raise invalid_after(after)
        names = [f.lstrip("-") for f in ordering]
        try:
            anchor = queryset.order_by().filter(**{after_field: after}).values(*names).first()
        except (ValidationError, ValueError, TypeError) as exc:
            raise invalid_after(after) from exc
        if anchor is None:
            raise invalid_after(after)
        later, same = Q(), Q()
        for field, name in zip(ordering, names, strict=True):
            op = "lt" if field.startswith("-") else "gt"
            later |= same & Q(**{f"{name}__{op}": anchor[name]})
            same &= Q(**{name: anchor[name]})
        return queryset.filter(later)

    def decode_cursor(self, request):
        query_value(request, self.cursor_query_param)  # given once
        cursor = super().decode_cursor(request)
        if cursor is None or cursor.position is None:
            return cursor
        return cursor._replace(position=self._checked_position(cursor.position))

    def _checked_position(self, position: str) -> str:
        """The position as the database will read it; a 400 if the ordering field refuses
        it (PostgreSQL refuses NUL in text, dates out of range, bad time zones)."""
        if "\x00" in position:
            raise invalid_cursor()
        try:
            field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
        except FieldDoesNotExist:
            return position
        try:
            value = field.to_python(position)
            if isinstance(value, dt.datetime):
                if timezone.is_naive(value):
                    value = timezone.make_aware(value, dt.UTC)
                return value.astimezone(dt.UTC).isoformat()
        except (ValidationError, ValueError, OverflowError) as exc:
            raise invalid_cursor() from exc
        return position

    def get_paginated_response(self, data):
        return Response(
            {
                "object": "list",
                "data": data,
                "first_id": _id_text(data[0].get("id")) if data else None,
                "last_id": _id_text(data[-1].get("id")) if data else None,
                "has_more": self.has_next,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
            }
        )

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The `next` or `previous` link's cursor (opaque; one this API "
                "did not give out is a 400).",
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Items per page: {self.page_size} by default, at most "
                f"{self.max_page_size} (a larger number is capped).",
                "schema": {"type": "integer", "minimum": 1},
            },
        ]

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["object", "data", "has_more"],
            "properties": {
                "object": {"type": "string", "example": "list"},
                "data": schema,
                "first_id": {"type": "string", "nullable": True},
                "last_id": {"type": "string", "nullable": True},
                "has_more": {"type": "boolean"},
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
            },
        }


def _id_text(value):
    """first_id / last_id are strings, as OpenAI's lists have them, whatever the id's
    type (an API key's id is a number)."""
    return None if value is None else str(value)

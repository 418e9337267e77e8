"""Request validation in plain Python for the hot endpoints (issue 16): the quote's and
the job's fields (routing.api.serializers.RouteRequestSerializer and
JobRequestSerializer), without building a DRF serializer per request.

One rule in one place: the fields, their bounds and defaults are the serializer's
declarations (also what drf-spectacular documents), read once; the checks across
fields are `route_request_problems`, which the serializer's `validate` calls too. The
plain path handles the values clients send (JSON numbers for numbers, strings for
text) exactly as DRF does. Anything else, and every invalid request, goes through the
serializer itself, so errors are DRF's own: same messages, same fields, same order
(the RFC 9457 problem built from them is unchanged). tests/routing/api/
test_plain_validation.py compares both on a table of inputs."""

from __future__ import annotations

import math
from typing import Any

from rest_framework import fields as drf

from routing.core.limits import MAX_TASK_TOKENS


def route_request_problems(attrs: dict) -> dict[str, str] | None:
    """The checks across the route request's fields: {field: message}, None if fine."""
    total = attrs["input_tokens"] + attrs["output_tokens"]
    if total > MAX_TASK_TOKENS:
        return {
            "output_tokens": f"input_tokens + output_tokens is {total}; at most "
            f"{MAX_TASK_TOKENS} (larger than any context window)."
        }
    if attrs["output_tokens"] < attrs["turns"]:
        return {"output_tokens": f"must be at least `turns` ({attrs['turns']}): each turn answers."}
    return None


class _Unsure(Exception):
    """Not a value the plain path decides: the serializer does."""


def _check_int(field, value):
    if type(value) is not int:  # bool, float, str: DRF's coercions
        raise _Unsure
    return _bounded(field, value)


def _check_float(field, value):
    if type(value) is int:
        value = float(value)
    elif type(value) is not float or not math.isfinite(value):
        raise _Unsure
    return _bounded(field, value)


def _bounded(field, value):
    if (field.min_value is not None and value < field.min_value) or (
        field.max_value is not None and value > field.max_value
    ):
        raise _Unsure
    return value


def _check_str(field, value):
    if type(value) is not str or "\x00" in value:
        raise _Unsure
    try:
        value.encode()  # a lone surrogate: DRF's message
    except UnicodeEncodeError:
        raise _Unsure from None
    stripped = value.strip() if field.trim_whitespace else value
    if not stripped:
        if not field.allow_blank:
            raise _Unsure
        return ""
    if field.max_length is not None and len(stripped) > field.max_length:
        raise _Unsure
    if field.min_length is not None and len(stripped) < field.min_length:
        raise _Unsure
    return stripped


def _check_with_field(field, value):
    try:
        return field.run_validation(value)
    except (drf.ValidationError, drf.SkipField):
        raise _Unsure from None


def _checker(field):
    kind = type(field)
    if kind is drf.IntegerField:
        return _check_int
    if kind is drf.FloatField:
        return _check_float
    if kind is drf.CharField or (
        issubclass(kind, drf.CharField)
        and kind.to_internal_value is drf.CharField.to_internal_value
    ):
        return _check_str
    return _check_with_field  # e.g. the credits' DecimalField: the field itself


class PlainValidator:
    """`validate(data)`: the serializer's validated_data for `data`, or its
    ValidationError."""

    def __init__(self, serializer_class, *, cross_field=None, field_hooks=None):
        self.serializer_class = serializer_class
        self.cross_field = cross_field
        self.plan = []
        for name, field in serializer_class().fields.items():
            if field.read_only:
                continue
            default = field.default
            hook = (field_hooks or {}).get(name)
            self.plan.append(
                (name, field, _checker(field), field.required, default, field.allow_null, hook)
            )

    def validate(self, data: Any) -> dict:
        try:
            return self._plain(data)
        except _Unsure:
            ser = self.serializer_class(data=data)
            ser.is_valid(raise_exception=True)
            return dict(ser.validated_data)

    def _plain(self, data: Any) -> dict:
        if type(data) is not dict:
            raise _Unsure
        out = {}
        for name, field, check, required, default, allow_null, hook in self.plan:
            if name not in data:
                if required:
                    raise _Unsure
                if default is drf.empty:
                    continue
                value = default() if callable(default) else default
            else:
                value = data[name]
                if value is None:
                    if not allow_null:
                        raise _Unsure
                else:
                    value = check(field, value)
            if hook is not None:
                try:
                    value = hook(value)
                except ValueError:
                    raise _Unsure from None
            out[name] = value
        if self.cross_field is not None and self.cross_field(out):
            raise _Unsure
        return out

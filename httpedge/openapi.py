"""The OpenAPI schema tells the truth about errors: one postprocessing hook (registered in
SPECTACULAR_SETTINGS) documents the RFC 9457 problem responses every operation can give,
in one place, instead of each view listing them.

- Every operation: 400 (a bad query parameter or header, a NUL character anywhere) and
  503 with Retry-After (the database or broker is away: httpedge.problems).
- Operations that need an API key: 401. Operations with a path parameter: 404.
- Operations with a request body: 413 (over DATA_UPLOAD_MAX_MEMORY_SIZE) and 415.
- 429 with Retry-After on throttled operations: routing.api.throttling.document_rate_limits,
  the hook after this one.
Every 4xx/5xx response a view declared without a body (an `OpenApiResponse` with only a
description) gets the problem+json body too; one declared with its own body keeps it.

A second hook, `non_blank_strings`, says what `minLength: 1` cannot: DRF's CharField trims
whitespace before it checks blank, so a request string of spaces alone is refused too.
"""

from __future__ import annotations

from typing import Any

from httpedge.problems import PROBLEM_CONTENT_TYPE

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; extension members depend on `type`.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri", "description": "Stable per kind of problem."},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "The request path."},
        "parameter": {"type": "string", "description": "The query parameter or field at fault."},
        "errors": {
            "type": "array",
            "description": "Validation errors, one per field.",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}

RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 1},
        "description": "Seconds to wait before trying again.",
    }
}

EVERY_OPERATION = {
    400: "Invalid request, query parameter or header (problem+json)",
    503: "The database or the broker is unreachable for the moment; retry after "
    "`Retry-After` seconds",
}
NEEDS_KEY = {401: "Missing, invalid or revoked API key"}
HAS_PATH_PARAMETER = {404: "Nothing with this id (or not the account's)"}
HAS_BODY = {
    413: "Request body too large",
    415: "Unsupported media type",
}
WITH_RETRY_AFTER = {429, 503}


def _problem_response(description: str, code: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_CONTENT_TYPE: {"schema": PROBLEM_REF}},
    }
    if code in WITH_RETRY_AFTER:
        response["headers"] = RETRY_AFTER
    return response


def add_problem_responses(result, generator, request, public):
    """drf-spectacular postprocessing hook: see the module docstring."""
    result.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            expected = dict(EVERY_OPERATION)
            if any("ApiKey" in req for req in operation.get("security", [])):
                expected.update(NEEDS_KEY)
            if any(p.get("in") == "path" for p in operation.get("parameters", [])):
                expected.update(HAS_PATH_PARAMETER)
            if "requestBody" in operation:
                expected.update(HAS_BODY)
            responses = operation["responses"]
            for code, description in expected.items():
                responses.setdefault(str(code), {"description": description})
            for code, response in responses.items():
                if code.isdigit() and int(code) >= 400 and not response.get("content"):
                    responses[code] = _problem_response(response["description"], int(code))
            operation["responses"] = dict(sorted(responses.items()))
    return result


# "Not blank after trimming": at least one character that str.strip() would keep (Python's
# `\s` is the same set of characters as str.isspace()).
NON_BLANK = r"\S"


def non_blank_strings(result, generator, request, public):
    """drf-spectacular postprocessing hook: a request string property that must not be blank
    (`minLength: 1`, which drf-spectacular writes for a CharField without allow_blank) and has
    no pattern, enum or format of its own gets `pattern: "\\S"`: the serializer trims
    whitespace first (CharField's trim_whitespace, on for every field of this API), so a
    string of spaces alone is a 400 "may not be blank" that minLength alone does not say."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if not name.endswith("Request"):
            continue
        for prop in component.get("properties", {}).values():
            if (
                prop.get("type") == "string"
                and prop.get("minLength", 0) >= 1
                and not {"pattern", "enum", "format"} & prop.keys()
            ):
                prop["pattern"] = NON_BLANK
    return result

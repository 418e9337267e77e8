"""The JSON Schemas we generate instances of: which keywords are supported, checked
before anything runs, so a schema outside them is a 400 naming the keyword (never a
silent fallback to something else).

Supported: what OpenAI's Structured Outputs documents, plus the annotations and the
combinators the generator (jsf) honours: type, properties, required,
additionalProperties, items, enum, const, anyOf, oneOf, allOf, local $ref with
$defs/definitions, the number bounds (minimum, maximum, exclusiveMinimum,
exclusiveMaximum, multipleOf), the string bounds (minLength, maxLength, pattern,
format), the array bounds (minItems, maxItems, uniqueItems), minProperties,
maxProperties. Refused: every other constraint keyword of JSON Schema (not, if/then/else,
patternProperties, prefixItems, contains, dependentRequired ...), a remote $ref.
Unknown keywords that constrain nothing (vendor `x-` keys, annotations) pass.

`strict: true` adds OpenAI's rules: every object has `additionalProperties: false` and
lists all its properties in `required`."""

from __future__ import annotations

from typing import Any

# Keywords of JSON Schema (2020-12 and draft 7) that constrain an instance and that
# the generator does not honour: a schema using one is refused.
UNSUPPORTED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "patternProperties",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "prefixItems",
        "additionalItems",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "contentSchema",
    }
)
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
# Where a keyword's value holds subschemas: one, a list of them, or a map of them.
ONE = ("items", "additionalProperties")
MANY = ("anyOf", "oneOf", "allOf")
MAP = ("properties", "$defs", "definitions")
MAX_DEPTH = 32
MAX_NODES = 2_000


class SchemaError(ValueError):
    """A schema we do not take: `keyword` is the offending keyword, `path` where."""

    def __init__(self, message: str, keyword: str, path: str):
        super().__init__(message)
        self.keyword = keyword
        self.path = path


def check(schema: Any, where: str, *, strict: bool = False) -> None:
    """Raise SchemaError unless `schema` is a JSON Schema object we can generate
    instances of (and, with `strict`, one that follows OpenAI's strict rules)."""
    count = [0]
    _walk(schema, where, 0, strict, count)


def _walk(node: Any, path: str, depth: int, strict: bool, count: list[int]) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise SchemaError(f"{path} must be a JSON Schema object.", "type", path)
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise SchemaError(
            f"{path}: schemas may nest at most {MAX_DEPTH} levels and hold at most "
            f"{MAX_NODES} subschemas.",
            "schema",
            path,
        )
    for key in node:
        if key in UNSUPPORTED:
            raise SchemaError(
                f"{path} uses the JSON Schema keyword '{key}', which the simulated model "
                "does not support (supported: type, properties, required, "
                "additionalProperties, items, enum, const, anyOf, oneOf, allOf, $ref, $defs, "
                "the number, string and array bounds, format).",
                key,
                f"{path}.{key}",
            )
    ref = node.get("$ref")
    if ref is not None and (not isinstance(ref, str) or not ref.startswith("#")):
        raise SchemaError(
            f"{path}.$ref: only local references ('#/$defs/...') are supported.", "$ref", path
        )
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for k in kinds:
        if k not in TYPES:
            raise SchemaError(f"{path}.type: unknown type {k!r}.", "type", f"{path}.type")
    if strict and "object" in kinds:
        props = node.get("properties") or {}
        if node.get("additionalProperties") is not False:
            raise SchemaError(
                f"{path}: with strict, every object needs additionalProperties: false.",
                "additionalProperties",
                path,
            )
        missing = sorted(set(props) - set(node.get("required") or []))
        if missing:
            raise SchemaError(
                f"{path}: with strict, every property is required (missing: "
                f"{', '.join(missing[:5])}).",
                "required",
                path,
            )
    for key in ONE:
        if isinstance(node.get(key), dict):
            _walk(node[key], f"{path}.{key}", depth + 1, strict, count)
    for key in MANY:
        sub = node.get(key)
        if sub is not None:
            if not isinstance(sub, list) or not sub:
                raise SchemaError(f"{path}.{key} must be a non-empty list.", key, path)
            for i, s in enumerate(sub):
                _walk(s, f"{path}.{key}[{i}]", depth + 1, strict, count)
    for key in MAP:
        sub = node.get(key)
        if sub is not None:
            if not isinstance(sub, dict):
                raise SchemaError(f"{path}.{key} must be an object.", key, path)
            for name, s in sub.items():
                _walk(s, f"{path}.{key}.{name}", depth + 1, strict, count)

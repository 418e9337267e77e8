"""JSON text a client sent, parsed within bounds: nesting no deeper than MAX_JSON_DEPTH,
numbers finite, no NUL in a string (PostgreSQL refuses it in text). For API bodies and,
the same rule, for batch lines."""

from __future__ import annotations

import json
from typing import Any

from routing.core.limits import MAX_JSON_DEPTH


class JSONRefused(ValueError):
    """The text is not JSON this service accepts; the message says why."""


def _refuse_constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a JSON number; send a finite number.")


def _check(value: Any) -> None:
    """Depth and NUL check without recursion (the value may be deep)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_JSON_DEPTH:
                raise JSONRefused(f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels).")
            for key, child in item.items():
                if "\x00" in key:
                    raise JSONRefused("A JSON string holds a NUL character (\\u0000).")
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth > MAX_JSON_DEPTH:
                raise JSONRefused(f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels).")
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str) and "\x00" in item:
            raise JSONRefused("A JSON string holds a NUL character (\\u0000).")


def loads(text: str | bytes) -> Any:
    """The value of a JSON text; JSONRefused (a ValueError) if it is not JSON or breaks
    a bound."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise JSONRefused(f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels).") from None
    except JSONRefused:
        raise
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise JSONRefused(f"Not valid JSON: {exc}") from None
    if isinstance(value, (dict, list)) or (isinstance(value, str) and "\x00" in value):
        _check(value)
    return value

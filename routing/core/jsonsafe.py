"""JSON from a client, parsed safely: nesting bounded before a recursive parser sees it,
no NaN or Infinity, and no string PostgreSQL's text or jsonb refuses (a NUL, `\\u0000`,
or a lone surrogate). Shared by the API and batch lines."""

from __future__ import annotations

import json
import re

from routing.core.limits import MAX_JSON_DEPTH

# A JSON string (skipped whole) or a bracket: brackets inside strings do not nest.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# An escape that may decode to a character PostgreSQL refuses (checked exactly after).
_SUSPECT = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
_REFUSED = re.compile("[\x00\ud800-\udfff]")


class UnsafeJSON(ValueError):
    """Well-formed or not, JSON the service will not take; `path` names where (e.g.
    `body.prompt`), when known."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.message, self.path = message, path


def depth(text: str) -> int:
    """How deeply arrays and objects nest in `text` (brackets inside strings ignored)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # the usual case, at C speed
        return text.count("[") + text.count("{")
    level = deepest = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            level += 1
            deepest = max(deepest, level)
        elif c in "]}":
            level -= 1
    return deepest


def _refuse_constant(name: str):
    raise UnsafeJSON(f"{name} is not a JSON number.")


def _check_strings(obj, path: str) -> None:
    """UnsafeJSON naming the first string (key or value) PostgreSQL would refuse."""
    if isinstance(obj, str):
        if _REFUSED.search(obj):
            raise UnsafeJSON(_refused_message(obj, path or "a string"), path or None)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            inner = f"{path}.{k}" if path else str(k)
            if _REFUSED.search(k):
                raise UnsafeJSON(_refused_message(k, f"a key of {path or 'the object'}"), path)
            _check_strings(v, inner)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_strings(v, f"{path}[{i}]")


def _refused_message(s: str, where: str) -> str:
    if "\x00" in s:
        return f"{where} contains a NUL character (\\u0000)."
    return f"{where} contains a lone surrogate (an unpaired \\ud800-\\udfff)."


def loads(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH):
    """`json.loads` that refuses (UnsafeJSON, a ValueError) nesting deeper than
    `max_depth`, NaN and Infinity, and strings with a NUL or a lone surrogate. Malformed
    JSON raises json.JSONDecodeError as usual; undecodable bytes UnicodeDecodeError."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    if depth(text) > max_depth:
        raise UnsafeJSON(f"The JSON is nested deeper than {max_depth} levels.")
    obj = json.loads(text, parse_constant=_refuse_constant)
    if _SUSPECT.search(text) or _REFUSED.search(text):
        _check_strings(obj, "")
    return obj

"""JSON from a client, parsed safely: nesting bounded before a recursive parser sees it,
no NaN or Infinity, no number outside a double's range (`1e309` would be read as
infinity, which neither jsonb nor a sampling parameter takes), no key twice in one
object (JSON leaves it open; we refuse rather than let the last one win silently), and
no string PostgreSQL's text or jsonb refuses (a NUL, `\\u0000`, or a lone surrogate).
Each refusal names where (`temperature`, `body.messages[0].content`). Shared by the API
(request bodies, both surfaces) and batch lines."""

from __future__ import annotations

import json
import math
import re
import sys

from routing.core.limits import MAX_JSON_DEPTH

# A JSON string (skipped whole) or a bracket: brackets inside strings do not nest.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# An escape that may decode to a character PostgreSQL refuses (checked exactly after).
_SUSPECT = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
_REFUSED = re.compile("[\x00\ud800-\udfff]")
# The largest double, about 1.8e308: past it a float is infinity.
_DOUBLE_MAX = sys.float_info.max


class UnsafeJSON(ValueError):
    """Well-formed or not, JSON the service will not take; `path` names where (e.g.
    `body.prompt`), when known."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.message, self.path = message, (_cut(path, 200) if path else path)


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


class _Refused:
    """What the parser's hooks leave in place of a value they refuse (they cannot know
    where it is); `_check_values` finds the first and names its path."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message


class _Duplicated(dict):
    """An object in which `key` came more than once (the last value kept, as json does)."""

    __slots__ = ("key",)


def _constant(name: str) -> _Refused:
    return _Refused(f"{name} is not a JSON number.")


_INFINITIES = (math.inf, -math.inf)


def _out_of_range(text: str) -> _Refused:
    return _Refused(f"The number {_cut(text)} is outside the range of a double, ±1.8e308.")


def _int(text: str):
    digits = text.lstrip("-")
    if len(digits) > 309 or (len(digits) > 308 and abs(int(text)) > _DOUBLE_MAX):
        return _out_of_range(text)
    return int(text)


def _duplicated(pairs: list, obj: dict) -> _Duplicated:
    seen: set = set()
    out = _Duplicated(obj)
    out.key = next(k for k, _ in pairs if k in seen or seen.add(k))
    return out


def _cut(text: str, keep: int = 40) -> str:
    return text if len(text) <= keep else f"{text[: keep - 1]}…"


def _check_values(obj, path: str) -> None:
    """UnsafeJSON naming the first refused number or duplicated key (in document order)."""
    if isinstance(obj, _Refused):
        where = f" (at {_cut(path, 200)})" if path else ""
        raise UnsafeJSON(obj.message.removesuffix(".") + f"{where}.", path or None)
    if isinstance(obj, dict):
        for k, v in obj.items():
            inner = f"{path}.{k}" if path else str(k)
            if isinstance(obj, _Duplicated) and k == obj.key:
                message = f"The key {_cut(k)!r} appears more than once in one object"
                raise UnsafeJSON(f"{message} (at {_cut(inner, 200)}).", inner)
            _check_values(v, inner)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_values(v, f"{path}[{i}]")


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
    """`json.loads` that refuses (UnsafeJSON, a ValueError, naming where) nesting deeper
    than `max_depth`, NaN and Infinity, numbers outside a double's range, a key twice in
    one object, and strings with a NUL or a lone surrogate. Malformed JSON raises
    json.JSONDecodeError as usual; undecodable bytes UnicodeDecodeError."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    if depth(text) > max_depth:
        raise UnsafeJSON(f"The JSON is nested deeper than {max_depth} levels.")
    refused: list = []  # set by the hooks (inlined fast paths: they run for each value)

    def constant(name: str) -> _Refused:
        refused.append(name)
        return _constant(name)

    def pairs(items: list) -> dict:
        obj = dict(items)
        if len(obj) != len(items):
            obj = _duplicated(items, obj)
            refused.append(obj)
        return obj

    def number(text: str):
        value = float(text)
        if value in _INFINITIES:
            value = _out_of_range(text)
            refused.append(value)
        return value

    def integer(text: str):
        if len(text) < 309:  # within ±1e308: fine
            return int(text)
        value = _int(text)
        if type(value) is _Refused:
            refused.append(value)
        return value

    obj = json.loads(
        text,
        parse_constant=constant,
        object_pairs_hook=pairs,
        parse_float=number,
        parse_int=integer,
    )
    if refused:
        _check_values(obj, "")
    if _SUSPECT.search(text) or _REFUSED.search(text):
        _check_strings(obj, "")
    return obj

"""routing.core.jsontext: JSON within bounds, without recursion in the checks."""

from __future__ import annotations

import pytest

from routing.core import jsontext
from routing.core.limits import MAX_JSON_DEPTH


def test_plain_json_parses():
    assert jsontext.loads('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert jsontext.loads(b"3") == 3


@pytest.mark.parametrize(
    "text, words",
    [
        ("[" * 100_000 + "]" * 100_000, "too deep"),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "too deep"),
        ('{"a": ' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), "too deep"),
        ('{"n": NaN}', "NaN"),
        ('{"n": -Infinity}', "-Infinity"),
        ('{"s": "a\\u0000b"}', "NUL"),
        ('{"a\\u0000": 1}', "NUL"),
        ('"\\u0000"', "NUL"),
        ("{", "Not valid JSON"),
        (b"\xff", "Not valid JSON"),
    ],
)
def test_refused(text, words):
    with pytest.raises(jsontext.JSONRefused, match=words):
        jsontext.loads(text)


def test_exactly_the_limit_parses():
    text = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    value = jsontext.loads(text)
    for _ in range(MAX_JSON_DEPTH - 1):
        value = value[0]
    assert value == []

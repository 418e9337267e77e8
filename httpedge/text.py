"""How much of a client's name (a model, a tier, an id, a parameter's value, a path) an
error message sends back: a 100 KB model name is not echoed whole. Here, at the bottom
(the catalog imports nothing of routing), for every surface: routing.core.formats
re-exports it."""

from __future__ import annotations

ECHO_MAX = 120


def cut(value, keep: int = ECHO_MAX) -> str:
    """`value` as text, cut to `keep` characters with an ellipsis."""
    text = str(value)
    return text if len(text) <= keep else f"{text[: keep - 1]}…"


def echo(value, keep: int = ECHO_MAX) -> str:
    """`value` quoted for an error message (as `!r` would), cut to `keep` characters."""
    return repr(cut(value, keep))

"""Bounds on a task's shape and the tier words a client may use: one set of limits for
the jobs/quotes API and for batch lines."""

from __future__ import annotations

from routing.core.formats import echo
from simengine import TIERS

# Larger than any context window (1.05 M tokens): anything above is a typo.
MAX_TASK_TOKENS = 10_000_000
MAX_TURNS = 10_000
MAX_TOOL_SECONDS = 7 * 86400
MIN_DEADLINE_SECONDS = 0.001
MAX_DEADLINE_SECONDS = 30 * 86400
# A prompt (the jobs API's `prompt`, a batch line's `body.prompt` or its chat messages'
# text), in characters.
MAX_PROMPT_CHARS = 1_000_000
# Nesting of a client's JSON (arrays and objects): deeper is refused before a recursive
# parser sees it.
MAX_JSON_DEPTH = 64

# OpenAI's service_tier words are accepted as they are; `auto` lets the router choose.
TIER_ALIASES: dict[str, str | None] = {"default": "standard", "fast": "priority", "auto": None}


def tier_word(value: str | None) -> str | None:
    """The tier a client's word names (None: let the router choose); ValueError if unknown."""
    if value is None:
        return None
    value = value.strip().lower()
    if value in TIER_ALIASES:
        return TIER_ALIASES[value]
    if value not in TIERS:
        raise ValueError(
            f"Unknown tier {echo(value)}; use one of {', '.join(TIERS)} (or default, fast, auto)."
        )
    return value

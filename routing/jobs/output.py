"""A job's simulated output text (deterministic filler, as many words as tokens), whole
or as an excerpt of its first words.

Generating it costs about 0.3 s of CPU per million words, and a finished job's text
never changes: it is generated once per process and kept in a small LRU cache bounded
by characters (so repeated GETs of a large job are cheap and the cache cannot grow
without bound)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from routing.agents.answer import Answer
from routing.core.synthetic import synthetic_text
from routing.models import Job

# At most this many characters of output kept per process (~64 MB of ASCII text: about a
# dozen of the largest outputs); a text over the budget is returned and not kept.
CACHE_MAX_CHARS = 64_000_000

_cache: OrderedDict[tuple, str] = OrderedDict()
_cache_chars = 0
_lock = threading.Lock()


def cached_text(seed, words: int) -> str:
    """`synthetic_text(seed, words)`, generated once and kept while it fits the budget."""
    global _cache_chars
    key = (seed, words)
    with _lock:
        text = _cache.get(key)
        if text is not None:
            _cache.move_to_end(key)
            return text
    text = synthetic_text(seed, words)  # outside the lock: other requests go on meanwhile
    with _lock:
        if key in _cache or len(text) > CACHE_MAX_CHARS:
            return text
        _cache[key] = text
        _cache_chars += len(text)
        while _cache_chars > CACHE_MAX_CHARS:
            _, old = _cache.popitem(last=False)
            _cache_chars -= len(old)
    return text


def cache_chars() -> int:
    """Characters held by the cache (for tests and diagnostics)."""
    return _cache_chars


def clear_cache() -> None:
    global _cache_chars
    with _lock:
        _cache.clear()
        _cache_chars = 0


def _seed(job: Job):
    return job.pk.int if hasattr(job.pk, "int") else str(job.pk)


def planned_answer(job: Job) -> Answer | None:
    """The answer planned for an interactive job (None: the filler seeded by its id)."""
    if not job.answer:
        return None
    return Answer.from_stored(job.answer, job.output_tokens)


def synthetic_output(job: Job) -> str:
    """A job's simulated answer: `output_tokens` words, seeded by the job id; or the
    answer planned for it (a JSON document, tool calls as JSON, a text cut by `stop`)."""
    planned = planned_answer(job)
    if planned is None:
        return cached_text(_seed(job), job.output_tokens)
    if planned.kind == "tool_calls":
        return json.dumps([c.json() for c in planned.calls], separators=(",", ":"))
    if planned.kind == "text" and planned.chars is None:
        return cached_text(planned.seed, job.output_tokens)
    return planned.text_of(_seed(job))


# What GET /api/v1/jobs/{id} shows by default: the first words of the answer (a
# GDP-Val-sized job is 22,000 words, ~110 KB); `?output=full` gives the whole text.
EXCERPT_WORDS = 200


def output_excerpt(job: Job, words: int = EXCERPT_WORDS) -> tuple[str, bool]:
    """The first `words` words of the job's answer and whether that is less than all of
    it. The words are the answer's own first words (the generator is a seeded stream),
    so the full text is never generated for an excerpt."""
    planned = planned_answer(job)
    if job.output_tokens <= words or (planned is not None and planned.kind != "text"):
        return synthetic_output(job), False
    seed = planned.seed if planned is not None else _seed(job)
    return cached_text(seed, words), True

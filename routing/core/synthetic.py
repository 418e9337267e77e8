"""The simulated stand-in for a model's answer: deterministic words, one per token."""

from __future__ import annotations

import random

_WORDS = (
    "the model reads the task plans a change edits the code runs the tests and reports "
    "what it found with a short summary of the result"
).split()


def synthetic_text(seed, words: int) -> str:
    """`words` deterministic words for a seed: the stand-in for a model's answer (one
    word per token), marked as simulated wherever it is shown."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(words))

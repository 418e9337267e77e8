"""A job's simulated output text (deterministic filler, as many words as tokens)."""

from __future__ import annotations

import random

from routing.models import Job

_WORDS = (
    "the model reads the task plans a change edits the code runs the tests and reports "
    "what it found with a short summary of the result"
).split()


def synthetic_text(seed, words: int) -> str:
    """`words` deterministic words for a seed: the stand-in for a model's answer (one
    word per token), marked as simulated wherever it is shown."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def synthetic_output(job: Job) -> str:
    """A job's simulated answer: `output_tokens` words, seeded by the job id."""
    return synthetic_text(job.pk.int if hasattr(job.pk, "int") else str(job.pk), job.output_tokens)

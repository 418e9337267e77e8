"""A job's simulated output text (deterministic filler, as many words as tokens)."""

from __future__ import annotations

from routing.core.synthetic import synthetic_text
from routing.models import Job


def synthetic_output(job: Job) -> str:
    """A job's simulated answer: `output_tokens` words, seeded by the job id."""
    return synthetic_text(job.pk.int if hasattr(job.pk, "int") else str(job.pk), job.output_tokens)

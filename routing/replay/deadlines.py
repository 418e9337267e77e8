"""Deadlines for a trace that has none: each request's deadline is `slack` times its
unloaded Standard time (the typical run on Standard with nobody else on the pool), with
the slack drawn, seeded, from a mix of kinds of client:

| slack | share | who |
|---|---|---|
| 1.2 | 1/4 | interactive, in a hurry: Standard only while it has no queue, else a faster tier |
| 2 | 1/4 | interactive |
| 4 | 1/4 | relaxed |
| 10 | 1/4 | background work: Flex can do it |

`--slack X` gives every request the same slack instead.
"""

from __future__ import annotations

import random

SLACK_MIX: tuple[tuple[float, float], ...] = ((1.2, 0.25), (2.0, 0.25), (4.0, 0.25), (10.0, 0.25))


def draw_slacks(n: int, *, seed: int, slack: float | None = None) -> list[float]:
    """`n` slacks from the mix (the same `seed` gives the same list), or `slack` for all."""
    if slack is not None:
        return [float(slack)] * n
    rng = random.Random(f"replay-slack:{seed}")
    values = [v for v, _ in SLACK_MIX]
    weights = [w for _, w in SLACK_MIX]
    return rng.choices(values, weights=weights, k=n)

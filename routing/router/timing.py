"""A job's time, one rule for the router and the worker.

The router promises, and the worker simulates, from the same inputs:

- the engine's prediction at the pool's *outside* load (PoolLoad: traffic that is not
  ours; ``None`` when the pool has no record, which the engine reads as the tier's
  published operating point). Our own jobs never become an engine load: they take
  slots of the pool, and a full pool makes a new job wait for one (below). So a job
  of ours running on a pool changes no tier's speed;
- the wait for a slot of the pool held by our own jobs: none while the pool has room,
  else until enough of the running jobs end (``next_slot``, the rule slot booking uses);
- the spread of wait + run (``simengine.spread``): the router promises its P90, the
  worker draws one value, seeded by the job's id.

The outcome (``deadline_outcome``) compares the simulated completion with the deadline.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import simengine
from routing.core.clock import sim_scale

SLOT_EPSILON = 1e-9


@dataclass(frozen=True)
class OwnSlots:
    """Our own work on one pool at a moment: the slot share of running jobs that have
    not ended, of queued jobs (they take a slot before a new job), and, when the pool is
    nearly full, the running jobs as (finishes_at, share) by end."""

    running: float
    queued: float = 0.0
    holding: tuple[tuple[dt.datetime, float], ...] = ()

    @property
    def busy(self) -> float:
        return self.running + self.queued


def next_slot(
    holding: Sequence[tuple[dt.datetime, float]], busy: float, share: float, at: dt.datetime
) -> dt.datetime | None:
    """When a stream of `share` fits a pool whose slots are `busy` (a share): `at` if
    there is room, else when enough of the holding jobs (sorted by end) have ended.
    None: not even when all of them have ended (the rest of the busy share is queued)."""
    if busy + share <= 1.0 + SLOT_EPSILON:
        return at
    for ends, s in holding:
        busy -= s
        if busy + share <= 1.0 + SLOT_EPSILON:
            return max(ends, at)
    return None


def own_wait_seconds(own: OwnSlots | None, share: float, at: dt.datetime, run: float) -> float:
    """Simulated seconds a new job of `share` waits for a slot of our own work (0 when
    the pool has room). When the jobs ahead (queued ones) need more than the running
    jobs free, each further pool's worth waits about one run of this job (`run`)."""
    if own is None:
        return 0.0
    start = next_slot(own.holding, own.busy, share, at)
    if start is not None:
        return max(0.0, (start - at).total_seconds()) * sim_scale()
    last = own.holding[-1][0] if own.holding else at
    freed = max(0.0, (last - at).total_seconds()) * sim_scale()
    backlog = own.busy - sum(s for _, s in own.holding) + share - 1.0
    return freed + math.ceil(max(backlog, 0.0)) * run


def promise_seconds(pred: simengine.Prediction, turns: int, own_wait: float) -> float:
    """The P90 completion the router promises (simulated seconds from submission)."""
    return own_wait + simengine.completion_quantile(pred, turns)


def job_uniforms(job_id) -> tuple[float, float]:
    """Two uniforms in (0, 1) for a job's draws (wait, run), fixed by its id: a job's
    simulation is the same on every delivery, and a replay with seeded ids repeats."""
    raw = uuid.UUID(str(job_id)).bytes
    digest = hashlib.sha256(b"job-draw:" + raw).digest()
    a = int.from_bytes(digest[:8], "big")
    b = int.from_bytes(digest[8:16], "big")
    scale = float(2**64)
    return (a + 0.5) / scale, (b + 0.5) / scale


def job_draw(pred: simengine.Prediction, turns: int, job_id) -> tuple[float, float]:
    """(outside-load wait, run) of one job: the worker's simulation."""
    u_wait, u_run = job_uniforms(job_id)
    return simengine.completion_draw(pred, turns, u_wait, u_run)


@dataclass(frozen=True)
class Outcome:
    completion_seconds: float
    deadline_met: bool
    late_by_seconds: float


def deadline_outcome(completion_seconds: float, deadline_seconds: float) -> Outcome:
    """Whether a job that completed `completion_seconds` after its submission met its
    deadline, and how late it was (0 when met)."""
    late = max(0.0, completion_seconds - deadline_seconds)
    return Outcome(completion_seconds, late <= 0.0, late)

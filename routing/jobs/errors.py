"""What refuses or stops a job; the API maps each to a problem."""

from __future__ import annotations

from routing.router.quotes import Quote


class JobError(Exception):
    pass


class IdempotencyConflict(JobError):
    """Another request with this Idempotency-Key is being processed right now."""


class IdempotencyMismatch(JobError):
    """The Idempotency-Key was used before with a different request body."""


class JobNotCancellable(JobError):
    pass


class InteractiveFailed(JobError):
    """The engine could not run an accepted interactive request (nothing charged)."""


class NoTierChosen(JobError):
    def __init__(self, quote: Quote):
        self.quote = quote
        super().__init__(quote.decision.outcome)

"""Rate limits per account and per package: requests and tokens per minute, counted in
the shared cache (routing.core.ratelimit) so every replica enforces the same limit.

- An account's requests: every API request it makes (routing.api.throttling), at the
  account's `requests_per_minute`, else settings.API_THROTTLE_RATES["account"].
- An account's tokens: input + output tokens of each job or chat completion it has
  accepted, at its `tokens_per_minute`, else settings.API_TOKENS_PER_MINUTE.
- A package's requests and tokens: the jobs and completions it pays for, at the
  package's `requests_per_minute` and `tokens_per_minute` (blank: no limit).

Work is counted when accepted (job_submit, in its transaction): refused work costs no
tokens, and work refused for its rate is not written. A rate limit is not quota:
credits are only ever moved by the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from routing.core import ratelimit
from routing.core.ratelimit import Counter, Taken, give_back, peek, take
from routing.models import Account, QuotaPackage

PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class RateLimited(Exception):
    """The account or the paying package is past a rate (429, Retry-After)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


def parse_rate(rate: str) -> tuple[int, int]:
    """'1200/min' -> (1200, 60)."""
    count, period = rate.split("/")
    return int(count), PERIOD_SECONDS[period[0]]


def request_counter(account: Account) -> Counter | None:
    """The account's request limit (None: unlimited)."""
    if account.requests_per_minute is not None:
        return Counter(f"req:account-{account.pk}", account.requests_per_minute, 60)
    rate = settings.API_THROTTLE_RATES.get("account")
    if not rate:
        return None
    limit, period = parse_rate(rate)
    return Counter(f"req:account-{account.pk}", limit, period)


def token_counter(account: Account) -> Counter | None:
    """The account's token limit per minute (None: unlimited)."""
    limit = account.tokens_per_minute
    if limit is None:
        limit = settings.API_TOKENS_PER_MINUTE
    if limit is None:
        return None
    return Counter(f"tok:account-{account.pk}", limit, 60)


def package_counters(
    package_id: int | None, limits: tuple[int | None, int | None] | None = None
) -> tuple[Counter | None, Counter | None]:
    """The package's request and token counters; `limits` (requests, tokens per minute)
    as the caller read them already, else read here."""
    if package_id is None:
        return None, None
    if limits is None:
        limits = (
            QuotaPackage.objects.filter(pk=package_id)
            .values_list("requests_per_minute", "tokens_per_minute")
            .first()
        )
    rpm, tpm = limits or (None, None)
    return (
        Counter(f"req:package-{package_id}", rpm, 60) if rpm is not None else None,
        Counter(f"tok:package-{package_id}", tpm, 60) if tpm is not None else None,
    )


@dataclass
class WorkTaken:
    """What an accepted piece of work took, to give back if it is not written after all."""

    counters: list[tuple[Counter, int]]
    at: float

    def give_back(self) -> None:
        give_back(self.counters, self.at)


def take_for_work(
    *,
    account: Account,
    package_id: int | None,
    tokens: int,
    package_limits: tuple[int | None, int | None] | None = None,
    key=None,
) -> WorkTaken:
    """Count one accepted job or completion of `tokens` tokens against the account's
    tokens, the key's own requests and tokens per minute (`key`, if it sets them) and
    the paying package's requests and tokens, all or nothing. Raises
    RateLimited when one of them would go past its limit. `package_limits`: the
    package's (requests, tokens) per minute as the caller read them in this request."""
    wanted: list[tuple[Counter, int]] = []
    account_tokens = token_counter(account)
    if account_tokens is not None:
        wanted.append((account_tokens, tokens))
    if key is not None and key.requests_per_minute is not None:
        wanted.append((Counter(f"req:key-{key.pk}", key.requests_per_minute, 60), 1))
    if key is not None and key.tokens_per_minute is not None:
        wanted.append((Counter(f"tok:key-{key.pk}", key.tokens_per_minute, 60), tokens))
    package_requests, package_tokens = package_counters(package_id, package_limits)
    if package_requests is not None:
        wanted.append((package_requests, 1))
    if package_tokens is not None:
        wanted.append((package_tokens, tokens))
    at = ratelimit.now()
    result: Taken = take(wanted, at)
    if not result.ok:
        c = result.refused
        what = "tokens" if c.name.startswith("tok:") else "requests"
        whose = (
            "the paying package"
            if "package-" in c.name
            else "this key"
            if ":key-" in c.name
            else "this account"
        )
        if what == "tokens" and tokens > c.limit:
            message = (
                f"This request's {tokens} tokens exceed {whose}'s limit of {c.limit} "
                f"tokens per minute."
            )
        else:
            message = (
                f"Rate limit of {c.limit} {what} per {_per(c.period)} reached for {whose}; "
                f"try again in {result.retry_after} s."
            )
        raise RateLimited(message, result.retry_after)
    return WorkTaken(wanted, at)


def _per(period: int) -> str:
    return {1: "second", 60: "minute", 3600: "hour", 86400: "day"}.get(period, f"{period} s")


@dataclass(frozen=True)
class Standing:
    """Where a caller stands against a limit, for the x-ratelimit-* headers."""

    limit: int
    remaining: int
    reset_seconds: float


def token_standing(account: Account, at: float | None = None) -> Standing | None:
    c = token_counter(account)
    if c is None:
        return None
    at = ratelimit.now() if at is None else at
    (used,) = peek([c], at)
    return Standing(c.limit, max(0, c.limit - used), c.reset_seconds(at))


def request_standing(counter: Counter, at: float | None = None) -> Standing:
    at = ratelimit.now() if at is None else at
    (used,) = peek([counter], at)
    return Standing(counter.limit, max(0, counter.limit - used), counter.reset_seconds(at))

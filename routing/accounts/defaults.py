"""What an OpenAI-shaped request that leaves the tier or the deadline out gets: the
defaults SDK callers expect (OpenAI's own default is Standard), per account.

- `service_tier` absent, no deadline: the account's default tier (`Account.default_tier`,
  Standard unless the account set another; `auto` there means the rule below);
- `service_tier` absent with a deadline (`deadline_seconds`, `X-Deadline-Seconds`): the
  deadline is the request, as with `auto`: the cheapest tier that meets it;
- `service_tier: "auto"`: the cheapest tier that meets the deadline sent, else the
  account's default deadline (`Account.default_deadline_seconds`); with neither,
  Standard;
- any other word: that tier (`default` is Standard).
"""

from __future__ import annotations

from dataclasses import dataclass

STANDARD = "standard"
AUTO = "auto"


@dataclass(frozen=True)
class TierChoice:
    tier: str | None  # None: the router chooses the cheapest tier meeting the deadline
    deadline_seconds: float | None  # None: no deadline (routing uses its largest)
    rule: str  # which rule applied: sent, account-tier, deadline, account-deadline, standard


def tier_choice(
    *, sent: str | None, tier: str | None, deadline_seconds: float | None, account
) -> TierChoice:
    """The tier and deadline a request runs with. `sent`: the client's service_tier word
    (None: absent); `tier`: the tier that word names (None for auto)."""
    if sent is not None and tier is not None:
        return TierChoice(tier, deadline_seconds, "sent")
    if sent is None:
        if deadline_seconds is not None:
            return TierChoice(None, deadline_seconds, "deadline")
        default = getattr(account, "default_tier", None) or STANDARD
        if default != AUTO:
            return TierChoice(default, None, "account-tier")
    if deadline_seconds is not None:
        return TierChoice(None, deadline_seconds, "deadline")
    own = getattr(account, "default_deadline_seconds", None)
    if own is not None:
        return TierChoice(None, float(own), "account-deadline")
    return TierChoice(STANDARD, None, STANDARD)

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

A default tier (the account's, or Standard) that the request's API key may not use
(`ApiKey.allowed_tiers`) is not forced on it: the router chooses among the key's tiers
(the cheapest that meets the deadline; with none sent, the cheapest), as for `auto`.
Only a tier the client names itself is refused (403 `key-tier-not-allowed`): a key
limited to Flex serves SDK calls that leave `service_tier` out, on Flex.
"""

from __future__ import annotations

from dataclasses import dataclass

STANDARD = "standard"
AUTO = "auto"


@dataclass(frozen=True)
class TierChoice:
    tier: str | None  # None: the router chooses the cheapest tier meeting the deadline
    deadline_seconds: float | None  # None: no deadline (routing uses its largest)
    # which rule applied: sent, account-tier, deadline, account-deadline, standard, key-tiers
    rule: str


def tier_choice(
    *,
    sent: str | None,
    tier: str | None,
    deadline_seconds: float | None,
    account,
    allowed_tiers=(),
) -> TierChoice:
    """The tier and deadline a request runs with. `sent`: the client's service_tier word
    (None: absent); `tier`: the tier that word names (None for auto); `allowed_tiers`:
    the API key's (empty: all)."""
    choice = _choice(sent, tier, deadline_seconds, account)
    if choice.rule in DEFAULTED and allowed_tiers and choice.tier not in allowed_tiers:
        return TierChoice(None, deadline_seconds, "key-tiers")
    return choice


# The rules that pick a tier the client did not name.
DEFAULTED = frozenset({"account-tier", STANDARD})


def _choice(sent, tier, deadline_seconds, account) -> TierChoice:
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

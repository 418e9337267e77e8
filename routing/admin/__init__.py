"""The routing app's admin, one module per domain (imported here so Django finds them)."""

from routing.admin import (  # noqa: F401
    accounts,
    attention,
    batches,
    files,
    jobs,
    quota,
    retirement,
    schedules,
)

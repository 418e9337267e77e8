"""The routing app's admin, one module per domain (imported here so Django finds them)."""

from routing.admin import site  # noqa: F401

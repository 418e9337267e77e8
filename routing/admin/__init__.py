"""The routing app's admin, one module per domain (imported here so Django finds them).
The admin's home page lists what needs attention above the apps (admin/routing/index.html,
routing.admin.attention)."""

from django.contrib import admin

from routing.admin import (  # noqa: F401
    accounts,
    attention,
    batches,
    files,
    jobs,
    quota,
    retirement,
    schedules,
    webhooks,
)

admin.site.index_template = "admin/routing/index.html"

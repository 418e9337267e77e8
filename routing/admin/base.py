"""What the routing admin's pages share."""

from __future__ import annotations

import functools
import re

from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.utils.html import format_html

from routing.core.formats import credits_text, moment


@functools.cache
def _credits_display(name: str, label: str):
    """One display function per field: Django's admin matches read-only fields by
    identity (a change form excludes `get_readonly_fields` from the fields of
    `get_fieldsets`), so each call must give the same object."""

    def show(obj):
        return credits_text(getattr(obj, name))

    show.short_description = label
    show.__name__ = f"{name}_credits"
    return show


def readable_fields(model, names) -> list:
    """`names` with each credit (decimal) field swapped for a read-only display of it to
    2 decimals with thousands separators ('1,234.50', not '1234.500000')."""
    out = []
    for name in names:
        try:
            field = model._meta.get_field(name) if isinstance(name, str) else None
        except FieldDoesNotExist:
            field = None
        if isinstance(field, models.DecimalField):
            out.append(_credits_display(name, str(field.verbose_name)))
        else:
            out.append(name)
    return out


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by the services: the admin watches them (its actions, where
    any, call the services). Credits read to 2 decimals on the change page."""

    def get_fields(self, request, obj=None):
        return readable_fields(self.model, super().get_fields(request, obj))

    def get_readonly_fields(self, request, obj=None):
        return readable_fields(self.model, super().get_readonly_fields(request, obj))

    def get_fieldsets(self, request, obj=None):
        return [
            (title, {**options, "fields": readable_fields(self.model, options["fields"])})
            for title, options in super().get_fieldsets(request, obj)
        ]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# List columns that keep a change list within 1,366 px (next to the filters): ids cut to
# 8 characters (the whole id in the tooltip and on the change page), two facts stacked
# in one column, credits to 2 decimals, times to the second.


def short_id(value, keep: int = 8) -> str:
    """The first `keep` characters of an id (after a 'file-'-style prefix)."""
    text = str(value)
    prefix = text[: text.index("-") + 1] if text.startswith("file-") else ""
    return format_html('<span title="{}">{}</span>', text, text[: len(prefix) + keep])


_UUID = re.compile(r"([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def short_text(text: str, keep: int = 32) -> str:
    """Ids inside a text cut to 8 characters ('job:5d6e2a9f'), a long text cut with an
    ellipsis; the whole text in the tooltip."""
    short = _UUID.sub(r"\1", text or "")
    if len(short) > keep:
        short = short[: keep - 1] + "…"
    return format_html('<span title="{}">{}</span>', text, short or "-")


def stacked(top, below) -> str:
    """Two facts in one column: the main one, and a quieter one under it."""
    return format_html('{}<br><span class="quiet">{}</span>', top, below)


def when(value) -> str:
    """A time to the second (UTC), the date and the time each kept whole ('-' when empty)."""
    if value is None:
        return "-"
    day, time = moment(value).removesuffix(" UTC").split(" ")
    return format_html('<span class="nowrap">{}</span> <span class="nowrap">{}</span>', day, time)


def package_column(package) -> str:
    """A quota package as account over package name."""
    return stacked(package.account.name, package.name)


def delivery_state(state: str, attempts: int, last_attempt_at) -> str:
    """A delivery's state over its attempts: 'Failed' / '3 attempt(s), last 2 min ago'."""
    tries = f"{attempts} attempt(s)" if attempts else "not tried"
    last = f", last {moment(last_attempt_at)}" if last_attempt_at else ""
    return stacked(state, tries + last)

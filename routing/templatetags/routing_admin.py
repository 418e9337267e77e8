"""Template tags of routing's admin pages."""

from django import template

from routing.admin.attention import attention_lines as _attention_lines

register = template.Library()


@register.simple_tag
def attention_lines() -> list:
    """The admin home's "Needs attention" lines (routing.admin.attention)."""
    return _attention_lines()

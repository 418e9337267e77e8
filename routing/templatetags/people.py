"""Template filters that write numbers for people (admin pages); the rules are in
routing.core.formats: `{% load people %}` then `{{ n|thousands }}`, `{{ c|credits }}`,
`{{ ratio|change }}`, `{{ s|duration }}`, `{{ pct|percent }}`, `{{ t|moment }}`."""

from django import template

from routing.core import formats

register = template.Library()

register.filter("thousands", formats.thousands)
register.filter("credits", formats.credits_text)
register.filter("change", formats.change_text)
register.filter("duration", formats.duration_long)
register.filter("percent", formats.percent_text)
register.filter("moment", formats.moment)

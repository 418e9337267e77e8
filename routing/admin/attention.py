"""The admin home's "Needs attention" box: each line of routing.retirement.attention
with a link to the page that acts on it (the template tag `{% attention_lines %}` in
routing/templatetags/routing_admin.py; admin/routing/index.html, the admin's home page
template, shows them above the apps)."""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html

from routing.core.formats import percent_text
from routing.jobs.attainment import PROMISED_ATTAINMENT
from routing.retirement.attention import attention


def attention_lines() -> list:
    """Safe HTML lines, most pressing kinds first."""
    a = attention()
    lines = []
    for row in a.late:
        lines.append(
            format_html(
                "{} on {} met {} of deadlines in the last hour ({} of {} jobs; promised "
                '{}): <a href="{}">the late jobs</a>.',
                row.model,
                row.tier,
                percent_text(100 * row.share_met),
                row.met,
                row.finished,
                percent_text(100 * PROMISED_ATTAINMENT),
                reverse("admin:routing_job_changelist")
                + f"?deadline_met__exact=0&tier__id__exact={row.tier_id}"
                f"&model__id__exact={row.model_id}",
            )
        )
    for b in a.batches:
        lines.append(
            format_html(
                'Batch <a href="{}">{}</a> of {} at risk: {}.',
                reverse("admin:routing_batch_change", args=[b.batch.pk]),
                str(b.batch.pk)[:8],
                b.batch.account.name,
                b.why,
            )
        )
    for f in a.failed_notices:
        lines.append(
            format_html(
                '<a href="{}">{} notice(s)</a> about {} could not be delivered: deliver them '
                "again from the list.",
                reverse("admin:routing_notice_changelist")
                + f"?delivery__exact=failed&model__id__exact={f.model.pk}",
                f.count,
                f.model.slug,
            )
        )
    for alert in a.budget_alerts:
        what = (
            format_html(
                'package <a href="{}">{}</a>',
                reverse("admin:routing_quotapackage_change", args=[alert.package_id]),
                alert.package.name,
            )
            if alert.package_id
            else format_html(
                'key <a href="{}">{}</a>',
                reverse("admin:routing_apikey_change", args=[alert.api_key_id]),
                alert.api_key.name,
            )
        )
        lines.append(
            format_html(
                "{} of {} has used {} % of its budget ({} of {} credits).",
                what,
                alert.account.name,
                alert.threshold,
                f"{alert.spent:.2f}",
                f"{alert.limit:.2f}",
            )
        )
    if a.failed_deliveries:
        lines.append(
            format_html(
                '<a href="{}">{} webhook delivery(ies)</a> failed: send them again from the list.',
                reverse("admin:routing_webhookdelivery_changelist") + "?state__exact=failed",
                a.failed_deliveries,
            )
        )
    for p in a.pools:
        lines.append(
            format_html(
                'Pool <a href="{}">{}</a> is at {} of capacity: add nodes or move load.',
                reverse("admin:catalog_hardwarepool_change", args=[p.pool.pk]),
                p.pool.slug,
                percent_text(100 * p.utilisation),
            )
        )
    for r in a.retiring:
        m = r.model
        lines.append(
            format_html(
                '<a href="{}">{}</a> retires on {} (in {} days){}{}: <a href="{}">impact</a>.',
                reverse("admin:catalog_modelversion_change", args=[m.pk]),
                m.slug,
                m.retires_on.strftime("%Y-%m-%d"),
                r.days_left,
                format_html(", successor {}", m.successor.slug) if m.successor_id else "",
                format_html(", <strong>inside its {}-day notice period</strong>", r.notice_days)
                if r.inside_notice
                else "",
                reverse("admin:routing_retirement_impact", args=[m.slug]),
            )
        )
    return lines

"""GET /metrics: the service's figures in Prometheus' text format.

State figures are read from the database at scrape time (`StateCollector`): the same
answer from every replica, whichever one Prometheus scrapes (a dashboard takes `max`
over instances, never `sum`). Event figures (rate-limit refusals, job wait and
completion histograms, Celery task latency) are summed over this machine's processes
(routing.core.metrics).

Who may scrape: with METRICS_TOKEN set, a request with `Authorization: Bearer <token>`;
without it, loopback clients only (the address httpedge.clientip.client_ip sees, so
behind a proxy set TRUSTED_PROXY_COUNT, or a token). Anyone else gets a problem+json
401/403.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.db.models import Count, Sum
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from catalog.models import HardwarePool
from httpedge.clientip import client_ip
from httpedge.problems import problem_response
from routing.core import metrics
from routing.jobs import attainment
from routing.models import Batch, Job, Notice, PoolLoad, QuotaPackage
from routing.router.snapshot import own_occupancy


class StateCollector(Collector):
    """Gauges computed from the database on each scrape (a handful of GROUP BYs)."""

    def collect(self):
        jobs = GaugeMetricFamily(
            "routing_jobs", "Jobs by state, tier and model.", labels=["state", "tier", "model"]
        )
        rows = Job.objects.values_list("status", "tier__slug", "model__slug").annotate(
            n=Count("pk")
        )
        for state, tier, model, n in rows.order_by():
            jobs.add_metric([state, tier, model], n)
        yield jobs

        yield from self._pools()
        yield from self._attainment()

        totals = QuotaPackage.objects.aggregate(
            limit=Sum("limit"), reserved=Sum("reserved"), spent=Sum("spent")
        )
        for name, help_text in (
            ("limit", "Sum of quota packages' limits this period, in credits."),
            ("reserved", "Credits reserved (held for accepted, unsettled work)."),
            ("spent", "Credits spent this period (settled charges and draws)."),
        ):
            yield GaugeMetricFamily(
                f"routing_quota_{name}_credits", help_text, value=float(totals[name] or 0)
            )

        notices = GaugeMetricFamily(
            "routing_notices", "Notices by webhook delivery state.", labels=["delivery"]
        )
        counts = dict(Notice.objects.values_list("delivery").annotate(n=Count("pk")).order_by())
        for delivery in Notice.Delivery.values:
            notices.add_metric([delivery], counts.get(delivery, 0))
        yield notices

        batches = GaugeMetricFamily("routing_batches", "Batches by status.", labels=["status"])
        counts = dict(Batch.objects.values_list("status").annotate(n=Count("pk")).order_by())
        for status in Batch.Status.values:
            batches.add_metric([status], counts.get(status, 0))
        yield batches
        lines = Batch.objects.aggregate(
            total=Sum("total"), completed=Sum("completed"), failed=Sum("failed")
        )
        requests = GaugeMetricFamily(
            "routing_batch_requests",
            "Batch request lines: total, completed and failed, over the batches kept.",
            labels=["state"],
        )
        for state in ("total", "completed", "failed"):
            requests.add_metric([state], lines[state] or 0)
        yield requests

    def _attainment(self):
        window = f"{int(attainment.WINDOW.total_seconds())}s"
        met = GaugeMetricFamily(
            "routing_deadline_attainment",
            "Share of the jobs finished in the window (the last hour) that met their "
            "deadline, per tier and model.",
            labels=["tier", "model", "window"],
        )
        within = GaugeMetricFamily(
            "routing_promise_within_share",
            "Share of the jobs finished in the window that finished within the P90 "
            "promised at acceptance (about 0.9 when the promise is honest).",
            labels=["tier", "model", "window"],
        )
        finished = GaugeMetricFamily(
            "routing_jobs_finished_in_window",
            "Jobs finished in the window with an outcome, per tier and model.",
            labels=["tier", "model", "window"],
        )
        for row in attainment.attainment():
            labels = [row.tier, row.model, window]
            met.add_metric(labels, row.share_met)
            within.add_metric(labels, row.share_within_promise)
            finished.add_metric(labels, row.finished)
        yield met
        yield within
        yield finished

    def _pools(self):
        slugs = dict(HardwarePool.objects.values_list("pk", "slug"))
        background = dict(PoolLoad.objects.values_list("pool_id", "background_utilisation"))
        own = own_occupancy(timezone.now())
        util = GaugeMetricFamily(
            "routing_pool_utilisation",
            "Pool utilisation: background (other tenants), own (this service's running "
            "and queued jobs, as a share of the pool's slots; above 1 a queue) and total "
            "(background + own, capped at 1).",
            labels=["pool", "source"],
        )
        for pk, slug in sorted(slugs.items(), key=lambda kv: kv[1]):
            b, o = background.get(pk, 0.0), own.get(pk, 0.0)
            util.add_metric([slug, "background"], b)
            util.add_metric([slug, "own"], o)
            util.add_metric([slug, "total"], min(1.0, b + o))
        yield util


def scrape_refusal(request) -> HttpResponse | None:
    """None when `request` may scrape, else the problem to answer."""
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        if hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return None
        response = problem_response(
            status_code=401,
            slug="not-authenticated",
            title="Authentication required",
            detail="Send the metrics token: Authorization: Bearer <METRICS_TOKEN>.",
            instance=request.path,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    address = client_ip(request)
    if address and ipaddress.ip_address(address).is_loopback:
        return None
    return problem_response(
        status_code=403,
        slug="forbidden",
        title="Forbidden",
        detail="Metrics are served to loopback clients only; set METRICS_TOKEN to scrape "
        "from elsewhere.",
        instance=request.path,
    )


# No session or cookie counts here (a token or a loopback address), so CSRF protects
# nothing: exempt, so that another method is the 405 below rather than the CSRF page.
@csrf_exempt
def metrics_view(request):
    if request.method not in ("GET", "HEAD"):
        response = problem_response(
            status_code=405,
            slug="method-not-allowed",
            title="Method not allowed",
            detail=f"{request.method} is not allowed here: GET or HEAD.",
            instance=request.path,
        )
        response["Allow"] = "GET, HEAD"
        return response
    refusal = scrape_refusal(request)
    if refusal is not None:
        return refusal
    registry = metrics.event_registry()
    registry.register(StateCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

"""The objects the API answers with, built as plain dicts: quotes and their candidates,
jobs, batches. `serializers.py` documents each shape for the OpenAPI schema; building
dicts is cheaper than running DRF serializers on the router's hot path. Files and
notices are built by their domains (`file_json`, `notice_json`): a command and the
webhooks send the same objects."""

from __future__ import annotations

import math

from catalog import lifecycle
from routing.api.serializers import TimingsSerializer
from routing.batches.output import batch_outcome
from routing.batches.planning import SCHEDULED, waits_for_start
from routing.core.clock import sim_scale
from routing.core.formats import iso, json_number, timings_json
from routing.jobs.output import output_excerpt, synthetic_output
from routing.models import Batch, Job
from routing.router.quotes import Quote
from routing.router.route import Candidate


def money(value) -> str | None:
    return None if value is None else f"{value:.6f}"


def package_ref(p) -> dict | None:
    return None if p is None else {"id": p.id, "name": p.name, "independent": p.independent}


def candidate_brief(c: Candidate | None) -> dict | None:
    """A candidate in a refusal: where it would have run, how long, what cost."""
    if c is None:
        return None
    return {
        "model": c.model,
        "tier": c.tier,
        "total_seconds": None if math.isinf(c.total_seconds) else round(c.total_seconds, 3),
        "cost": str(c.cost),
    }


def candidate_json(c: Candidate) -> dict:
    """One candidate as the API shows it (documented by CandidateSerializer)."""
    return {
        "model": c.model,
        "tier": c.tier,
        "pool": c.pool,
        "device": c.device,
        "pool_utilisation": json_number(c.load),
        "predicted": timings_json(c.prediction),
        "cost": money(c.cost),
        "package": package_ref(c.package),
        "success_rate": json_number(c.success_rate),
        "expected_seconds": json_number(c.expected_seconds),
        "expected_cost": money(c.expected_cost),
        "meets_deadline": c.meets_deadline,
        "eligible": c.eligible,
        "chosen": c.chosen,
        "reason": c.reason,
    }


def quote_json(quote: Quote) -> dict:
    """The quote as the API shows it (documented by QuoteSerializer)."""
    d = quote.decision
    c = d.chosen
    resolved = quote.resolved
    served = resolved.model if resolved else None
    return {
        "object": "quote",
        "model": quote.requested_model,
        "served_model": c.model,
        "migrated_from": resolved.requested_model.slug if resolved and resolved.migrated else None,
        "recommended_tier": resolved.recommended_tier.slug
        if resolved and resolved.recommended_tier
        else None,
        "tier": c.tier,
        "service_tier": c.tier,
        "pool": c.pool,
        "deadline_seconds": quote.request.deadline_seconds,
        "predicted": timings_json(c.prediction),
        "cost": money(c.cost),
        "package": package_ref(c.package),
        "lifecycle": {
            "status": lifecycle.model_status(served, quote.at) if served else "active",
            "retires_on": served.retires_on.isoformat() if served and served.retires_on else None,
            "successor": served.successor.slug if served and served.successor_id else None,
        },
        "candidates": [candidate_json(x) for x in d.candidates],
    }


def job_json(job: Job, *, detail: bool = False, full_output: bool = False) -> dict:
    """The job as the API shows it (documented by JobSerializer); `detail` adds the
    synthetic output of a finished job: an excerpt of its first words, or the whole
    text with `full_output`."""
    p = job.predicted or {}
    sim = job.simulated
    done = job.status == Job.Status.SUCCEEDED
    body = {
        "id": str(job.pk),
        "object": "job",
        "status": job.status,
        "model": job.requested_model,
        "served_model": job.model.slug,
        "requested_tier": job.requested_tier,
        "tier": job.tier.slug,
        "service_tier": job.tier.slug,
        "pool": job.pool.slug,
        "input_tokens": job.input_tokens,
        "output_tokens": job.output_tokens,
        "delivered_tokens": job.delivered_tokens,
        "turns": job.turns,
        "tool_seconds": job.tool_seconds,
        "deadline_seconds": job.deadline_seconds,
        "created_at": iso(job.created_at),
        "started_at": iso(job.started_at),
        "finishes_at": iso(job.finishes_at),
        "finished_at": iso(job.finished_at),
        "cancelled_at": iso(job.cancelled_at),
        "predicted": {
            **timings_json({k: p.get(k) for k in TimingsSerializer().fields}),
            "start_at": iso(job.predicted_start_at),
            "completion_at": iso(job.predicted_completion_at),
            "cost": money(job.predicted_cost),
        },
        "simulated": timings_json(sim),
        "meets_deadline": (sim["total_seconds"] <= job.deadline_seconds) if sim else None,
        "promised_seconds": json_number(job.promised_seconds),
        "completion_seconds": json_number(job.completion_seconds),
        "deadline_met": job.deadline_met,
        "late_by_seconds": json_number(job.late_by_seconds),
        "usage": {"input_tokens": job.input_tokens, "output_tokens": job.output_tokens}
        if done
        else None,
        "cost": money(job.cost),
        "package": {
            "id": job.package_id,
            "name": job.package.name,
            "independent": job.package.independent,
        },
        "time_scale": sim_scale(),
        "error": job.error,
        "api_key_id": job.api_key_id,
        "user": job.user or None,
        "metadata": job.metadata or {},
    }
    if detail and done:
        if full_output:
            text, truncated = synthetic_output(job), False
        else:
            text, truncated = output_excerpt(job)
        body["output"] = {
            "simulated": True,
            "tokens": job.output_tokens,
            "truncated": truncated,
            "text": text,
        }
    return body


def batch_json(b: Batch) -> dict:
    """The batch as the API (and `manage.py batch --json`) shows it (documented by
    BatchSerializer)."""
    return {
        "id": str(b.pk),
        "object": "batch",
        "endpoint": b.endpoint,
        "input_file_id": b.input_file_id,
        "completion_window": b.completion_window,
        "window_seconds": b.window_seconds,
        "status": SCHEDULED if (waiting := waits_for_start(b)) else b.status,
        "scheduled_start_at": iso(b.start_at) if waiting else None,
        "output_file_id": b.output_file_id,
        "error_file_id": b.error_file_id,
        "errors": {"object": "list", "data": b.errors} if b.errors else None,
        "created_at": iso(b.created_at),
        "start_at": iso(b.start_at),
        "validated_at": iso(b.validated_at),
        "in_progress_at": iso(b.in_progress_at),
        "expires_at": iso(b.expires_at),
        "finalizing_at": iso(b.finalizing_at),
        "completed_at": iso(b.completed_at),
        "failed_at": iso(b.failed_at),
        "expired_at": iso(b.expired_at),
        "cancelling_at": iso(b.cancelling_at),
        "cancelled_at": iso(b.cancelled_at),
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": b.metadata,
        "plan": b.plan,
        "predicted_cost": str(b.predicted_cost) if b.predicted_cost is not None else None,
        "predicted_finish_at": iso(b.predicted_finish_at),
        "cost": str(b.cost),
        "schedule": b.schedule.name if b.schedule_id else None,
        "retry_of": str(b.retry_of_id) if b.retry_of_id else None,
        "deadline": batch_outcome(b),
        "time_scale": sim_scale(),
    }

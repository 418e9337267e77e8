"""On the retirement day: running jobs finish where they are; jobs not yet started move
to the successor when the model's policy says so; once, even if run twice or resumed
after a crash, with nothing lost or charged twice."""

import pytest

from catalog import lifecycle
from catalog.models import ModelVersion
from routing import quota
from routing.jobs import worker as jobs_worker
from routing.models import Job, QuotaReservation
from routing.retirement import reroute as retirement
from tests.helpers import job_submit

pytestmark = pytest.mark.django_db


def luna():
    return ModelVersion.objects.get(slug="gpt-5.6-luna")


def submit_luna(api):
    r = job_submit(api, model="gpt-5.6-luna", deadline_seconds=3600)
    assert r.status_code == 202, r.json()
    return r.json()["id"]


def retire_luna(policy: str):
    ModelVersion.objects.filter(slug="gpt-5.6-luna").update(in_flight_on_retirement=policy)
    model = luna()
    lifecycle.model_update_lifecycle(
        model=model, actor="t", successor=ModelVersion.objects.get(slug="gpt-5.6-terra")
    )
    lifecycle.model_retire_now(model=luna(), actor="t", notice_override="test")
    return luna()


def test_queued_jobs_move_to_the_successor_and_running_ones_finish(api, account):
    running = jobs_worker.job_run(submit_luna(api))
    queued = [submit_luna(api) for _ in range(2)]
    model = retire_luna("reroute")
    assert retirement.jobs_reroute(model=model) == {"rerouted": 2, "kept": 0}
    for job_id in queued:
        job = Job.objects.get(pk=job_id)
        assert job.model.slug == "gpt-5.6-terra" and job.rerouted_from == "gpt-5.6-luna"
        assert job.reservation.reference == f"job:{job_id}:to:gpt-5.6-terra"
        assert QuotaReservation.objects.get(reference=f"job:{job_id}").state == "released"
    running.refresh_from_db()
    assert running.model.slug == "gpt-5.6-luna" and running.status == "running"
    assert retirement.jobs_reroute(model=model) == {"rerouted": 0, "kept": 0}  # once
    # The moved jobs run and settle once, on their new reservation.
    for job_id in queued:
        job = jobs_worker.job_run(job_id)
        done = jobs_worker.job_finish(job_id, at=job.finishes_at)
        settled = QuotaReservation.objects.get(pk=done.reservation_id)
        assert done.status == "succeeded" and settled.state == "settled"
        assert done.cost == settled.charged
    jobs_worker.job_finish(running.pk, at=running.finishes_at)
    assert quota.ledger_mismatches() == []
    pkg = account.packages.get()
    assert pkg.reserved == 0


def test_with_the_default_policy_accepted_jobs_finish_on_the_retired_model(api):
    queued = submit_luna(api)
    model = retire_luna("finish")
    assert retirement.jobs_reroute(model=model) == {"rerouted": 0, "kept": 0}
    job = jobs_worker.job_run(queued)  # a retired model still runs what it accepted
    assert job.status == "running" and job.model.slug == "gpt-5.6-luna"


def test_a_crash_half_way_resumes_without_double_charging(api, account, monkeypatch):
    queued = [submit_luna(api) for _ in range(3)]
    model = retire_luna("reroute")
    real = quota.quota_reserve_for
    calls = []

    def crash_on_second(**kwargs):
        calls.append(kwargs["reference"])
        if len(calls) == 2:
            raise RuntimeError("worker died")
        return real(**kwargs)

    monkeypatch.setattr(quota, "quota_reserve_for", crash_on_second)
    with pytest.raises(RuntimeError):
        retirement.jobs_reroute(model=model)
    monkeypatch.setattr(quota, "quota_reserve_for", real)
    moved = Job.objects.filter(pk__in=queued, rerouted_from="gpt-5.6-luna").count()
    assert moved == 1  # the crashed one rolled back whole: still on Luna, still reserved
    assert retirement.jobs_reroute(model=model)["rerouted"] == 2
    assert Job.objects.filter(pk__in=queued, model__slug="gpt-5.6-terra").count() == 3
    held = QuotaReservation.objects.filter(state="held")
    assert held.count() == 3 and all(r.reference.endswith(":to:gpt-5.6-terra") for r in held)
    assert quota.ledger_mismatches() == []


def test_the_day_task_reroutes_too(api):
    from routing.tasks import apply_retirements

    submit_luna(api)
    ModelVersion.objects.filter(slug="gpt-5.6-luna").update(in_flight_on_retirement="reroute")
    model = luna()
    lifecycle.model_update_lifecycle(
        model=model, actor="t", successor=ModelVersion.objects.get(slug="gpt-5.6-terra")
    )
    # Retired by date (not through retire-now): the beat task does the day's work.
    from catalog.lifecycle import model_update_lifecycle, utc_today

    model_update_lifecycle(
        model=luna(), actor="t", retires_on=utc_today(), retirement_announced_on=utc_today()
    )
    assert apply_retirements.apply().get()["rerouted"] == 1
    assert apply_retirements.apply().get()["rerouted"] == 0

"""Job behaviour that needs PostgreSQL's locks and real concurrent connections."""

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import connection, connections

from routing import quota
from routing.accounts.accounts import account_create
from routing.jobs import submit as jobs_submit
from routing.jobs import worker as jobs_worker
from routing.models import Job
from tests.helpers import GDPVAL, ApiClient

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def dsn() -> str:
    s = connection.settings_dict
    return f"host={s['HOST']} port={s['PORT'] or 5432} dbname={s['NAME']} user={s['USER']}"


def test_a_concurrent_duplicate_gets_409(on_postgres, builtin_catalog):
    account, key = account_create(name="dup")
    api = ApiClient(key)
    with psycopg.connect(dsn(), autocommit=True) as other:
        # Another request with this key is in flight: it holds the key's lock.
        other.execute(
            "SELECT pg_advisory_lock(%s)", [jobs_submit.idempotency_lock_id(account.pk, "k")]
        )
        r = api.post_json(
            "/api/v1/jobs", GDPVAL | {"deadline_seconds": 600}, HTTP_IDEMPOTENCY_KEY="k"
        )
        assert r.status_code == 409 and r.json()["type"].endswith("/idempotency-conflict")
    r = api.post_json("/api/v1/jobs", GDPVAL | {"deadline_seconds": 600}, HTTP_IDEMPOTENCY_KEY="k")
    assert r.status_code == 202
    assert Job.objects.count() == 1


def test_racing_duplicates_make_one_job(on_postgres, builtin_catalog):
    account, key = account_create(name="race")
    barrier = threading.Barrier(8)

    def post(_):
        barrier.wait()
        try:
            r = ApiClient(key).post_json(
                "/api/v1/jobs", GDPVAL | {"deadline_seconds": 600}, HTTP_IDEMPOTENCY_KEY="same"
            )
            return r.status_code, r.json().get("id")
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(post, range(8)))
    codes = sorted(c for c, _ in results)
    assert set(codes) <= {200, 202, 409} and codes.count(202) == 1
    assert len({i for c, i in results if c in (200, 202)}) == 1
    assert Job.objects.count() == 1
    assert quota.ledger_mismatches() == []


def test_accept_and_the_worker_in_few_statements(
    on_postgres, builtin_catalog, settings, django_assert_max_num_queries
):
    # Issue 16: accept = key, packages, BEGIN, lifecycle, reservation (one statement with
    # its hold and ledger row), job, COMMIT (+ the key again, the API's); the worker
    # claims, books and settles a run that has ended in one transaction.
    settings.SIM_TIME_SCALE = 3.6e12
    _, key = account_create(name="few")
    api = ApiClient(key)
    body = GDPVAL | {"deadline_seconds": 600}
    # Warm the process's catalog, scopes and tier names.
    jobs_worker.job_run(api.post_json("/api/v1/jobs", body).json()["id"])
    with django_assert_max_num_queries(8):
        job_id = api.post_json("/api/v1/jobs", body).json()["id"]
    with django_assert_max_num_queries(7):
        job = jobs_worker.job_run(job_id)
    assert job.status == "succeeded"
    assert quota.ledger_mismatches() == []
    settings.SIM_TIME_SCALE = 1.0
    job_id = api.post_json("/api/v1/jobs", body).json()["id"]
    job = jobs_worker.job_run(job_id)
    assert job.status == "running"
    with django_assert_max_num_queries(5):
        done = jobs_worker.job_finish(job_id, at=job.finishes_at)
    assert done.status == "succeeded" and done.cost == done.predicted_cost
    assert quota.ledger_mismatches() == []

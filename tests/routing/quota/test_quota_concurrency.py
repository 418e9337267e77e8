"""Two hundred reservations at once against one package, over real, separate
PostgreSQL connections (one per thread: Django opens a connection per thread)."""

import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
from django.db import connection, connections

from routing import quota
from routing.accounts.accounts import account_create
from routing.models import QuotaPackage, QuotaReservation

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_two_hundred_concurrent_reservations_never_spend_past_the_limit(on_postgres):
    account, _ = account_create(name="race", default_credits=Decimal("50"))
    pkg = account.packages.get()
    workers, total = 40, 200
    barrier = threading.Barrier(workers)
    backends = set()

    def reserve(i: int) -> str:
        if i < workers:
            barrier.wait()  # start the first wave together
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                backends.add(cur.fetchone()[0])
            quota.quota_reserve(package_id=pkg.pk, amount="1", reference=f"r-{i}")
            return "ok"
        except quota.QuotaExhausted:
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(reserve, range(total)))

    pkg.refresh_from_db()
    assert results.count("ok") == 50 and results.count("refused") == 150
    assert pkg.reserved == Decimal(50) and pkg.remaining == 0
    assert QuotaReservation.objects.filter(package=pkg).count() == 50
    assert quota.ledger_mismatches() == []
    assert len(backends) > 1  # really several server connections


def test_concurrent_duplicates_of_one_reference_hold_once(on_postgres):
    account, _ = account_create(name="dupes", default_credits=Decimal("50"))
    pkg = account.packages.get()
    barrier = threading.Barrier(20)

    def reserve(_):
        barrier.wait()
        try:
            return quota.quota_reserve(package_id=pkg.pk, amount="5", reference="same").pk
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=20) as pool:
        ids = set(pool.map(reserve, range(20)))
    pkg.refresh_from_db()
    assert len(ids) == 1 and pkg.reserved == 5
    assert QuotaPackage.objects.get(pk=pkg.pk).remaining == 45
    assert quota.ledger_mismatches() == []

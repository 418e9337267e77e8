"""The web server under ASGI takes its PostgreSQL connections from Django's connection
pool (psycopg_pool; DB_POOL=1, deploy/settings.py): a connection Django closes at a
request's end goes back to the pool and serves the next request; one the server
closed (a restart, a terminated backend) is found out by the pool's check and
replaced, so the next request gets a connection that works."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection, connections

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pooled(on_postgres):
    """A second connection to the test database configured as deploy/settings.py does
    under DB_POOL=1 (its own alias, so its own pool)."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    made = []

    def make(**pool):
        s = copy.deepcopy(connections["default"].settings_dict)
        s["CONN_MAX_AGE"] = 0
        s["CONN_HEALTH_CHECKS"] = True
        s["OPTIONS"] = {**s.get("OPTIONS", {}), "pool": {"min_size": 0, "max_size": 4, **pool}}
        w = DatabaseWrapper(s, alias="pool-test")
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
    if made:
        made[0].close_pool()


def backend_pid(w) -> int:
    with w.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def terminate(pid: int) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_closed_connection_serves_the_next_request(pooled):
    first = pooled()
    pid = backend_pid(first)
    first.close()  # a request's end
    second = pooled()
    assert backend_pid(second) == pid


def test_a_connection_the_server_closed_is_replaced(pooled):
    first = pooled()
    pid = backend_pid(first)
    first.close()
    terminate(pid)  # what a database restart does to every pooled connection
    second = pooled()
    assert backend_pid(second) != pid  # no error: a fresh connection


def test_the_asgi_settings_turn_the_pool_on(on_postgres):
    env = {**os.environ, "DB_POOL": "1", "DATABASE_URL": os.environ["DATABASE_URL"]}
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'deploy.settings');"
        "django.setup(); from django.db import connection as c;"
        "print(c.settings_dict['CONN_MAX_AGE'], bool(c.pool))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["0", "True"]

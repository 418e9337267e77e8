"""deploy.db (PostgreSQL, the web server under ASGI): a connection Django closes at a
request's end is kept and serves the next request if it is clean; one the server closed
(a restart, a terminated backend), one left in a transaction or after an error is
dropped, and the next request gets a fresh connection that works."""

import copy

import psycopg
import pytest
from django.db import connection, connections

from deploy.db import base as pool

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def wrapper(on_postgres, settings):
    settings.DB_POOL_IDLE = 8
    settings.DB_POOL_IDLE_SECONDS = 60
    pool.close_idle()
    made = []

    def make():
        s = copy.deepcopy(connections["default"].settings_dict)
        s["ENGINE"] = "deploy.db"
        w = pool.DatabaseWrapper(s, alias="pool-test")
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
    pool.close_idle()


def backend_pid(w) -> int:
    with w.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def terminate(pid: int) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_clean_connection_serves_the_next_request(wrapper):
    first = wrapper()
    pid = backend_pid(first)
    first.close()
    assert pool.idle_count() == 1
    second = wrapper()
    assert backend_pid(second) == pid and pool.idle_count() == 0


def test_a_connection_the_server_closed_is_replaced(wrapper):
    first = wrapper()
    pid = backend_pid(first)
    first.close()
    terminate(pid)  # what a database restart does to every kept connection
    second = wrapper()
    assert backend_pid(second) != pid  # no error: a fresh connection


def test_a_connection_in_a_transaction_or_after_an_error_is_not_kept(wrapper):
    w = wrapper()
    w.ensure_connection()
    w.connection.autocommit = False
    w.connection.execute("SELECT 1")  # a transaction left open
    w.close()
    assert pool.idle_count() == 0
    w = wrapper()
    with pytest.raises(Exception), w.cursor() as cur:  # noqa: B017 - any database error
        cur.execute("SELECT no_such_column FROM no_such_table")
    w.close()
    assert pool.idle_count() == 0


def test_at_most_the_idle_limit_is_kept(wrapper, settings):
    settings.DB_POOL_IDLE = 2
    ws = [wrapper() for _ in range(3)]
    for w in ws:
        w.ensure_connection()
    for w in ws:
        w.close()
    assert pool.idle_count() == 2
    assert all(isinstance(c, psycopg.Connection) for v in pool._idle.values() for _, c in v)

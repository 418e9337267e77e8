"""The real-servers helpers themselves (tests/realparts.py): a throwaway Redis and
PostgreSQL that tests stop, kill and restart, and a Celery worker subprocess on them."""

import signal

import psycopg
import pytest
import redis

from tests.realparts import (
    PostgresServer,
    RabbitServer,
    RedisServer,
    free_port,
    migrate_project,
    pid_alive,
    project_env,
    send_task,
    start_worker,
)

pytestmark = pytest.mark.realparts

SHARED_PORTS = {5432, 6379, 5672}


def test_free_port_is_bindable_and_not_a_shared_server():
    port = free_port()
    assert port not in SHARED_PORTS
    assert 1024 < port < 65536


def test_redis_stops_and_comes_back_on_the_same_port(redis_server: RedisServer):
    port = redis_server.port
    assert port not in SHARED_PORTS
    assert redis_server.url == f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(redis_server.url, socket_timeout=1, socket_connect_timeout=1)
    assert client.ping() is True
    client.set("k", "v")

    redis_server.stop()
    assert not redis_server.is_running()
    with pytest.raises(redis.ConnectionError):
        client.ping()

    redis_server.start()
    assert redis_server.port == port
    assert client.ping() is True  # the same client reconnects to the same URL
    assert client.get("k") is None  # no persistence: a restart is an empty server

    redis_server.kill()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    redis_server.start()
    assert client.ping() is True
    client.close()


def test_rabbitmq_restarts_on_its_port_keeping_durable_messages(rabbit_server: RabbitServer):
    from kombu import Exchange, Queue

    rabbit = rabbit_server
    assert rabbit.port not in SHARED_PORTS
    assert rabbit.url == f"amqp://guest:guest@127.0.0.1:{rabbit.port}//"
    queue = Queue("q", Exchange("q", type="direct"), routing_key="q", durable=True)
    with rabbit.connection() as conn:
        conn.Producer().publish({"n": 1}, exchange=queue.exchange, routing_key="q",
                                declare=[queue], delivery_mode=2, serializer="json")  # fmt: skip
    assert rabbit.queue_depth("q") == 1

    rabbit.stop()  # a clean stop
    assert not rabbit.is_running() and not rabbit.ping()
    rabbit.start()
    assert rabbit.queue_depth("q") == 1  # durable queue, persistent message

    rabbit.kill()  # SIGKILL: the node and its Erlang helpers are gone
    assert not rabbit.ping()
    rabbit.start()
    with rabbit.connection() as conn:
        message = conn.SimpleQueue(queue).get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
    assert rabbit.queue_depth("q") == 0
    assert rabbit.queue_depth("no-such-queue") == 0


def test_postgres_cluster_restarts_and_keeps_its_data(postgres_server: PostgresServer):
    pg = postgres_server
    assert pg.port not in SHARED_PORTS
    url = pg.create_database("app")
    assert url == f"postgres://postgres@127.0.0.1:{pg.port}/app"

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
        assert conn.execute("SHOW fsync").fetchone()[0] == "off"

    held = psycopg.connect(url, autocommit=True)
    pg.restart()
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")  # the restart cut it
    held.close()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT sum(n) FROM t").fetchone()[0] == 3

    pg.stop()
    assert not pg.is_running()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    pg.start()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 2


def test_postgres_survives_a_kill(postgres_server: PostgresServer):
    pg = postgres_server
    url = pg.create_database("crash")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t AS SELECT 7 AS n")
    processes = pg.pids()
    assert len(processes) >= 4  # postmaster, checkpointer, writers, ...
    pg.kill()
    assert not any(pid_alive(pid) for pid in processes)
    pg.start()  # crash recovery
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT n FROM t").fetchone()[0] == 7


def test_celery_worker_on_throwaway_redis_and_postgres_is_killed_whole(
    redis_server, postgres_server, tmp_path
):
    env = project_env(
        postgres_server.create_database("app"), redis_server.url, var_dir=tmp_path / "var"
    )
    assert env["DJANGO_SETTINGS_MODULE"] == "deploy.settings"
    migrate_project(env)

    worker = start_worker(env, concurrency=1, name="rp")
    try:
        log = worker.wait_ready(30).log_text()
        assert f"127.0.0.1:{redis_server.port}/0" in log  # its transport: our Redis
        assert "rp@" in log

        # It runs a task against the throwaway database.
        task_id = send_task(redis_server.url, "routing.reset_quota_periods")
        worker.wait_for_log(f"Task routing.reset_quota_periods[{task_id}] succeeded", 90)

        group = worker.group_pids()
        assert worker.pid in group and len(group) >= 2  # the main process + a pool child
    finally:
        worker.kill()
    assert worker.returncode == -signal.SIGKILL
    assert worker.group_pids() == []
    assert not any(pid_alive(pid) for pid in group)

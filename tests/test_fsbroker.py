"""The quick start's embedded broker (deploy/fsbroker.py) under load from several
processes: every message received exactly once, none corrupt (issue 13: the stock
filesystem transport let a reader take a message file before it was written, and the
worker died on JSONDecodeError)."""

import json
import multiprocessing
import os
import time
import uuid
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

import deploy  # noqa: F401  (registers deploy.fsbroker as the "filesystem" transport)
from deploy import fsbroker

TRANSPORT = "deploy.fsbroker:Transport"
PRODUCERS, CONSUMERS = 4, 2


def options(folder: Path) -> dict:
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
        "polling_interval": 0.01,
    }


def connect(folder: Path, transport: str = TRANSPORT) -> Connection:
    return Connection(
        "filesystem://localhost//", transport=transport, transport_options=options(folder)
    )


def produce(folder: Path, transport: str, producer: int, messages: int) -> None:
    with connect(folder, transport) as conn, conn.SimpleQueue("hammer") as q:
        for n in range(messages):
            q.put({"producer": producer, "n": n, "pad": "x" * (n % 7) * 512})


def consume(folder: Path, transport: str, consumer: int, done) -> None:
    got, error = [], None
    try:
        with connect(folder, transport) as conn, conn.SimpleQueue("hammer") as q:
            q.consumer.qos(prefetch_count=1)
            idle = 0
            while idle < 3:
                try:
                    message = q.get(timeout=0.2)
                except Empty:
                    idle = idle + 1 if done.is_set() else 0
                    continue
                idle = 0
                body = message.payload
                assert body["pad"] == "x" * (body["n"] % 7) * 512, "corrupt body"
                got.append([body["producer"], body["n"]])
                message.ack()
    except Exception as exc:  # recorded, so the test says what went wrong
        error = f"{exc.__class__.__name__}: {exc}"
    (folder / f"consumer-{consumer}.json").write_text(json.dumps({"got": got, "error": error}))


def hammer(folder: Path, messages: int, transport: str = TRANSPORT) -> tuple[list, list]:
    """PRODUCERS processes put `messages` each while CONSUMERS processes take them."""
    for sub in ("queue", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    done = ctx.Event()
    consumers = [
        ctx.Process(target=consume, args=(folder, transport, i, done)) for i in range(CONSUMERS)
    ]
    producers = [
        ctx.Process(target=produce, args=(folder, transport, i, messages)) for i in range(PRODUCERS)
    ]
    for p in consumers + producers:
        p.start()
    try:
        for p in producers:
            p.join(120)
            assert p.exitcode == 0, "a producer failed"
        done.set()
        for p in consumers:
            p.join(120)
    finally:
        for p in consumers + producers:
            if p.is_alive():
                p.kill()
    got, errors = [], []
    for i in range(CONSUMERS):
        result = json.loads((folder / f"consumer-{i}.json").read_text())
        got += [tuple(pair) for pair in result["got"]]
        if result["error"]:
            errors.append(result["error"])
    return got, errors


@pytest.mark.parametrize(
    "messages",
    [100, pytest.param(500, marks=pytest.mark.realparts, id="500-each")],
)
def test_several_producers_and_consumers_get_every_message_exactly_once(tmp_path, messages):
    """4 producer and 2 consumer processes at once. Kombu's own filesystem transport fails
    this (consumers die on JSONDecodeError: they read files not yet written)."""
    started = time.monotonic()
    got, errors = hammer(tmp_path, messages)
    assert errors == []
    expected = {(p, n) for p in range(PRODUCERS) for n in range(messages)}
    assert len(got) == len(expected), f"{len(got) - len(set(got))} duplicates"
    assert set(got) == expected
    # Nothing left behind: no message, no temporary file, no claimed file.
    assert [f for f in os.listdir(tmp_path / "queue") if f != fsbroker.CLAIM_FOLDER] == []
    assert os.listdir(tmp_path / "queue" / fsbroker.CLAIM_FOLDER) == []
    assert time.monotonic() - started < 60


def test_an_unparseable_leftover_is_dropped_not_raised(tmp_path, caplog):
    for sub in ("queue", "control"):
        (tmp_path / sub).mkdir()
    with connect(tmp_path) as conn, conn.SimpleQueue("q") as q:
        # What the stock writer leaves when killed between open and write, then a real one.
        (tmp_path / "queue" / "1_a.q.msg").write_bytes(b"")
        (tmp_path / "queue" / "2_b.q.msg").write_bytes(b'{"body": "half')
        q.put({"ok": 1})
        message = q.get(timeout=2)
        assert message.payload == {"ok": 1}
        message.ack()
        with pytest.raises(Empty):
            q.get(timeout=0.1)
    assert sorted(os.listdir(tmp_path / "queue")) == [fsbroker.CLAIM_FOLDER]
    assert "dropped unparseable message 1_a.q.msg" in caplog.text
    assert "dropped unparseable message 2_b.q.msg" in caplog.text


def test_a_message_being_written_is_invisible_to_readers(tmp_path):
    """A temporary file (a writer mid-write, or one killed mid-write) is never read."""
    for sub in ("queue", "control"):
        (tmp_path / sub).mkdir()
    (tmp_path / "queue" / f"{fsbroker.TMP_PREFIX}123").write_bytes(b'{"body": "half')
    with connect(tmp_path) as conn, conn.SimpleQueue("q") as q:
        assert q.qsize() == 0
        with pytest.raises(Empty):
            q.get(timeout=0.1)
    assert (tmp_path / "queue" / f"{fsbroker.TMP_PREFIX}123").exists()


def test_fanout_bindings_are_written_whole(tmp_path):
    for sub in ("queue", "control"):
        (tmp_path / sub).mkdir()
    with connect(tmp_path) as conn:
        channel = conn.default_channel
        for i in range(3):
            channel._queue_bind("ex", f"rk{i}", "", f"q{i}")
        channel._queue_bind("ex", "rk0", "", "q0")  # twice: stored once
        assert sorted(q.queue for q in channel.get_table("ex")) == ["q0", "q1", "q2"]
        (tmp_path / "control" / "ex.exchange").write_bytes(b"")  # a stock writer's truncation
        assert channel.get_table("ex") == []


def test_the_project_uses_this_transport_for_filesystem_urls():
    assert Connection("filesystem://localhost//").transport_cls == "filesystem"
    assert isinstance(Connection("filesystem://localhost//").transport, fsbroker.Transport)


class FakeClock:
    """Time that passes only when someone sleeps: what a poll loop waits, counted."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def synloop_receive(folder: Path, n: int, monkeypatch) -> tuple[list, FakeClock]:
    """Receive n messages the way Celery's worker loop for polling transports does:
    prefetch 1, acks sent between drain_events(timeout=2.0) calls, never inside one,
    a message's task running in the pool while the next call polls."""
    import kombu.transport.virtual.base as virtual_base
    from kombu import Consumer, Exchange, Queue

    for sub in ("queue", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    # A fresh name: kombu remembers bindings per process, not per folder.
    name = f"synloop-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name), name)
    got, pending = [], []
    with connect(folder) as conn:
        producer = conn.Producer()
        for i in range(n):
            producer.publish(i, exchange=queue.exchange, routing_key=name, declare=[queue])
        clock = FakeClock()
        for module in (virtual_base, fsbroker):
            monkeypatch.setattr(module, "sleep", clock.sleep, raising=False)
            monkeypatch.setattr(module, "monotonic", clock.monotonic, raising=False)

        def on_message(body, message):
            got.append(body)
            pending.append(message)

        consumer = Consumer(conn.channel(), queues=[queue], callbacks=[on_message])
        consumer.qos(prefetch_count=1)
        consumer.consume()
        running, finished = [], []
        while len(got) < n and clock.now < 600:
            for message in finished:
                message.ack()
            try:
                conn.drain_events(timeout=2.0)
            except TimeoutError:
                pass
            # A task runs in the pool during the next call and is acked after it.
            finished, running, pending[:] = running, list(pending), []
        consumer.cancel()
    return got, clock


def test_a_full_prefetch_window_does_not_hold_the_worker_loop_until_its_timeout(
    tmp_path, monkeypatch
):
    """Issue 13: the quick start finished ~2 small jobs/s. Celery's loop acks between
    drain_events(timeout=2) calls; kombu's loop kept polling a full window until the
    timeout, so a worker took `prefetch` messages per 2 s (40 s of waiting here)."""
    got, clock = synloop_receive(tmp_path, 20, monkeypatch)
    assert sorted(got) == list(range(20))
    assert clock.now < 1.0, f"{clock.now:.2f} s spent waiting for 20 messages"


def test_one_listing_of_the_queue_folder_serves_every_ready_message(tmp_path, monkeypatch):
    listings = []
    real_listdir = os.listdir

    def listdir(path):
        listings.append(path)
        return real_listdir(path)

    monkeypatch.setattr(fsbroker.os, "listdir", listdir)
    got, _ = synloop_receive(tmp_path, 50, monkeypatch)
    assert sorted(got) == list(range(50))
    assert len(listings) <= 5, f"{len(listings)} listings for 50 messages"


def test_the_quick_start_polls_its_broker_often():
    from django.conf import settings

    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("the embedded broker is not configured here")
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["polling_interval"] <= 0.1

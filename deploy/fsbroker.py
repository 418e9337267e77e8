"""The quick start's embedded broker: kombu's filesystem transport, made safe for several
processes (issue 13: the worker died on `JSONDecodeError` after a few minutes of use).

Stock kombu writes a message by opening its final name, locking and then writing, while
a reader (who takes no lock) may move the file away before a byte is in it; the reader
then parses an empty or half-written file and the worker stops. It also "claims" a file
with shutil.move to the temp folder, which across filesystems is copy + delete, so two
readers can both copy the same message. Here:

- put: the message is written to a temporary name in the same folder (a name no reader
  matches) and `os.replace`d into place: a reader only ever sees whole messages;
- get: a message is claimed by `os.rename` into a private folder next to the queue (one
  atomic rename: exactly one reader wins, the others see FileNotFoundError and go on),
  read, removed; a file that does not parse (a leftover of the stock writer, a foreign
  file) is logged and removed, never raised into the worker;
- exchange tables (fanout bindings, in the control folder) are rewritten the same way,
  under a lock file, so a reader never parses a truncated table.

Registered by deploy/celery.py as kombu's "filesystem" transport, so the URL stays filesystem://.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from time import monotonic, sleep

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)

# Files being written: never match a queue's ".<queue>.msg" suffix.
TMP_PREFIX = ".tmp-"
# Claimed messages are renamed into this folder (inside data_folder_in, same filesystem).
CLAIM_FOLDER = ".claimed"


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees either no file or the whole of it."""
    folder = os.path.dirname(os.fspath(path)) or "."
    tmp = os.path.join(folder, f"{TMP_PREFIX}{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextmanager
def locked(path: Path):
    """An exclusive lock on a side file (`<path>.lock`), for read-modify-write."""
    with open(f"{path}.lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class Channel(filesystem.Channel):
    _ready_cache: dict[str, list[str]] | None = None

    def _put(self, queue, payload, **kwargs):
        filename = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_atomically(
                os.path.join(self.data_folder_out, filename), str_to_bytes(dumps(payload))
            )
        except OSError as exc:
            raise ChannelError(f"Cannot add file {filename!r} to directory: {exc}") from exc

    def _claim_folder(self) -> str:
        folder = self.processed_folder if self.store_processed else None
        if not folder:
            folder = os.path.join(self.data_folder_in, CLAIM_FOLDER)
        os.makedirs(folder, exist_ok=True)
        return folder

    def _ready(self, queue) -> list[str]:
        """The queue's message files as last listed, oldest last (popped first): one
        listing serves every message ready at the time, not just the first."""
        if self._ready_cache is None:
            self._ready_cache = {}
        cache = self._ready_cache
        names = cache.get(queue)
        if not names:
            suffix = f".{queue}.msg"
            names = sorted(
                (n for n in os.listdir(self.data_folder_in) if n.endswith(suffix)),
                reverse=True,
            )
            names = [n for n in names if not n.startswith(".")]
            cache[queue] = names
        return names

    def _get(self, queue):
        claim_folder = self._claim_folder()
        names = self._ready(queue)
        while names:
            filename = names.pop()
            claimed = os.path.join(claim_folder, f"{filename}.{uuid.uuid4().hex}")
            try:
                # Atomic within one filesystem: exactly one reader gets each message.
                os.rename(os.path.join(self.data_folder_in, filename), claimed)
            except OSError:
                continue  # another reader took it first
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            if not self.store_processed:
                try:
                    os.remove(claimed)
                except OSError:
                    pass
            try:
                return loads(bytes_to_str(payload))
            except (ValueError, UnicodeDecodeError) as exc:
                logger.error(
                    "filesystem broker: dropped unparseable message %s (%d bytes): %s",
                    filename,
                    len(payload),
                    exc,
                )
                continue
        raise Empty()

    def _size(self, queue):
        suffix = f".{queue}.msg"
        return sum(
            1
            for name in os.listdir(self.data_folder_in)
            if name.endswith(suffix) and not name.startswith(".")
        )

    def _purge(self, queue):
        suffix = f".{queue}.msg"
        count = 0
        for name in os.listdir(self.data_folder_in):
            if not name.endswith(suffix) or name.startswith("."):
                continue
            try:
                os.remove(os.path.join(self.data_folder_in, name))
                count += 1
            except OSError:
                pass  # taken by a reader meanwhile
        return count

    def _read_table(self, file: Path) -> list:
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        try:
            return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(data))]
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            logger.error("filesystem broker: unreadable exchange table %s: %s", file, exc)
            return []

    def get_table(self, exchange):
        return self._read_table(self.control_folder / f"{exchange}.exchange")

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        self.control_folder.mkdir(parents=True, exist_ok=True)
        file = self.control_folder / f"{exchange}.exchange"
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with locked(file):
            queues = self._read_table(file)
            if entry not in queues:
                queues.insert(0, entry)
                write_atomically(file, str_to_bytes(dumps(queues)))


class Transport(filesystem.Transport):
    Channel = Channel

    # While a prefetch window is full, how long to wait before handing control back so
    # the caller can ack (short: the worker's pool sits idle meanwhile).
    blocked_interval = 0.005

    def drain_events(self, connection, timeout=None):
        """Deliver one message; while none can be taken, poll every polling_interval.

        Kombu's loop keeps polling until `timeout` even when no channel may take a
        message (its prefetch window is full of unacked ones). Celery's worker loop for
        polling transports calls this with timeout=2 and only sends its acks between
        calls, so it would take at most `prefetch` messages per 2 s: the ceiling of
        ~1 job/s issue 13 measured. Here a full window ends the call after
        `blocked_interval` (TimeoutError, i.e. socket.timeout, which callers treat as "nothing yet"), so
        the acks go out and the next messages come in."""
        started = monotonic()
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            # A channel whose window is full waits for acks its caller sends between
            # calls (the worker's task channel; its control channel never blocks).
            blocked = any(not ch.qos.can_consume() for ch in self.channels if ch._consumers)
            interval = self.blocked_interval if blocked else self.polling_interval
            if timeout is not None:
                interval = min(interval or 0, max(0.0, timeout - (monotonic() - started)))
            if interval:
                sleep(interval)
            if blocked or (timeout is not None and monotonic() - started >= timeout):
                raise TimeoutError()

    # Kombu's filesystem transport keeps its broker state in a class attribute; this one
    # has its own (same behaviour: one state per process).
    global_state = filesystem.virtual.BrokerState()

"""The throwaway database a replay runs on: a new database with the real schema (every
migration, so the occupancy triggers and constraints production has), dropped at the
end whatever happens. PostgreSQL: a database named `replay_<pid>_<random>` on the
configured server (the configured user must be allowed to create databases); SQLite: a
file in a temporary folder. The configured database itself is never touched."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator

from django.conf import settings
from django.db import connections
from django.test.utils import override_settings

# The replay's process runs the service's code with its own settings: simulated seconds
# are wall seconds (timestamps are the simulated clock), no account rate limit (the
# trace's arrivals are the test), and a cache of its own in memory (the catalog's
# generation and the pools' state are read on every request; nothing is shared with a
# running service), no query log (DEBUG keeps every statement).
REPLAY_SETTINGS = {
    "DEBUG": False,
    "SIM_TIME_SCALE": 1.0,
    "API_TOKENS_PER_MINUTE": None,
    "CACHES": {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "replay",
            "KEY_PREFIX": "replay",
        }
    },
}


@contextlib.contextmanager
def throwaway_database(alias: str = "default") -> Iterator[str]:
    """Create, migrate and switch `alias` to a new database; drop it and switch back on
    exit. Yields the new database's name."""
    conn = connections[alias]
    if conn.in_atomic_block:
        raise RuntimeError("a throwaway database cannot be created inside a transaction")
    old_name = conn.settings_dict["NAME"]
    test = conn.settings_dict.setdefault("TEST", {})
    saved_test = dict(test)
    folder = None
    if conn.vendor == "sqlite":
        folder = tempfile.mkdtemp(prefix="replay-")
        test["NAME"] = os.path.join(folder, "replay.sqlite3")
    else:
        test["NAME"] = f"replay_{os.getpid()}_{secrets.token_hex(4)}"
    created = False
    try:
        name = conn.creation.create_test_db(
            verbosity=0, autoclobber=True, serialize=False, keepdb=False
        )
        created = True
        yield name
    finally:
        try:
            if created:
                try:
                    conn.creation.destroy_test_db(old_name, verbosity=0, keepdb=False)
                except FileNotFoundError:  # SQLite: the file went already; so be it
                    settings.DATABASES[alias]["NAME"] = old_name
                    conn.settings_dict["NAME"] = old_name
            else:  # creation failed half-way: whatever exists goes, the name comes back
                conn.close()
                settings.DATABASES[alias]["NAME"] = old_name
                conn.settings_dict["NAME"] = old_name
                if conn.vendor != "sqlite":
                    with contextlib.suppress(Exception):
                        conn.creation._destroy_test_db(test["NAME"], verbosity=0)
        finally:
            test.clear()
            test.update(saved_test)
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def replay_settings() -> Iterator[None]:
    with override_settings(**REPLAY_SETTINGS):
        yield

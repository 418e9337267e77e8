"""Wait until the database, the broker and the shared cache answer (and with --migrated,
until every migration is applied), then exit 0; exit 1 after WAIT_READY_SECONDS
(default 180).

The image's entry point runs it before web, the workers, beat and migrate, so a container started before its dependencies, or before the
migrate job has finished, waits instead of failing: compose's health-gated order and
Kubernetes' migrate Job then only make the wait short."""

from __future__ import annotations

import os
import sys
import time

import django


def problems(migrated: bool) -> list[str]:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from httpedge.health import broker_ok, cache_ok, database_ok

    found = []
    db_ok, db_state = database_ok()
    for name, (ok, state) in (
        ("database", (db_ok, db_state)),
        ("broker", broker_ok()),
        ("cache", cache_ok()),
    ):
        if not ok:
            found.append(f"{name} {state}")
    if db_ok and migrated:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            found.append(f"{len(plan)} migrations not applied yet (the migrate job runs them)")
    connection.close()
    return found


def main(argv: list[str]) -> int:
    migrated = "--migrated" in argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy.settings")
    django.setup()
    limit = float(os.environ.get("WAIT_READY_SECONDS", "180"))
    started = time.monotonic()
    said = ""
    while True:
        found = problems(migrated)
        if not found:
            return 0
        waited = time.monotonic() - started
        if waited > limit:
            print(f"wait: gave up after {limit:.0f}s: {'; '.join(found)}", file=sys.stderr)
            return 1
        if "; ".join(found) != said:
            said = "; ".join(found)
            print(f"wait: {said}", file=sys.stderr)
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The triggers that keep routing_pooloccupancy equal to the active jobs (see
routing.models.jobs.PoolOccupancy). Used by migration 0008; `FILL` recomputes the
totals from the jobs (also what `occupancy_reconcile` writes)."""

STRIPES = 8

_ROW = """
    INSERT INTO routing_pooloccupancy
        (pool_id, stripe, queued_share, running_share, queued, running)
    VALUES ({r}.pool_id, {stripe},
        CASE WHEN {r}.status = 'queued' THEN {sign} {r}.slot_share ELSE 0 END,
        CASE WHEN {r}.status = 'running' THEN {sign} {r}.slot_share ELSE 0 END,
        CASE WHEN {r}.status = 'queued' THEN {sign} 1 ELSE 0 END,
        CASE WHEN {r}.status = 'running' THEN {sign} 1 ELSE 0 END)
    ON CONFLICT (pool_id, stripe) DO UPDATE SET
        queued_share = routing_pooloccupancy.queued_share + excluded.queued_share,
        running_share = routing_pooloccupancy.running_share + excluded.running_share,
        queued = routing_pooloccupancy.queued + excluded.queued,
        running = routing_pooloccupancy.running + excluded.running;"""

ACTIVE = "('queued', 'running')"

POSTGRES_UP = f"""
CREATE OR REPLACE FUNCTION routing_job_occupancy() RETURNS trigger AS $$
DECLARE
    s smallint := floor(random() * {STRIPES})::smallint;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status = OLD.status AND NEW.pool_id = OLD.pool_id
            AND NEW.slot_share = OLD.slot_share THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN {ACTIVE} THEN
        {_ROW.format(r="OLD", stripe="s", sign="-")}
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status IN {ACTIVE} THEN
        {_ROW.format(r="NEW", stripe="s", sign="")}
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER routing_job_occupancy
    AFTER INSERT OR DELETE OR UPDATE OF status, pool_id, slot_share ON routing_job
    FOR EACH ROW EXECUTE FUNCTION routing_job_occupancy();
"""

POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS routing_job_occupancy ON routing_job;
DROP FUNCTION IF EXISTS routing_job_occupancy();
"""

# SQLite: one writer at a time, so one stripe (0) is enough.
SQLITE_UP = [
    f"""CREATE TRIGGER routing_job_occupancy_ins AFTER INSERT ON routing_job
    WHEN NEW.status IN {ACTIVE} BEGIN {_ROW.format(r="NEW", stripe="0", sign="")} END""",
    f"""CREATE TRIGGER routing_job_occupancy_del AFTER DELETE ON routing_job
    WHEN OLD.status IN {ACTIVE} BEGIN {_ROW.format(r="OLD", stripe="0", sign="-")} END""",
    f"""CREATE TRIGGER routing_job_occupancy_upd_old
    AFTER UPDATE OF status, pool_id, slot_share ON routing_job
    WHEN OLD.status IN {ACTIVE} AND NOT (NEW.status = OLD.status AND
        NEW.pool_id = OLD.pool_id AND NEW.slot_share = OLD.slot_share)
    BEGIN {_ROW.format(r="OLD", stripe="0", sign="-")} END""",
    f"""CREATE TRIGGER routing_job_occupancy_upd_new
    AFTER UPDATE OF status, pool_id, slot_share ON routing_job
    WHEN NEW.status IN {ACTIVE} AND NOT (NEW.status = OLD.status AND
        NEW.pool_id = OLD.pool_id AND NEW.slot_share = OLD.slot_share)
    BEGIN {_ROW.format(r="NEW", stripe="0", sign="")} END""",
]
SQLITE_DOWN = [
    f"DROP TRIGGER IF EXISTS routing_job_occupancy_{x}"
    for x in ("ins", "del", "upd_old", "upd_new")
]

FILL = f"""
INSERT INTO routing_pooloccupancy (pool_id, stripe, queued_share, running_share, queued, running)
SELECT pool_id, 0,
    COALESCE(SUM(CASE WHEN status = 'queued' THEN slot_share END), 0),
    COALESCE(SUM(CASE WHEN status = 'running' THEN slot_share END), 0),
    COUNT(CASE WHEN status = 'queued' THEN 1 END),
    COUNT(CASE WHEN status = 'running' THEN 1 END)
FROM routing_job WHERE status IN {ACTIVE} GROUP BY pool_id
"""


def install(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cur:
        if conn.vendor == "postgresql":
            cur.execute(POSTGRES_UP)
        elif conn.vendor == "sqlite":
            for sql in SQLITE_UP:
                cur.execute(sql)
        else:
            raise RuntimeError(f"no occupancy triggers for {conn.vendor}")
        cur.execute("DELETE FROM routing_pooloccupancy")
        cur.execute(FILL)


def uninstall(apps, schema_editor):
    conn = schema_editor.connection
    with conn.cursor() as cur:
        for sql in [POSTGRES_DOWN] if conn.vendor == "postgresql" else SQLITE_DOWN:
            cur.execute(sql)


def reinstall_on_sqlite(apps, schema_editor):
    """SQLite rebuilds routing_job to alter or add some columns, dropping its triggers:
    a migration that does so puts the occupancy triggers back with this (PostgreSQL
    alters in place and keeps them)."""
    if schema_editor.connection.vendor == "sqlite":
        uninstall(apps, schema_editor)
        install(apps, schema_editor)

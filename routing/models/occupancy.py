"""Pool occupancy, the rule written once: an active job (Job.ACTIVE) holds its
`slot_share` of its pool, counted by status into the columns of PoolOccupancy
(`COUNTED`). From it come the triggers that keep routing_pooloccupancy equal to the
active jobs (PostgreSQL and SQLite; installed by migrations 0009 and 0011), `FILL`,
which recomputes the totals from the jobs (the migration and `occupancy_reconcile`), and
`totals_by_status`, the same totals as ORM aggregates (`occupancy_mismatches` compares
the two). Runtime code imports this module; the migrations import it too (never the
reverse)."""

from __future__ import annotations

from django.db.models import Count, Q, Sum

from routing.models.jobs import Job

# Status -> (its slot share's column, its count's column) in routing_pooloccupancy.
COUNTED: dict[str, tuple[str, str]] = {
    Job.Status.QUEUED: ("queued_share", "queued"),
    Job.Status.RUNNING: ("running_share", "running"),
}
assert tuple(COUNTED) == Job.ACTIVE, "every active status is counted, and only those"

STRIPES = 8

SHARE_COLUMNS = [share for share, _count in COUNTED.values()]
COUNT_COLUMNS = [count for _share, count in COUNTED.values()]
COLUMNS = SHARE_COLUMNS + COUNT_COLUMNS
ACTIVE = "(" + ", ".join(f"'{status}'" for status in COUNTED) + ")"


def _case(r: str, status: str, value: str, sign: str) -> str:
    return f"CASE WHEN {r}.status = '{status}' THEN {sign} {value} ELSE 0 END"


def _values(r: str, sign: str) -> str:
    shares = [_case(r, status, f"{r}.slot_share", sign) for status in COUNTED]
    counts = [_case(r, status, "1", sign) for status in COUNTED]
    return ",\n        ".join(shares + counts)


def _row(r: str, stripe: str, sign: str) -> str:
    """The upsert adding (sign "") or taking off (sign "-") the job row `r` (NEW or OLD)."""
    updates = ",\n        ".join(f"{c} = routing_pooloccupancy.{c} + excluded.{c}" for c in COLUMNS)
    return f"""
    INSERT INTO routing_pooloccupancy
        (pool_id, stripe, {", ".join(COLUMNS)})
    VALUES ({r}.pool_id, {stripe},
        {_values(r, sign)})
    ON CONFLICT (pool_id, stripe) DO UPDATE SET
        {updates};"""


# The columns whose change moves a job's share (a change of anything else: no write).
UNCHANGED = (
    "NEW.status = OLD.status AND NEW.pool_id = OLD.pool_id AND NEW.slot_share = OLD.slot_share"
)
WATCHED = "status, pool_id, slot_share"

POSTGRES_UP = f"""
CREATE OR REPLACE FUNCTION routing_job_occupancy() RETURNS trigger AS $$
DECLARE
    s smallint := floor(random() * {STRIPES})::smallint;
BEGIN
    IF TG_OP = 'UPDATE' AND {UNCHANGED} THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN {ACTIVE} THEN
        {_row("OLD", "s", "-")}
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status IN {ACTIVE} THEN
        {_row("NEW", "s", "")}
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER routing_job_occupancy
    AFTER INSERT OR DELETE OR UPDATE OF {WATCHED} ON routing_job
    FOR EACH ROW EXECUTE FUNCTION routing_job_occupancy();
"""

POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS routing_job_occupancy ON routing_job;
DROP FUNCTION IF EXISTS routing_job_occupancy();
"""

# SQLite: one writer at a time, so one stripe (0) is enough.
SQLITE_UP = [
    f"""CREATE TRIGGER routing_job_occupancy_ins AFTER INSERT ON routing_job
    WHEN NEW.status IN {ACTIVE} BEGIN {_row("NEW", "0", "")} END""",
    f"""CREATE TRIGGER routing_job_occupancy_del AFTER DELETE ON routing_job
    WHEN OLD.status IN {ACTIVE} BEGIN {_row("OLD", "0", "-")} END""",
    f"""CREATE TRIGGER routing_job_occupancy_upd_old
    AFTER UPDATE OF {WATCHED} ON routing_job
    WHEN OLD.status IN {ACTIVE} AND NOT ({UNCHANGED})
    BEGIN {_row("OLD", "0", "-")} END""",
    f"""CREATE TRIGGER routing_job_occupancy_upd_new
    AFTER UPDATE OF {WATCHED} ON routing_job
    WHEN NEW.status IN {ACTIVE} AND NOT ({UNCHANGED})
    BEGIN {_row("NEW", "0", "")} END""",
]
SQLITE_DOWN = [
    f"DROP TRIGGER IF EXISTS routing_job_occupancy_{x}"
    for x in ("ins", "del", "upd_old", "upd_new")
]

_SUMS = [
    f"COALESCE(SUM(CASE WHEN status = '{status}' THEN slot_share END), 0)" for status in COUNTED
]
_COUNTS = [f"COUNT(CASE WHEN status = '{status}' THEN 1 END)" for status in COUNTED]
_FILL_VALUES = ",\n    ".join(_SUMS + _COUNTS)
FILL = f"""
INSERT INTO routing_pooloccupancy (pool_id, stripe, {", ".join(COLUMNS)})
SELECT pool_id, 0,
    {_FILL_VALUES}
FROM routing_job WHERE status IN {ACTIVE} GROUP BY pool_id
"""


def totals_by_status() -> dict:
    """The ORM aggregates of the same totals (for `Job.objects.values("pool_id")`)."""
    out: dict = {}
    for status, (share, _count) in COUNTED.items():
        out[share] = Sum("slot_share", filter=Q(status=status), default=0.0)
    for status, (_share, count) in COUNTED.items():
        out[count] = Count("id", filter=Q(status=status))
    return out


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
    """For a migration that makes SQLite rebuild routing_job (an altered column, a new
    foreign key), which drops its triggers: put the occupancy triggers back.
    PostgreSQL alters in place and keeps them."""
    if schema_editor.connection.vendor == "sqlite":
        uninstall(apps, schema_editor)
        install(apps, schema_editor)

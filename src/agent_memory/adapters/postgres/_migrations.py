"""Versioned schema migrations, applied at startup under an advisory lock.

Every statement is built with `psycopg.sql` (identifiers quoted); the schema
name is the only variable part. Each migration runs once per schema; the
applied versions are recorded in `<schema>.schema_version`. Two processes
starting together serialise on `pg_advisory_xact_lock(MIGRATION_LOCK)`, so the
second one finds the work done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection, sql

__all__ = [
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "SCHEMA_VERSION",
    "counts_table",
    "migrate",
    "zero_vectors_index",
]

# A fixed 64-bit key for pg_advisory_xact_lock (the ASCII of "agmemmig").
MIGRATION_LOCK = 0x61676D656D6D6967

_Builder = Callable[[str], list[sql.Composed]]


def _v1(schema: str) -> list[sql.Composed]:
    s = sql.Identifier(schema)

    def t(name: str) -> sql.Identifier:
        return sql.Identifier(schema, name)

    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            ' identity text COLLATE "C" PRIMARY KEY,'
            " model text NOT NULL, dimension integer NOT NULL, revision text NOT NULL,"
            " table_name text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
        ).format(t("spaces")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            ' domain text COLLATE "C" NOT NULL, id text COLLATE "C" NOT NULL,'
            " agent text NOT NULL, action text NOT NULL, outcome text NOT NULL,"
            " summary text NOT NULL, occurred_at timestamptz NOT NULL,"
            " recorded_at timestamptz NOT NULL, origin_request_id text,"
            " summary_source text NOT NULL, fallback_reason text, time_basis text NOT NULL,"
            ' entities text[] COLLATE "C" NOT NULL, entity_source text NOT NULL,'
            ' user_id text COLLATE "C", importance double precision NOT NULL,'
            " metadata json NOT NULL, is_global boolean NOT NULL,"
            " PRIMARY KEY (domain, id))"
        ).format(t("events")),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS events_domain_time"
            " ON {} (domain, occurred_at DESC, id DESC)"
        ).format(t("events")),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS events_global_time ON {} (occurred_at DESC, id DESC)"
            " WHERE is_global"
        ).format(t("events")),
        sql.SQL("CREATE INDEX IF NOT EXISTS events_entities ON {} USING gin (entities)").format(
            t("events")
        ),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS events_user ON {} (user_id) WHERE user_id IS NOT NULL"
        ).format(t("events")),
        sql.SQL("CREATE INDEX IF NOT EXISTS events_time ON {} (occurred_at)").format(t("events")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            ' scope text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,'
            ' owner text COLLATE "C", token bigint NOT NULL,'
            " expires_at timestamptz NOT NULL, payload bytea NOT NULL,"
            " PRIMARY KEY (scope, key))"
        ).format(t("leases")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            ' scope text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,'
            " value bytea NOT NULL, expires_at timestamptz,"
            " PRIMARY KEY (scope, key))"
        ).format(t("cache")),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS cache_expiry ON {} (expires_at)"
            " WHERE expires_at IS NOT NULL"
        ).format(t("cache")),
        # Token count of a tsvector (positions, not distinct lexemes): the document
        # length BM25 normalises by, stored per record as a generated column.
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}(tsvector) RETURNS integer"
            " LANGUAGE sql IMMUTABLE PARALLEL SAFE"
            " AS 'SELECT coalesce(sum(cardinality(positions)), 0)::integer FROM unnest($1)'"
        ).format(t("tsv_tokens")),
        sql.SQL("COMMENT ON SCHEMA {} IS 'agent-memory storage'").format(s),
    ]


def _v2(schema: str) -> list[sql.Composed]:
    """Event retention counts from ingestion: the purge reads `recorded_at`."""
    events = sql.Identifier(schema, "events")
    return [
        sql.SQL("CREATE INDEX IF NOT EXISTS events_recorded ON {} (recorded_at)").format(events),
        sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(schema, "events_time")),
    ]


def _v3(schema: str) -> list[sql.Composed]:
    """The audit trail (`audit.py`): a table no erase touches."""
    audit = sql.Identifier(schema, "audit_log")
    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            ' id text COLLATE "C" PRIMARY KEY, at timestamptz NOT NULL,'
            ' tenant text COLLATE "C" NOT NULL, entry jsonb NOT NULL)'
        ).format(audit),
        sql.SQL("CREATE INDEX IF NOT EXISTS audit_log_order ON {} (at DESC, id DESC)").format(
            audit
        ),
    ]


# The trigger function keeping a space's record counts (`<table>_counts`: rows per
# owner, namespace and kind) in step with its records table, in the writing
# statement's own transaction. One statement-level trigger per event, reading the
# statement's transition tables: a COPY of 5,000 rows is one upsert of a few
# counter rows, not 5,000. The upsert takes the counter rows' locks in key order,
# so concurrent writers wait for each other instead of deadlocking; a counter that
# reaches zero is deleted. TRUNCATE empties the counts.
_COUNT_RECORDS = """
CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        EXECUTE format('DELETE FROM %s', TG_ARGV[0]);
        RETURN NULL;
    END IF;
    EXECUTE format(
        'INSERT INTO %s AS c (owner, namespace, kind, n)'
        ' SELECT owner, namespace, kind, sum(d) FROM (%s) AS p'
        ' GROUP BY owner, namespace, kind HAVING sum(d) <> 0'
        ' ORDER BY owner, namespace, kind'
        ' ON CONFLICT (owner, namespace, kind) DO UPDATE SET n = c.n + excluded.n',
        TG_ARGV[0],
        CASE TG_OP
            WHEN 'INSERT' THEN 'SELECT owner, namespace, kind, 1 AS d FROM new_rows'
            WHEN 'DELETE' THEN 'SELECT owner, namespace, kind, -1 AS d FROM old_rows'
            ELSE 'SELECT owner, namespace, kind, 1 AS d FROM new_rows'
                 ' UNION ALL SELECT owner, namespace, kind, -1 FROM old_rows'
        END);
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format(
            'DELETE FROM %s AS c USING (SELECT DISTINCT owner FROM old_rows) AS o'
            ' WHERE c.owner = o.owner AND c.n <= 0',
            TG_ARGV[0]);
    END IF;
    RETURN NULL;
END
$body$
"""

# Give the records table `tbl` its counts table and triggers, and count the rows
# it already holds (under a lock that waits for, and then holds off, writers).
_INSTALL_COUNTS = """
CREATE OR REPLACE FUNCTION {fn}(tbl text) RETURNS void LANGUAGE plpgsql AS $body$
DECLARE
    t text := format('%I.%I', {schema}, tbl);
    c text := format('%I.%I', {schema}, left(tbl || '_counts', 63));
    f text := format('%I.%I', {schema}, 'count_records');
BEGIN
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', t);
    EXECUTE format(
        'CREATE TABLE IF NOT EXISTS %s (owner text COLLATE "C" NOT NULL,'
        ' namespace text COLLATE "C" NOT NULL, kind text COLLATE "C" NOT NULL,'
        ' n bigint NOT NULL, PRIMARY KEY (owner, namespace, kind))', c);
    EXECUTE format('DROP TRIGGER IF EXISTS count_insert ON %s', t);
    EXECUTE format('DROP TRIGGER IF EXISTS count_delete ON %s', t);
    EXECUTE format('DROP TRIGGER IF EXISTS count_update ON %s', t);
    EXECUTE format('DROP TRIGGER IF EXISTS count_truncate ON %s', t);
    EXECUTE format('CREATE TRIGGER count_insert AFTER INSERT ON %s'
        ' REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', t, f, c);
    EXECUTE format('CREATE TRIGGER count_delete AFTER DELETE ON %s'
        ' REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', t, f, c);
    EXECUTE format('CREATE TRIGGER count_update AFTER UPDATE ON %s'
        ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
        ' FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', t, f, c);
    EXECUTE format('CREATE TRIGGER count_truncate AFTER TRUNCATE ON %s'
        ' FOR EACH STATEMENT EXECUTE FUNCTION %s(%L)', t, f, c);
    EXECUTE format('DELETE FROM %s', c);
    EXECUTE format('INSERT INTO %s (owner, namespace, kind, n)'
        ' SELECT owner, namespace, kind, count(*) FROM %s GROUP BY owner, namespace, kind', c, t);
END
$body$
"""


def _v4(schema: str) -> list[sql.Composed]:
    """Record counts per owner, namespace and kind, kept by triggers: a search
    decides between the exact scan and the HNSW index from them instead of
    counting the owner's rows on every call. Existing space tables are counted
    here, once."""
    return [
        sql.SQL(_COUNT_RECORDS).format(fn=sql.Identifier(schema, "count_records")),
        sql.SQL(_INSTALL_COUNTS).format(
            fn=sql.Identifier(schema, "install_counts"), schema=sql.Literal(schema)
        ),
        sql.SQL("SELECT {}(table_name) FROM {}").format(
            sql.Identifier(schema, "install_counts"), sql.Identifier(schema, "spaces")
        ),
    ]


def counts_table(table_name: str) -> str:
    """The counts table of the records table `table_name` (as `install_counts` names it)."""
    return f"{table_name}_counts"[:63]


def zero_vectors_index(schema: str, table_name: str) -> sql.Composed:
    """The partial index of a records table's zero vectors (by owner, then id, the
    order a search reads them in). pgvector's
    HNSW cosine index leaves them out, so a search past the exact threshold
    reads them through this index (empty, and so free, when there are none)."""
    return sql.SQL(
        "CREATE INDEX IF NOT EXISTS {} ON {} (owner, id) WHERE vector_norm(embedding) = 0"
    ).format(sql.Identifier(f"{table_name}_zero"[:63]), sql.Identifier(schema, table_name))


def _v5(schema: str) -> list[sql.Composed]:
    """Zero vectors found past the exact threshold: every existing space table
    gets its partial index of zero vectors (new ones get it when created)."""
    return [
        sql.SQL(
            "DO $body$ DECLARE r record; BEGIN"
            " FOR r IN SELECT table_name FROM {spaces} LOOP"
            "  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I.%I (owner, id)"
            " WHERE vector_norm(embedding) = 0', left(r.table_name || '_zero', 63), {schema},"
            " r.table_name);"
            " END LOOP; END $body$"
        ).format(spaces=sql.Identifier(schema, "spaces"), schema=sql.Literal(schema))
    ]


# (version, description, builder). Append only; never edit an applied migration.
MIGRATIONS: tuple[tuple[int, str, _Builder], ...] = (
    (1, "spaces registry, events, leases, cache", _v1),
    (2, "event retention by recorded_at", _v2),
    (3, "audit trail", _v3),
    (4, "record counts per owner, namespace and kind (triggers)", _v4),
    (5, "partial index of zero vectors per space table", _v5),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


async def migrate(conn: AsyncConnection[Any], schema: str) -> int:
    """Bring `schema` up to `SCHEMA_VERSION` in one transaction; the version reached."""
    versions = sql.Identifier(schema, "schema_version")
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        cur = await conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if await cur.fetchone() is None:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY,"
                " description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(versions)
        )
        cur = await conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(versions)
        )
        row = await cur.fetchone()
        current = int(row[0]) if row is not None else 0
        for version, description, build in MIGRATIONS:
            if version <= current:
                continue
            for statement in build(schema):
                await conn.execute(statement)
            await conn.execute(
                sql.SQL("INSERT INTO {} (version, description) VALUES (%s, %s)").format(versions),
                (version, description),
            )
            current = version
    return current

"""PostgreSQL event log: migration 2 (retention by `recorded_at`) on a schema
at version 1, and the window's bounds as index ranges."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from agent_memory.adapters.postgres import PostgresDatabase, PostgresEventLog
from agent_memory.adapters.postgres._migrations import SCHEMA_VERSION
from agent_memory.adapters.postgres.events import window_statement
from agent_memory.domain.records import Event


def _event(id: str, occurred: datetime, recorded: datetime, **kw: object) -> Event:
    return Event(
        id=id, domain="D", agent="agent", action="act", outcome="ok", summary=f"s {id}",
        occurred_at=occurred, recorded_at=recorded, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _indexes(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,))
    return {str(r[0]) for r in rows.fetchall()}


async def test_version_1_schemas_migrate_to_the_recorded_at_index(postgres_url: str) -> None:
    """When this fails, migration 2 did not run on a version 1 schema, or the
    purge index is not on `recorded_at`."""
    schema = f"ret_{uuid.uuid4().hex[:10]}"
    db = PostgresDatabase(postgres_url, schema=schema, min_size=1, max_size=2)
    await db.open()
    await db.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        try:
            events = sql.Identifier(schema, "events")
            # Back to version 1's layout.
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, "events_recorded")))
            conn.execute(sql.SQL("CREATE INDEX events_time ON {} (occurred_at)").format(events))
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE version > 1").format(
                    sql.Identifier(schema, "schema_version")
                )
            )
            db = PostgresDatabase(postgres_url, schema=schema, min_size=1, max_size=2)
            await db.open()
            log = PostgresEventLog(db, owns_database=True, retention=timedelta(hours=1))
            now = datetime.now(UTC)
            await log.append(
                [
                    _event("backfilled", now - timedelta(days=3), now),
                    _event("stale", now - timedelta(minutes=1), now - timedelta(hours=2)),
                ]
            )
            assert await log.purge_expired() == 1
            got = await log.window("D", since=now - timedelta(days=7), limit=10)
            assert [e.id for e in got.events] == ["backfilled"]
            await log.close()
            versions = conn.execute(
                sql.SQL("SELECT max(version) FROM {}").format(
                    sql.Identifier(schema, "schema_version")
                )
            ).fetchone()
            assert versions is not None
            assert versions[0] == SCHEMA_VERSION >= 2  # 3: the audit trail, 4: record counts
            found = _indexes(conn, schema)
            assert "events_recorded" in found
            assert "events_time" not in found
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


async def test_window_bounds_are_index_ranges(postgres_url: str) -> None:
    """When this fails, `since`/`until` no longer bound the index scans of both
    branches (the window reads the domain and filters)."""
    schema = f"ret_{uuid.uuid4().hex[:10]}"
    db = PostgresDatabase(postgres_url, schema=schema, min_size=1, max_size=2)
    await db.open()
    try:
        statement = window_statement(db.table("events"), False, True)
        now = datetime.now(UTC)
        params = {
            "domain": "D",
            "floor": now - timedelta(days=1),
            "until": now,
            "cutoff": now - timedelta(days=60),
            "n": 11,
            "entity": None,
        }
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await conn.execute("SET enable_seqscan = off")
            cur = await conn.execute(sql.SQL("EXPLAIN ") + statement, params)
            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
        conds = [line for line in plan.splitlines() if "Index Cond" in line]
        assert len(conds) == 2, plan
        for line in conds:
            assert "occurred_at >=" in line, plan
            assert "occurred_at <" in line, plan
    finally:
        await db.close()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))

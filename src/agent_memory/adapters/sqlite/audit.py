"""`AuditLog` on SQLite: one table of its own (`audit_log`) in the file.

The table is created on first use (`CREATE TABLE IF NOT EXISTS` inside a
`BEGIN IMMEDIATE` transaction, so processes opening one file together agree),
which leaves the file's versioned schema (`schema.py`) alone: an older
library version simply never reads it. Nothing else in the adapter touches
the table, so erasing a user's events or records never deletes an entry.
Keyset pagination over `(at, id)` with the primary key's BINARY collation,
which orders UTF-8 text by code point.
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime

from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, SqliteHandle, Synchronous
from agent_memory.adapters.sqlite._tx import write_tx
from agent_memory.domain.audit import (
    AuditEntry,
    AuditPage,
    check_audit_entry,
    check_audit_list_args,
    encode_audit_cursor,
)
from agent_memory.domain.time import to_micros

__all__ = ["AUDIT_TABLE", "SqliteAuditLog"]

AUDIT_TABLE = "audit_log"
_DDL = (
    f"CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} ("
    " id TEXT NOT NULL PRIMARY KEY, at INTEGER NOT NULL, tenant TEXT NOT NULL,"
    " entry TEXT NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {AUDIT_TABLE}_order ON {AUDIT_TABLE} (at DESC, id DESC)",
)


class SqliteAuditLog(SqliteHandle):
    """`AuditLog` on one SQLite file shared by any number of handles and processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        super().__init__(
            path, "sqlite audit log", busy_timeout=busy_timeout, synchronous=synchronous
        )
        self._ready = False

    def _ensure(self, conn: sqlite3.Connection) -> None:
        if self._ready:
            return
        present = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (AUDIT_TABLE,)
        ).fetchone()
        if present is None:
            with write_tx(conn):
                for statement in _DDL:
                    conn.execute(statement)
        self._ready = True

    async def append(self, entry: AuditEntry) -> bool:
        async with self._life.op():
            entry = check_audit_entry(entry)
            body = json.dumps(entry.as_json(), ensure_ascii=False, sort_keys=True)

            def job(conn: sqlite3.Connection) -> bool:
                self._ensure(conn)
                with write_tx(conn):
                    cur = conn.execute(
                        f"INSERT INTO {AUDIT_TABLE} (id, at, tenant, entry) VALUES (?, ?, ?, ?)"
                        " ON CONFLICT (id) DO NOTHING",
                        (entry.id, to_micros(entry.at), entry.tenant, body),
                    )
                    return cur.rowcount == 1

            return await self._db.run(job)

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        async with self._life.op():
            tenant, since, limit, after = check_audit_list_args(tenant, since, limit, cursor)
            where: list[str] = []
            params: list[object] = []
            if tenant is not None:
                where.append("tenant = ?")
                params.append(tenant)
            if since is not None:
                where.append("at >= ?")
                params.append(to_micros(since))
            if after is not None:
                where.append("(at < ? OR (at = ? AND id < ?))")
                micros = to_micros(after[0])
                params += [micros, micros, after[1]]
            clause = f" WHERE {' AND '.join(where)}" if where else ""
            query = f"SELECT entry FROM {AUDIT_TABLE}{clause} ORDER BY at DESC, id DESC LIMIT ?"

            def job(conn: sqlite3.Connection) -> list[str]:
                self._ensure(conn)
                return [row[0] for row in conn.execute(query, (*params, limit + 1))]

            rows = await self._db.run(job)
            entries = tuple(AuditEntry.from_json(json.loads(r)) for r in rows[:limit])
            more = len(rows) > limit
            return AuditPage(entries, encode_audit_cursor(entries[-1]) if more else None)

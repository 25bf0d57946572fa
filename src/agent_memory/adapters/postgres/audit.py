"""`AuditLog` on PostgreSQL: the `audit_log` table of the deployment's schema
(migration 3). Nothing else in the adapter writes it, so erasing a user's
events or records never deletes an entry. Keyset pagination over `(at, id)`,
ids in the "C" collation (code point order)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from agent_memory.adapters.postgres._database import PostgresDatabase, PostgresHandle
from agent_memory.domain.audit import (
    AuditEntry,
    AuditPage,
    check_audit_entry,
    check_audit_list_args,
    encode_audit_cursor,
)

__all__ = ["PostgresAuditLog"]


class PostgresAuditLog(PostgresHandle):
    """`AuditLog` on one PostgreSQL schema."""

    def __init__(self, database: PostgresDatabase, *, owns_database: bool = False) -> None:
        super().__init__(database, "postgres audit log", owns_database=owns_database)
        self._table = database.table("audit_log")

    async def append(self, entry: AuditEntry) -> bool:
        async with self._life.op():
            entry = check_audit_entry(entry)
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    self._db.cached(
                        ("audit", 1),
                        lambda: sql.SQL(
                            "INSERT INTO {t} (id, at, tenant, entry) VALUES (%s, %s, %s, %s)"
                            " ON CONFLICT (id) DO NOTHING"
                        ).format(t=self._table),
                    ),
                    (entry.id, entry.at, entry.tenant, Jsonb(entry.as_json())),
                )
                return cur.rowcount == 1

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
            where: list[sql.Composable] = []
            params: list[Any] = []
            if tenant is not None:
                where.append(sql.SQL("tenant = %s"))
                params.append(tenant)
            if since is not None:
                where.append(sql.SQL("at >= %s"))
                params.append(since)
            if after is not None:
                where.append(sql.SQL("(at, id) < (%s, %s)"))
                params += [after[0], after[1]]
            clause = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL("")
            statement = sql.SQL(
                "SELECT entry FROM {t}{w} ORDER BY at DESC, id DESC LIMIT %s"
            ).format(t=self._table, w=clause)
            rows = await self._db.fetch_all(statement, (*params, limit + 1))
            entries = tuple(
                AuditEntry.from_json(r[0] if isinstance(r[0], dict) else json.loads(r[0]))
                for r in rows[:limit]
            )
            more = len(rows) > limit
            return AuditPage(entries, encode_audit_cursor(entries[-1]) if more else None)

"""`Cache` on PostgreSQL: rows `(scope, key) -> value` with an optional expiry.

Expired rows are never returned (every read compares with the injected
clock), and they are deleted by `purge_expired()`, which `put` also runs now
and then so an unattended cache does not grow without bound.
"""

from __future__ import annotations

from datetime import timedelta

from psycopg import sql

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_cache_ttl,
    check_cache_value,
    check_prefix,
)
from agent_memory.adapters.postgres._database import PostgresDatabase, PostgresHandle
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import CacheEntry

__all__ = ["PostgresCache"]

_PURGE_EVERY = 1000  # puts between opportunistic purges


class PostgresCache(PostgresHandle):
    """`Cache` on one PostgreSQL schema."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        clock: Clock | None = None,
        owns_database: bool = False,
    ) -> None:
        super().__init__(database, "postgres cache", owns_database=owns_database)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._table = database.table("cache")
        self._puts = 0

    async def get(self, scope: str, key: str) -> bytes | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            row = await self._db.fetch_one(
                self._db.cached(
                    ("cache", 1),
                    lambda: sql.SQL(
                        "SELECT value FROM {t} WHERE scope = %s AND key = %s"
                        " AND (expires_at IS NULL OR expires_at > %s)"
                    ).format(t=self._table),
                ),
                (scope, key, self._clock.now()),
            )
            return None if row is None else bytes(row[0])

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            data = check_cache_value(value)
            check_cache_ttl(ttl)
            expires = None if ttl is None else self._clock.now() + ttl
            async with self._db.connection() as conn:
                await conn.execute(
                    self._db.cached(
                        ("cache", 2),
                        lambda: sql.SQL(
                            "INSERT INTO {t} (scope, key, value, expires_at)"
                            " VALUES (%s, %s, %s, %s)"
                            " ON CONFLICT (scope, key) DO UPDATE"
                            " SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at"
                        ).format(t=self._table),
                    ),
                    (scope, key, data, expires),
                )
            self._puts += 1
            if self._puts % _PURGE_EVERY == 0:
                await self._purge()

    async def delete(self, scope: str, key: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    self._db.cached(
                        ("cache", 3),
                        lambda: sql.SQL(
                            "DELETE FROM {t} WHERE scope = %s AND key = %s"
                            " RETURNING (expires_at IS NULL OR expires_at > %s)"
                        ).format(t=self._table),
                    ),
                    (scope, key, self._clock.now()),
                )
                row = await cur.fetchone()
            return bool(row is not None and row[0])

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL(
                        "WITH gone AS (DELETE FROM {t} WHERE scope = %s AND starts_with(key, %s)"
                        " RETURNING expires_at)"
                        " SELECT count(*) FILTER (WHERE expires_at IS NULL OR expires_at > %s)"
                        " FROM gone"
                    ).format(t=self._table),
                    (scope, prefix, self._clock.now()),
                )
                row = await cur.fetchone()
            return 0 if row is None else int(row[0])

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        """Live entries of the scope whose key starts with `prefix`, by key (`CacheListing`)."""
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            rows = await self._db.fetch_all(
                sql.SQL(
                    "SELECT key, value, expires_at FROM {t} WHERE scope = %s"
                    " AND starts_with(key, %s) AND (expires_at IS NULL OR expires_at > %s)"
                    ' ORDER BY key COLLATE "C"'
                ).format(t=self._table),
                (scope, prefix, self._clock.now()),
            )
            return [CacheEntry(key=k, value=bytes(v), expires_at=e) for k, v, e in rows]

    async def purge_expired(self) -> int:
        """Delete every expired entry (all scopes); the count."""
        async with self._life.op():
            return await self._purge()

    async def _purge(self) -> int:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.cached(
                    ("cache", 4),
                    lambda: sql.SQL("DELETE FROM {t} WHERE expires_at <= %s").format(t=self._table),
                ),
                (self._clock.now(),),
            )
            return max(cur.rowcount, 0)

"""`Cache` on SQLite: bytes with an optional expiry column. Expired rows are never
returned; reads delete the expired row they meet and writes purge expired rows
in bulk now and then (bounded work per call)."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_cache_ttl,
    check_cache_value,
    check_prefix,
)
from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, SqliteHandle, Synchronous
from agent_memory.adapters.sqlite._tx import write_tx
from agent_memory.adapters.sqlite.codec import from_micros, prefix_condition, to_micros
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import CacheEntry

__all__ = ["SqliteCache"]

_PURGE_EVERY = 100  # puts between bulk purges of expired rows
_PURGE_BATCH = 1000  # rows purged at most per bulk purge


class SqliteCache(SqliteHandle):
    """`Cache` on one SQLite file shared by any number of handles and processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        super().__init__(path, "sqlite cache", busy_timeout=busy_timeout, synchronous=synchronous)
        self._puts = 0

    def _now(self) -> int:
        return to_micros(self._clock.now())

    async def get(self, scope: str, key: str) -> bytes | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            return await self._db.run(lambda conn: self._get(conn, scope, key))

    def _get(self, conn: sqlite3.Connection, scope: str, key: str) -> bytes | None:
        now = self._now()
        row = conn.execute(
            "SELECT value, expires_at FROM cache WHERE scope = ? AND key = ?", (scope, key)
        ).fetchone()
        if row is None:
            return None
        if row[1] is not None and row[1] <= now:
            with write_tx(conn):
                conn.execute(
                    "DELETE FROM cache WHERE scope = ? AND key = ? AND expires_at <= ?",
                    (scope, key, now),
                )
            return None
        return bytes(row[0])

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            data = check_cache_value(value)
            check_cache_ttl(ttl)
            self._puts += 1
            purge = self._puts % _PURGE_EVERY == 1
            await self._db.run(lambda conn: self._put(conn, scope, key, data, ttl, purge))

    def _put(
        self,
        conn: sqlite3.Connection,
        scope: str,
        key: str,
        value: bytes,
        ttl: timedelta | None,
        purge: bool,
    ) -> None:
        # The clock is read on the worker, once the file is open: a TTL counts
        # from when the entry becomes readable, not from when the call was queued.
        with write_tx(conn):
            now = self._clock.now()
            expires = None if ttl is None else to_micros(now + ttl)
            purge_before = to_micros(now) if purge else None
            conn.execute(
                "INSERT INTO cache (scope, key, value, expires_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (scope, key) DO UPDATE SET"
                " value = excluded.value, expires_at = excluded.expires_at",
                (scope, key, value, expires),
            )
            if purge_before is not None:
                conn.execute(
                    "DELETE FROM cache WHERE (scope, key) IN (SELECT scope, key FROM cache"
                    " WHERE expires_at <= ? LIMIT ?)",
                    (purge_before, _PURGE_BATCH),
                )

    async def delete(self, scope: str, key: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            return await self._db.run(lambda conn: self._delete(conn, scope, key))

    def _delete(self, conn: sqlite3.Connection, scope: str, key: str) -> bool:
        with write_tx(conn):
            now = self._now()
            rows = conn.execute(
                "DELETE FROM cache WHERE scope = ? AND key = ? RETURNING expires_at", (scope, key)
            ).fetchall()
        return any(expires is None or expires > now for (expires,) in rows)

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            where, params = prefix_condition("key", prefix)
            return await self._db.run(lambda conn: self._delete_prefix(conn, scope, where, params))

    def _delete_prefix(
        self, conn: sqlite3.Connection, scope: str, where: str, params: tuple[object, ...]
    ) -> int:
        with write_tx(conn):
            now = self._now()
            rows = conn.execute(
                f"DELETE FROM cache WHERE scope = ? AND {where} RETURNING expires_at",
                (scope, *params),
            ).fetchall()
        return sum(1 for (expires,) in rows if expires is None or expires > now)

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        """Live entries of the scope whose key starts with `prefix`, by key (`CacheListing`)."""
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            where, params = prefix_condition("key", prefix)

            def job(conn: sqlite3.Connection) -> list[CacheEntry]:
                rows = conn.execute(
                    f"SELECT key, value, expires_at FROM cache WHERE scope = ? AND {where}"
                    " AND (expires_at IS NULL OR expires_at > ?) ORDER BY key",
                    (scope, *params, self._now()),
                ).fetchall()
                return [
                    CacheEntry(
                        key=k, value=bytes(v), expires_at=None if e is None else from_micros(e)
                    )
                    for k, v, e in rows
                ]

            return await self._db.run(job)

    async def purge_expired(self) -> int:
        """Delete every expired entry now; the count (expired entries are never
        returned either way)."""
        async with self._life.op():
            return await self._db.run(self._purge)

    def _purge(self, conn: sqlite3.Connection) -> int:
        with write_tx(conn):
            now = self._now()
            return conn.execute("DELETE FROM cache WHERE expires_at <= ?", (now,)).rowcount

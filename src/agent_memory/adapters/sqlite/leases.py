"""`LeaseStore` on SQLite: each operation is one `BEGIN IMMEDIATE` transaction, so
check-and-take is atomic across handles and processes. A per-key fencing counter
(kept after release and expiry) makes tokens only grow."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_lease_args,
    check_lease_payload,
    check_prefix,
)
from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, SqliteHandle, Synchronous
from agent_memory.adapters.sqlite._tx import write_tx
from agent_memory.adapters.sqlite.codec import from_micros, prefix_condition, to_micros
from agent_memory.domain.errors import LeaseNotHeld
from agent_memory.domain.records import Lease
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock

__all__ = ["SqliteLeaseStore"]

_SELECT = "SELECT owner, token, expires_at, payload FROM leases WHERE scope = ? AND key = ?"


class SqliteLeaseStore(SqliteHandle):
    """`LeaseStore` on one SQLite file shared by any number of handles and processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        super().__init__(
            path, "sqlite lease store", busy_timeout=busy_timeout, synchronous=synchronous
        )

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        async with self._life.op():
            check_lease_args(scope, key, owner, ttl)
            data = check_lease_payload(payload)
            return await self._db.run(
                lambda conn: self._acquire(conn, scope, key, owner, ttl, data)
            )

    def _acquire(
        self,
        conn: sqlite3.Connection,
        scope: str,
        key: str,
        owner: str,
        ttl: timedelta,
        payload: bytes,
    ) -> Lease | None:
        with write_tx(conn):
            now = self._clock.now()  # read under the write lock
            current = conn.execute(_SELECT, (scope, key)).fetchone()
            live = current is not None and current[2] > to_micros(now)
            if live and current[0] != owner:
                return None
            if live:
                token = int(current[1])
            else:
                token = int(
                    conn.execute(
                        "INSERT INTO lease_counters (scope, key, token) VALUES (?, ?, 1)"
                        " ON CONFLICT (scope, key) DO UPDATE SET token = token + 1"
                        " RETURNING token",
                        (scope, key),
                    ).fetchall()[0][0]
                )
            expires = now + ttl
            conn.execute(
                "INSERT INTO leases (scope, key, owner, token, expires_at, payload)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, key) DO UPDATE SET"
                " owner = excluded.owner, token = excluded.token,"
                " expires_at = excluded.expires_at, payload = excluded.payload",
                (scope, key, owner, token, to_micros(expires), payload),
            )
        return Lease(
            scope=scope, key=key, owner=owner, token=token, expires_at=expires, payload=payload
        )

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        async with self._life.op():
            check_lease_args(scope, key, owner, ttl)
            data = None if payload is None else check_lease_payload(payload)
            return await self._db.run(lambda conn: self._renew(conn, scope, key, owner, ttl, data))

    def _renew(
        self,
        conn: sqlite3.Connection,
        scope: str,
        key: str,
        owner: str,
        ttl: timedelta,
        payload: bytes | None,
    ) -> Lease:
        with write_tx(conn):
            now = self._clock.now()
            current = conn.execute(_SELECT, (scope, key)).fetchone()
            live = current is not None and current[2] > to_micros(now)
            if not live or current[0] != owner:
                raise LeaseNotHeld(key, owner, current[0] if live else None)
            expires = now + ttl
            data = bytes(current[3]) if payload is None else payload
            conn.execute(
                "UPDATE leases SET expires_at = ?, payload = ? WHERE scope = ? AND key = ?",
                (to_micros(expires), data, scope, key),
            )
        return Lease(
            scope=scope,
            key=key,
            owner=owner,
            token=int(current[1]),
            expires_at=expires,
            payload=data,
        )

    async def release(self, scope: str, key: str, owner: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            require_id(owner, "owner")
            return await self._db.run(lambda conn: self._release(conn, scope, key, owner))

    def _release(self, conn: sqlite3.Connection, scope: str, key: str, owner: str) -> bool:
        with write_tx(conn):
            now = to_micros(self._clock.now())
            cur = conn.execute(
                "DELETE FROM leases WHERE scope = ? AND key = ? AND owner = ? AND expires_at > ?",
                (scope, key, owner, now),
            )
            return cur.rowcount > 0

    async def get(self, scope: str, key: str) -> Lease | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            row = await self._db.run(
                lambda conn: conn.execute(
                    _SELECT + " AND expires_at > ?", (scope, key, to_micros(self._clock.now()))
                ).fetchone()
            )
            if row is None:
                return None
            return Lease(
                scope=scope,
                key=key,
                owner=row[0],
                token=int(row[1]),
                expires_at=from_micros(row[2]),
                payload=bytes(row[3]),
            )

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            where, params = prefix_condition("key", prefix)
            rows = await self._db.run(
                lambda conn: conn.execute(
                    "SELECT key, owner, token, expires_at, payload FROM leases"
                    f" WHERE scope = ? AND expires_at > ? AND {where} ORDER BY key",
                    (scope, to_micros(self._clock.now()), *params),
                ).fetchall()
            )
            return [
                Lease(
                    scope=scope,
                    key=r[0],
                    owner=r[1],
                    token=int(r[2]),
                    expires_at=from_micros(r[3]),
                    payload=bytes(r[4]),
                )
                for r in rows
            ]

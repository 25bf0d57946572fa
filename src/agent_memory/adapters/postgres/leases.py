"""`LeaseStore` on PostgreSQL: every operation is one statement.

A lease row outlives its lease: release clears the owner, expiry is just a
timestamp in the past, and the row keeps the per-key fencing `token`, so a
fresh acquisition always gets `token + 1`. `acquire` is a single
`INSERT ... ON CONFLICT DO UPDATE ... WHERE free, expired or ours RETURNING`,
atomic under concurrent callers. Times come from the injected clock.
"""

from __future__ import annotations

from datetime import timedelta

from psycopg import sql

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_lease_args,
    check_lease_payload,
    check_prefix,
)
from agent_memory.adapters.postgres._database import PostgresDatabase, PostgresHandle
from agent_memory.domain.errors import LeaseNotHeld
from agent_memory.domain.records import Lease
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock

__all__ = ["PostgresLeaseStore"]


class PostgresLeaseStore(PostgresHandle):
    """`LeaseStore` on one PostgreSQL schema."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        clock: Clock | None = None,
        owns_database: bool = False,
    ) -> None:
        super().__init__(database, "postgres lease store", owns_database=owns_database)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._table = database.table("leases")

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        async with self._life.op():
            check_lease_args(scope, key, owner, ttl)
            data = check_lease_payload(payload)
            now = self._clock.now()
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL(
                        "INSERT INTO {t} AS l (scope, key, owner, token, expires_at, payload)"
                        " VALUES (%(scope)s, %(key)s, %(owner)s, 1, %(expires)s, %(payload)s)"
                        " ON CONFLICT (scope, key) DO UPDATE SET"
                        "  token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > %(now)s"
                        "   THEN l.token ELSE l.token + 1 END,"
                        "  owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,"
                        "  payload = EXCLUDED.payload"
                        " WHERE l.owner IS NULL OR l.expires_at <= %(now)s"
                        "  OR l.owner = EXCLUDED.owner"
                        " RETURNING token, expires_at"
                    ).format(t=self._table),
                    {
                        "scope": scope,
                        "key": key,
                        "owner": owner,
                        "expires": now + ttl,
                        "payload": data,
                        "now": now,
                    },
                )
                row = await cur.fetchone()
            if row is None:
                return None
            return Lease(
                scope=scope, key=key, owner=owner, token=row[0], expires_at=row[1], payload=data
            )

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        async with self._life.op():
            check_lease_args(scope, key, owner, ttl)
            data = None if payload is None else check_lease_payload(payload)
            now = self._clock.now()
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL(
                        "UPDATE {t} SET expires_at = %(expires)s,"
                        " payload = coalesce(%(payload)s::bytea, payload)"
                        " WHERE scope = %(scope)s AND key = %(key)s AND owner = %(owner)s"
                        " AND expires_at > %(now)s RETURNING token, expires_at, payload"
                    ).format(t=self._table),
                    {
                        "scope": scope,
                        "key": key,
                        "owner": owner,
                        "expires": now + ttl,
                        "payload": data,
                        "now": now,
                    },
                )
                row = await cur.fetchone()
                if row is None:
                    cur = await conn.execute(
                        self._db.cached(
                            ("leases", 1),
                            lambda: sql.SQL(
                                "SELECT owner FROM {t} WHERE scope = %s AND key = %s"
                                " AND owner IS NOT NULL AND expires_at > %s"
                            ).format(t=self._table),
                        ),
                        (scope, key, now),
                    )
                    holder = await cur.fetchone()
                    raise LeaseNotHeld(key, owner, None if holder is None else holder[0])
            return Lease(
                scope=scope,
                key=key,
                owner=owner,
                token=row[0],
                expires_at=row[1],
                payload=bytes(row[2]),
            )

    async def release(self, scope: str, key: str, owner: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            require_id(owner, "owner")
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    self._db.cached(
                        ("leases", 2),
                        lambda: sql.SQL(
                            "UPDATE {t} SET owner = NULL, payload = ''::bytea"
                            " WHERE scope = %s AND key = %s AND owner = %s AND expires_at > %s"
                        ).format(t=self._table),
                    ),
                    (scope, key, owner, self._clock.now()),
                )
                return cur.rowcount > 0

    async def get(self, scope: str, key: str) -> Lease | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            row = await self._db.fetch_one(
                self._db.cached(
                    ("leases", 3),
                    lambda: sql.SQL(
                        "SELECT key, owner, token, expires_at, payload FROM {t}"
                        " WHERE scope = %s AND key = %s AND owner IS NOT NULL"
                        " AND expires_at > %s"
                    ).format(t=self._table),
                ),
                (scope, key, self._clock.now()),
            )
            if row is None:
                return None
            return Lease(
                scope=scope,
                key=row[0],
                owner=row[1],
                token=row[2],
                expires_at=row[3],
                payload=bytes(row[4]),
            )

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            rows = await self._db.fetch_all(
                self._db.cached(
                    ("leases", 4),
                    lambda: sql.SQL(
                        "SELECT key, owner, token, expires_at, payload FROM {t}"
                        " WHERE scope = %s AND starts_with(key, %s)"
                        " AND owner IS NOT NULL AND expires_at > %s ORDER BY key"
                    ).format(t=self._table),
                ),
                (scope, prefix, self._clock.now()),
            )
            return [
                Lease(
                    scope=scope,
                    key=r[0],
                    owner=r[1],
                    token=r[2],
                    expires_at=r[3],
                    payload=bytes(r[4]),
                )
                for r in rows
            ]

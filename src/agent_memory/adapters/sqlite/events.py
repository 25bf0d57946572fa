"""`EventLog` on SQLite: one row per `(domain, id)`, entities in a side table.

The window is one indexed query ordered by the event's own time (then id desc;
arrival order only breaks exact ties, as the in-memory oracle does): `since` and
`until` bound the `(domain, occurred_at)` index range. Retention counts from
ingestion: an event expires at `recorded_at + retention` (the `recorded_at`
column, indexed for the purge), whatever its event time.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_events,
    check_retention,
    check_window_args,
)
from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, SqliteHandle, Synchronous
from agent_memory.adapters.sqlite._tx import write_tx
from agent_memory.adapters.sqlite.codec import decode_event, encode_event, to_micros
from agent_memory.domain.records import Entity, Event, EventWindow
from agent_memory.domain.validation import require_id, require_utc
from agent_memory.ports.models import Clock

__all__ = ["DEFAULT_RETENTION", "SqliteEventLog"]

DEFAULT_RETENTION = timedelta(days=60)


class SqliteEventLog(SqliteHandle):
    """`EventLog` on one SQLite file shared by any number of handles and processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: timedelta = DEFAULT_RETENTION,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        self._retention = check_retention(retention)
        self._clock: Clock = clock if clock is not None else SystemClock()
        super().__init__(
            path, "sqlite event log", busy_timeout=busy_timeout, synchronous=synchronous
        )

    @property
    def retention(self) -> timedelta:
        return self._retention

    def _cutoff_micros(self) -> int:
        """Events recorded before this instant are past retention."""
        return to_micros(self._clock.now() - self._retention)

    async def append(self, events: Sequence[Event]) -> int:
        async with self._life.op():
            batch = check_events(events)
            if not batch:
                return 0
            rows = [
                (
                    e.domain,
                    e.id,
                    to_micros(e.occurred_at),
                    to_micros(e.recorded_at),
                    int(e.is_global),
                    e.user_id,
                    encode_event(e),
                    [(en.type, en.id) for en in e.entities],
                )
                for e in batch
            ]
            return await self._db.run(lambda conn: self._append(conn, rows))

    @staticmethod
    def _append(
        conn: sqlite3.Connection,
        rows: list[tuple[str, str, int, int, int, str | None, str, list[tuple[str, str]]]],
    ) -> int:
        stored = 0
        with write_tx(conn):
            for domain, id_, occurred, recorded, is_global, user_id, body, entities in rows:
                found = conn.execute(
                    "INSERT INTO events"
                    " (domain, id, occurred_at, recorded_at, is_global, user_id, body)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (domain, id) DO NOTHING RETURNING seq",
                    (domain, id_, occurred, recorded, is_global, user_id, body),
                ).fetchall()
                if not found:
                    continue
                stored += 1
                if entities:
                    conn.executemany(
                        "INSERT OR IGNORE INTO event_entities (seq, type, eid) VALUES (?, ?, ?)",
                        [(found[0][0], t, i) for t, i in entities],
                    )
        return stored

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        async with self._life.op():
            since = check_window_args(domain, since, limit, entity)
            until = None if until is None else require_utc(until, "until")
            sql = (
                "SELECT body FROM events AS e WHERE (e.domain = ? OR e.is_global = 1)"
                " AND e.occurred_at >= ? AND e.recorded_at >= ?"
            )
            params: list[object] = [domain, to_micros(since), self._cutoff_micros()]
            if until is not None:
                sql += " AND e.occurred_at < ?"
                params.append(to_micros(until))
            if entity is not None:
                sql += (
                    " AND EXISTS (SELECT 1 FROM event_entities AS x"
                    " WHERE x.seq = e.seq AND x.type = ? AND x.eid = ?)"
                )
                params.extend([entity.type, entity.id])
            sql += " ORDER BY e.occurred_at DESC, e.id DESC, e.seq ASC LIMIT ?"
            params.append(limit + 1)

            def read(conn: sqlite3.Connection) -> EventWindow:
                rows = conn.execute(sql, params).fetchall()
                events = tuple(decode_event(r[0]) for r in rows[:limit])
                return EventWindow(events=events, limited=len(rows) > limit)

            return await self._db.run(read)

    async def erase_user(self, user_id: str) -> int:
        async with self._life.op():
            require_id(user_id, "user_id")
            return await self._db.run(
                lambda conn: self._delete(conn, "user_id = ? AND user_id IS NOT NULL", user_id)
            )

    async def user_events(self, user_id: str) -> list[Event]:
        async with self._life.op():
            require_id(user_id, "user_id")

            def read(conn: sqlite3.Connection) -> list[Event]:
                rows = conn.execute(
                    "SELECT body FROM events WHERE user_id = ? AND user_id IS NOT NULL",
                    (user_id,),
                ).fetchall()
                out = [decode_event(r[0]) for r in rows]
                out.sort(key=lambda e: (e.occurred_at, e.domain, e.id), reverse=True)
                return out

            return await self._db.run(read)

    async def domains(self) -> list[str]:
        async with self._life.op():

            def read(conn: sqlite3.Connection) -> list[str]:
                rows = conn.execute("SELECT DISTINCT domain FROM events").fetchall()
                return sorted(str(r[0]) for r in rows)

            return await self._db.run(read)

    async def purge_expired(self) -> int:
        async with self._life.op():
            cutoff = self._cutoff_micros()
            return await self._db.run(lambda conn: self._delete(conn, "recorded_at < ?", cutoff))

    @staticmethod
    def _delete(conn: sqlite3.Connection, where: str, value: object) -> int:
        with write_tx(conn):
            return conn.execute(f"DELETE FROM events WHERE {where}", (value,)).rowcount

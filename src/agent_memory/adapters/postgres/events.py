"""`EventLog` on PostgreSQL.

Events live in `<schema>.events`, primary key `(domain, id)`; indexes on
`(domain, occurred_at DESC, id DESC)`, on global events by time, a GIN index on
the entity array and one on `user_id`. A batch append is one
`INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING` (idempotent; the
row count is the number newly stored). A window is the domain's branch and the
global branch, each read in index order, merged and cut at `limit + 1`;
`since` and `until` bound the index range on event time. Retention counts from
ingestion: an event expires at `recorded_at + retention`, whatever its event
time; the window skips expired rows and `purge_expired` deletes them (through
an index on `recorded_at`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_events,
    check_retention,
    check_window_args,
)
from agent_memory.adapters.postgres._codec import (
    Converter,
    Lookup,
    row_decoder,
    rows_decoder,
    utc,
)
from agent_memory.adapters.postgres._database import (
    ConnectionLost,
    PostgresDatabase,
    PostgresHandle,
)
from agent_memory.domain.records import (
    Entity,
    EntitySource,
    Event,
    EventWindow,
    SummarySource,
    TimeBasis,
)
from agent_memory.domain.validation import require_id, require_utc
from agent_memory.ports.models import Clock

__all__ = ["DEFAULT_RETENTION", "PostgresEventLog", "encode_entity"]

DEFAULT_RETENTION = timedelta(days=60)

_COLUMNS = (
    "domain",
    "id",
    "agent",
    "action",
    "outcome",
    "summary",
    "occurred_at",
    "recorded_at",
    "origin_request_id",
    "summary_source",
    "fallback_reason",
    "time_basis",
    "entities",
    "entity_source",
    "user_id",
    "importance",
    "metadata",
    "is_global",
)
_ARRAY_TYPES = (
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "timestamptz",
    "timestamptz",
    "text",
    "text",
    "text",
    "text",
    "text",  # entities: one JSON array of encoded entities per event, expanded below
    "text",
    "text",
    "float8",
    "text",
    "bool",
)


def encode_entity(entity: Entity) -> str:
    """An injective text form of an entity (JSON of `[type, id]`), for the GIN array."""
    return json.dumps([entity.type, entity.id])


_ENTITY_FIELDS = ("type", "id")
_SUMMARY_SOURCES = {m.value: m for m in SummarySource}
_TIME_BASES = {m.value: m for m in TimeBasis}
_ENTITY_SOURCES = {m.value: m for m in EntitySource}


class _EntityCache(dict[str, Entity]):
    """Encoded entity -> `Entity`. Entities repeat across events (the same
    service, pod, user): each is decoded once; the cache is emptied when it
    reaches `_ENTITY_CACHE_SIZE` entries, so it stays bounded."""

    def __missing__(self, value: str) -> Entity:
        if len(self) >= _ENTITY_CACHE_SIZE:
            self.clear()
        entity: Entity = row_decoder(Entity, _ENTITY_FIELDS)(json.loads(value))
        self[value] = entity
        return entity


_ENTITY_CACHE_SIZE = 4096
_ENTITIES = _EntityCache()


_CONVERT: dict[str, Converter] = {
    "occurred_at": utc,
    "recorded_at": utc,
    "summary_source": Lookup(_SUMMARY_SOURCES),
    "time_basis": Lookup(_TIME_BASES),
    "entities": Lookup(_ENTITIES, each=True),
    "entity_source": Lookup(_ENTITY_SOURCES),
}


@functools.cache
def event_decoder() -> Callable[[Sequence[Any]], Event]:
    """Row (the columns of `window_statement`, binary) -> `Event`, without re-validation."""
    return row_decoder(Event, _COLUMNS, _CONVERT)


@functools.cache
def events_decoder() -> Callable[[Iterable[Sequence[Any]]], list[Event]]:
    """Rows (as `event_decoder` takes them) -> their `Event`s, in one loop."""
    return rows_decoder(Event, _COLUMNS, _CONVERT)


def append_statement(table: sql.Identifier) -> sql.Composed:
    """The one statement `append` runs (public for the overhead benchmark)."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in _COLUMNS)
    selects = []
    for i, name in enumerate(_COLUMNS):
        if name == "entities":
            expr = sql.SQL("ARRAY(SELECT json_array_elements_text(u.c{i}::json))").format(
                i=sql.SQL(str(i))
            )
        elif name == "metadata":
            expr = sql.SQL("u.c{i}::json").format(i=sql.SQL(str(i)))
        else:
            expr = sql.SQL("u.c{i}").format(i=sql.SQL(str(i)))
        selects.append(expr)
    unnest_args = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in _ARRAY_TYPES)
    aliases = sql.SQL(", ").join(sql.SQL(f"c{i}") for i in range(len(_COLUMNS)))
    return sql.SQL(
        "INSERT INTO {t} ({cols}) SELECT {sel} FROM unnest({args}) AS u({aliases})"
        " ON CONFLICT (domain, id) DO NOTHING"
    ).format(
        t=table,
        cols=cols,
        sel=sql.SQL(", ").join(selects),
        args=unnest_args,
        aliases=aliases,
    )


def append_params(events: Sequence[Event]) -> list[list[Any]]:
    """Column arrays for `append_statement`."""
    columns: list[list[Any]] = [[] for _ in _COLUMNS]
    for e in events:
        values = (
            e.domain,
            e.id,
            e.agent,
            e.action,
            e.outcome,
            e.summary,
            e.occurred_at,
            e.recorded_at,
            e.origin_request_id,
            e.summary_source.value,
            e.fallback_reason,
            e.time_basis.value,
            json.dumps([encode_entity(x) for x in e.entities]),
            e.entity_source.value,
            e.user_id,
            e.importance,
            json.dumps(e.metadata, allow_nan=False),
            e.is_global,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return columns


def window_statement(
    table: sql.Identifier, with_entity: bool, with_until: bool = False
) -> sql.Composed:
    """The one statement `window` runs (public for the overhead benchmark).

    Parameters: `domain`, `floor` (since), `cutoff` (now - retention, compared
    with recorded_at), `n` (limit + 1), `entity` and, `with_until`, `until`."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in _COLUMNS)
    entity = sql.SQL(" AND entities @> ARRAY[%(entity)s::text]") if with_entity else sql.SQL("")
    until = sql.SQL(" AND occurred_at < %(until)s") if with_until else sql.SQL("")
    return sql.SQL(
        "SELECT {c} FROM ("
        " (SELECT {c} FROM {t} WHERE domain = %(domain)s AND occurred_at >= %(floor)s{u}"
        "  AND recorded_at >= %(cutoff)s{e} ORDER BY occurred_at DESC, id DESC LIMIT %(n)s)"
        " UNION ALL"
        " (SELECT {c} FROM {t} WHERE is_global AND domain <> %(domain)s"
        "  AND occurred_at >= %(floor)s{u} AND recorded_at >= %(cutoff)s{e}"
        "  ORDER BY occurred_at DESC, id DESC LIMIT %(n)s)"
        ") AS w ORDER BY occurred_at DESC, id DESC LIMIT %(n)s"
    ).format(c=cols, t=table, e=entity, u=until)


class PostgresEventLog(PostgresHandle):
    """`EventLog` on one PostgreSQL schema."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        retention: timedelta = DEFAULT_RETENTION,
        clock: Clock | None = None,
        owns_database: bool = False,
    ) -> None:
        self._retention = check_retention(retention)
        super().__init__(database, "postgres event log", owns_database=owns_database)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._table = database.table("events")

    @property
    def retention(self) -> timedelta:
        return self._retention

    def _cutoff(self) -> datetime:
        """Events recorded before this instant are past retention."""
        return self._clock.now() - self._retention

    async def append(self, events: Sequence[Event]) -> int:
        async with self._life.op():
            batch = check_events(events)
            if not batch:
                return 0
            async with self._db.connection() as conn:
                statement = self._db.cached(("append",), lambda: append_statement(self._table))
                cur = await conn.execute(statement, append_params(batch))
                return max(cur.rowcount, 0)

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
            params: dict[str, Any] = {
                "domain": domain,
                "floor": since,
                "cutoff": self._clock.now() - self._retention,
                "until": until,
                "n": limit + 1,
                "entity": None if entity is None else encode_entity(entity),
            }
            bounded = until is not None
            statement = self._db.cached(
                ("window", entity is not None, bounded),
                lambda: window_statement(self._table, entity is not None, bounded),
            )
            # `PostgresDatabase.read`, spelled out: this is the hot read, and a
            # closure and a coroutine less per call show on its time.
            try:
                return await self._read_window(statement, params, limit)
            except ConnectionLost:  # the connection broke: once more on a new one
                return await self._read_window(statement, params, limit)

    async def _read_window(
        self, statement: sql.SQL, params: dict[str, Any], limit: int
    ) -> EventWindow:
        async with self._db.connection() as conn:
            cur = conn.cursor(binary=True)
            await cur.execute(statement, params)
            # The statement reads `limit + 1` rows: the last one only says
            # whether the limit cut the window, and is never decoded. Rows
            # come as tuples (built by psycopg in C) and become `Event`s in
            # one generated loop: cheaper than a row factory's call per row.
            rows = await cur.fetchmany(limit)
            return EventWindow(events=tuple(events_decoder()(rows)), limited=cur.rowcount > limit)

    async def erase_user(self, user_id: str) -> int:
        async with self._life.op():
            require_id(user_id, "user_id")
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE user_id = %s").format(self._table), (user_id,)
                )
                return max(cur.rowcount, 0)

    async def user_events(self, user_id: str) -> list[Event]:
        async with self._life.op():
            require_id(user_id, "user_id")
            cols = sql.SQL(", ").join(sql.Identifier(c) for c in _COLUMNS)
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL("SELECT {} FROM {} WHERE user_id = %s").format(cols, self._table),
                    (user_id,),
                    binary=True,
                )
                rows = events_decoder()(await cur.fetchall())
            rows.sort(key=lambda e: (e.occurred_at, e.domain, e.id), reverse=True)
            return rows

    async def domains(self) -> list[str]:
        async with self._life.op(), self._db.connection() as conn:
            cur = await conn.execute(sql.SQL("SELECT DISTINCT domain FROM {}").format(self._table))
            return sorted(str(r[0]) for r in await cur.fetchall())

    async def purge_expired(self) -> int:
        async with self._life.op(), self._db.connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE recorded_at < %s").format(self._table),
                (self._cutoff(),),
            )
            return max(cur.rowcount, 0)

"""`TripleStore` on SQLite: one `graph_triples` table in the same file as the
other ports, created on first use (`CREATE TABLE IF NOT EXISTS`, so any number
of handles and processes may race to create it).

The primary key is the triple's identity, so `INSERT OR IGNORE` makes `add`
idempotent; text compares with SQLite's BINARY collation (UTF-8 bytes, i.e.
code point order), the order every backend uses. Walks run breadth-first on
the worker thread, one indexed query per hop.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, SqliteHandle, Synchronous
from agent_memory.adapters.sqlite._tx import read_tx, write_tx
from agent_memory.adapters.sqlite.codec import from_micros, to_micros
from agent_memory.domain.triples import (
    Triple,
    WalkStep,
    check_filters,
    check_triples,
    require_hops,
    require_node,
    walk,
)
from agent_memory.domain.validation import require_scope

__all__ = ["SqliteTripleStore"]

_DDL = (
    """CREATE TABLE IF NOT EXISTS graph_triples (
        owner TEXT NOT NULL,
        loop TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        source TEXT NOT NULL,
        PRIMARY KEY (owner, loop, subject, predicate, object)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS graph_triples_subject ON graph_triples (owner, subject)",
    "CREATE INDEX IF NOT EXISTS graph_triples_object ON graph_triples (owner, object)",
    "CREATE INDEX IF NOT EXISTS graph_triples_time ON graph_triples (owner, created_at)",
)
_COLUMNS = "owner, loop, subject, predicate, object, created_at, source"
_ORDER = "ORDER BY created_at DESC, loop, subject, predicate, object"
_CHUNK = 400  # nodes per IN (...) list of one walk query


def _row(row: Sequence[Any]) -> Triple:
    return Triple(
        owner=row[0],
        loop=row[1],
        subject=row[2],
        predicate=row[3],
        object=row[4],
        created_at=from_micros(row[5]),
        source=row[6],
    )


class SqliteTripleStore(SqliteHandle):
    """`TripleStore` on one SQLite file, shared safely by several handles."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
    ) -> None:
        super().__init__(
            path, "sqlite triple store", busy_timeout=busy_timeout, synchronous=synchronous
        )
        self._ready = False  # read and written on the worker thread only

    def _ensure(self, conn: sqlite3.Connection) -> None:
        if self._ready:
            return
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'graph_triples'"
        ).fetchone()
        if exists is None:
            with write_tx(conn):
                for statement in _DDL:
                    conn.execute(statement)
        self._ready = True

    async def add(self, triples: Sequence[Triple]) -> int:
        async with self._life.op():
            batch = check_triples(triples)
            if not batch:
                return 0
            rows = [
                (
                    t.owner,
                    t.loop,
                    t.subject,
                    t.predicate,
                    t.object,
                    to_micros(t.created_at),
                    t.source,
                )
                for t in batch
            ]
            return await self._db.run(lambda conn: self._add(conn, rows))

    def _add(self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> int:
        self._ensure(conn)
        with write_tx(conn):
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO graph_triples ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            return conn.total_changes - before

    async def query(
        self,
        owner: str,
        *,
        loop: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 100,
    ) -> list[Triple]:
        async with self._life.op():
            check_filters(
                owner, loop=loop, subject=subject, predicate=predicate, object_=object, limit=limit
            )
            where = ["owner = ?"]
            params: list[Any] = [owner]
            for column, value in (
                ("loop", loop),
                ("subject", subject),
                ("predicate", predicate),
                ("object", object),
            ):
                if value is not None:
                    where.append(f"{column} = ?")
                    params.append(value)
            statement = (
                f"SELECT {_COLUMNS} FROM graph_triples WHERE {' AND '.join(where)} {_ORDER} LIMIT ?"
            )
            params.append(limit)

            def job(conn: sqlite3.Connection) -> list[Triple]:
                self._ensure(conn)
                return [_row(r) for r in conn.execute(statement, params).fetchall()]

            return await self._db.run(job)

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        async with self._life.op():
            check_filters(owner, loop=loop, limit=limit)
            require_node(node)
            require_hops(hops)
            return await self._db.run(lambda conn: self._walk(conn, owner, node, hops, loop, limit))

    def _walk(
        self,
        conn: sqlite3.Connection,
        owner: str,
        node: str,
        hops: int,
        loop: str | None,
        limit: int,
    ) -> list[WalkStep]:
        self._ensure(conn)
        loop_cond = "" if loop is None else " AND loop = ?"
        loop_param: tuple[Any, ...] = () if loop is None else (loop,)

        def edges_of(frontier: frozenset[str]) -> list[Triple]:
            nodes = sorted(frontier)
            out: list[Triple] = []
            for i in range(0, len(nodes), _CHUNK):
                chunk = nodes[i : i + _CHUNK]
                marks = ", ".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM graph_triples WHERE owner = ?{loop_cond}"
                    f" AND (subject IN ({marks}) OR object IN ({marks}))",
                    (owner, *loop_param, *chunk, *chunk),
                ).fetchall()
                out.extend(_row(r) for r in rows)
            return out

        with read_tx(conn):
            return walk(node, hops, limit, edges_of)

    async def delete_scope(self, owner: str, *, loop: str | None = None) -> int:
        async with self._life.op():
            require_scope(owner, "owner")
            if loop is not None:
                require_scope(loop, "loop")

            def job(conn: sqlite3.Connection) -> int:
                self._ensure(conn)
                with write_tx(conn):
                    if loop is None:
                        cur = conn.execute("DELETE FROM graph_triples WHERE owner = ?", (owner,))
                    else:
                        cur = conn.execute(
                            "DELETE FROM graph_triples WHERE owner = ? AND loop = ?", (owner, loop)
                        )
                    return cur.rowcount

            return await self._db.run(job)

    async def owners(self) -> list[str]:
        """Every owner with a stored triple, sorted (`OwnerListing`)."""
        async with self._life.op():

            def job(conn: sqlite3.Connection) -> list[str]:
                self._ensure(conn)
                sql = "SELECT DISTINCT owner FROM graph_triples ORDER BY owner"
                return [row[0] for row in conn.execute(sql)]

            return await self._db.run(job)

    def _ping(self, conn: sqlite3.Connection) -> None:
        self._ensure(conn)

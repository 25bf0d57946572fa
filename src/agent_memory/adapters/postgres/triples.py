"""`TripleStore` on PostgreSQL: one `graph_triples` table in the deployment's schema.

The table is created on first use with `CREATE TABLE IF NOT EXISTS`, inside a
transaction holding the same advisory lock as the migrations, so handles that
start together never race on the DDL. Text columns use the "C" collation, so
equality is exact and ordering is code point order, like every other backend.
The primary key is the triple's identity: `add` is `INSERT ... ON CONFLICT DO
NOTHING`. Walks are breadth-first, one indexed query per hop, all in one
REPEATABLE READ transaction (one state of the graph).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import sql

from agent_memory.adapters.postgres._database import PostgresDatabase, PostgresHandle
from agent_memory.adapters.postgres._migrations import MIGRATION_LOCK
from agent_memory.domain.triples import (
    Triple,
    WalkStep,
    check_filters,
    check_triples,
    distinct,
    require_hops,
    require_node,
    walk_async,
)
from agent_memory.domain.validation import require_scope

__all__ = ["TABLE", "PostgresTripleStore"]

TABLE = "graph_triples"
_COLUMNS = sql.SQL("owner, loop, subject, predicate, object, created_at, source")
_ORDER = sql.SQL("ORDER BY created_at DESC, loop, subject, predicate, object")


def _ddl(db: PostgresDatabase) -> list[sql.Composed]:
    table = db.table(TABLE)
    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            ' owner text COLLATE "C" NOT NULL, loop text COLLATE "C" NOT NULL,'
            ' subject text COLLATE "C" NOT NULL, predicate text COLLATE "C" NOT NULL,'
            ' object text COLLATE "C" NOT NULL, created_at timestamptz NOT NULL,'
            " source text NOT NULL,"
            " PRIMARY KEY (owner, loop, subject, predicate, object))"
        ).format(t=table),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (owner, subject)").format(
            sql.Identifier(f"{TABLE}_subject"), table
        ),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (owner, object)").format(
            sql.Identifier(f"{TABLE}_object"), table
        ),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (owner, created_at DESC)").format(
            sql.Identifier(f"{TABLE}_time"), table
        ),
    ]


def _row(row: Sequence[Any]) -> Triple:
    return Triple(
        owner=row[0],
        loop=row[1],
        subject=row[2],
        predicate=row[3],
        object=row[4],
        created_at=row[5],
        source=row[6],
    )


class PostgresTripleStore(PostgresHandle):
    """`TripleStore` on one PostgreSQL schema (a `PostgresDatabase`)."""

    def __init__(self, database: PostgresDatabase, *, owns_database: bool = False) -> None:
        super().__init__(database, "postgres triple store", owns_database=owns_database)
        self._table = database.table(TABLE)
        self._ready = False

    async def _ensure(self) -> None:
        if self._ready:
            return
        async with self._db.connection() as conn:
            cur = await conn.execute("SELECT to_regclass(%s)", (f'"{self._db.schema}"."{TABLE}"',))
            row = await cur.fetchone()
            if row is None or row[0] is None:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                    await conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                            sql.Identifier(self._db.schema)
                        )
                    )
                    for statement in _ddl(self._db):
                        await conn.execute(statement)
        self._ready = True

    async def add(self, triples: Sequence[Triple]) -> int:
        async with self._life.op():
            batch = distinct(check_triples(triples))
            if not batch:
                return 0
            await self._ensure()
            columns: list[list[Any]] = [[] for _ in range(7)]
            for t in batch:
                for i, value in enumerate(
                    (t.owner, t.loop, t.subject, t.predicate, t.object, t.created_at, t.source)
                ):
                    columns[i].append(value)
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL(
                        "INSERT INTO {t} ({cols}) SELECT * FROM unnest("
                        "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
                        " %s::timestamptz[], %s::text[]) ON CONFLICT DO NOTHING"
                    ).format(t=self._table, cols=_COLUMNS),
                    columns,
                )
                return max(cur.rowcount, 0)

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
            await self._ensure()
            where: list[sql.Composable] = [sql.SQL("owner = %s")]
            params: list[Any] = [owner]
            for column, value in (
                ("loop", loop),
                ("subject", subject),
                ("predicate", predicate),
                ("object", object),
            ):
                if value is not None:
                    where.append(sql.SQL("{} = %s").format(sql.Identifier(column)))
                    params.append(value)
            params.append(limit)
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL("SELECT {cols} FROM {t} WHERE {where} {order} LIMIT %s").format(
                        cols=_COLUMNS,
                        t=self._table,
                        where=sql.SQL(" AND ").join(where),
                        order=_ORDER,
                    ),
                    params,
                )
                rows = await cur.fetchall()
            return [_row(r) for r in rows]

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        async with self._life.op():
            check_filters(owner, loop=loop, limit=limit)
            require_node(node)
            require_hops(hops)
            await self._ensure()
            loop_cond = sql.SQL("") if loop is None else sql.SQL(" AND loop = %s")
            loop_param: list[Any] = [] if loop is None else [loop]
            statement = sql.SQL(
                "SELECT {cols} FROM {t} WHERE owner = %s{loop}"
                " AND (subject = ANY(%s::text[]) OR object = ANY(%s::text[]))"
            ).format(cols=_COLUMNS, t=self._table, loop=loop_cond)

            # Every hop reads the same snapshot (one REPEATABLE READ transaction,
            # like SQLite's read transaction): a triple stored while the walk
            # runs is seen at its smallest distance or not at all, never at a
            # later hop's distance.
            async with self._db.connection() as conn, conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

                async def edges_of(frontier: frozenset[str]) -> Iterable[Triple]:
                    nodes = sorted(frontier)
                    cur = await conn.execute(statement, [owner, *loop_param, nodes, nodes])
                    return [_row(r) for r in await cur.fetchall()]

                return await walk_async(node, hops, limit, edges_of)

    async def delete_scope(self, owner: str, *, loop: str | None = None) -> int:
        async with self._life.op():
            require_scope(owner, "owner")
            if loop is not None:
                require_scope(loop, "loop")
            await self._ensure()
            async with self._db.connection() as conn:
                if loop is None:
                    cur = await conn.execute(
                        sql.SQL("DELETE FROM {t} WHERE owner = %s").format(t=self._table), (owner,)
                    )
                else:
                    cur = await conn.execute(
                        sql.SQL("DELETE FROM {t} WHERE owner = %s AND loop = %s").format(
                            t=self._table
                        ),
                        (owner, loop),
                    )
                return max(cur.rowcount, 0)

    async def owners(self) -> list[str]:
        """Every owner with a stored triple, sorted by code point (`OwnerListing`)."""
        async with self._life.op():
            await self._ensure()
            rows = await self._db.fetch_all(
                sql.SQL("SELECT DISTINCT owner FROM {t} ORDER BY owner").format(t=self._table), ()
            )
            return [row[0] for row in rows]

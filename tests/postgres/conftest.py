"""Fixtures for the PostgreSQL adapter tests.

Every test class gets its own schema in the session's server (migrated once);
each test opens fresh handles on it and the fixture TRUNCATEs every table of
the schema afterwards, so tests never see each other's rows and stay fast.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest
from psycopg import sql

from agent_memory.adapters.postgres import PostgresDatabase
from agent_memory.domain.records import EmbeddingSpace

SPACE = EmbeddingSpace(model="contract-test", dimension=8)

OpenDatabase = Callable[[], Awaitable[PostgresDatabase]]


def _schema_name(request: pytest.FixtureRequest) -> str:
    owner = request.cls.__name__ if request.cls is not None else request.module.__name__
    return "t_" + re.sub(r"[^a-z0-9]+", "_", owner.lower())[:50]


async def _truncate_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s"
            " AND tablename NOT IN ('schema_version', 'spaces')",
            (schema,),
        )
        tables = [sql.Identifier(schema, str(r[0])) for r in await cur.fetchall()]
        if tables:
            await conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(tables)))


@pytest.fixture
async def open_database(
    postgres_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[OpenDatabase]:
    """Open handles on this test class's schema; truncated after the test."""
    schema = _schema_name(request)
    opened: list[PostgresDatabase] = []

    async def open_db() -> PostgresDatabase:
        db = PostgresDatabase(postgres_url, schema=schema, min_size=1, max_size=4)
        await db.open()
        opened.append(db)
        return db

    yield open_db
    for db in opened:
        await db.close()
    await _truncate_schema(postgres_url, schema)

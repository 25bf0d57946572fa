"""Fixtures for the PostgreSQL adapter tests.

Every test class gets its own schema in the session's server (migrated once);
each test opens fresh handles on it and the fixture empties every table of
the schema afterwards, so tests never see each other's rows and stay fast.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

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


@pytest.fixture(scope="session")
def cleanup_connection(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    """One synchronous connection for emptying schemas between tests."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


def _empty_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """DELETE every row of the schema's data tables (cheaper than TRUNCATE for a few rows)."""
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s"
        " AND tablename NOT IN ('schema_version', 'spaces')",
        (schema,),
    ).fetchall()
    if rows:
        conn.execute(
            sql.SQL("; ").join(
                sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, str(r[0]))) for r in rows
            )
        )


@pytest.fixture
async def open_database(
    postgres_url: str,
    cleanup_connection: psycopg.Connection[Any],
    request: pytest.FixtureRequest,
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
    _empty_schema(cleanup_connection, schema)


#: Contract tests PostgreSQL is known to fail, with why. Each is a strict xfail:
#: when the adapter is fixed, the pass fails the run until the entry goes.
KNOWN_FAILURES = {
    "TestPostgresMemoryStore::test_keyword_folds_unicode_case_as_the_oracle": (
        "MS-KW-13: the tsvector is derived in SQL (to_tsvector), whose lower() has no "
        "final-sigma rule: 'ΟΔΟΣ' is indexed as 'οδοσ', the oracle's 'οδος'"
    ),
    "TestPostgresMemoryStore::test_keyword_case_property": (
        "MS-KW-14: PostgreSQL lowers a final capital sigma to a non-final one (see MS-KW-13)"
    ),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the `KNOWN_FAILURES` of this directory's contract run as strict xfails."""
    for item in items:
        path, _, name = item.nodeid.partition("::")
        if path.endswith("postgres/test_contract.py") and name in KNOWN_FAILURES:
            item.add_marker(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[name]))

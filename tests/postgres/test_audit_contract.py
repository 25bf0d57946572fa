"""The shipped AuditLog contract on PostgreSQL, with the schema's event log and
store as neighbours."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agent_memory.adapters.postgres import (
    PostgresAuditLog,
    PostgresEventLog,
    PostgresMemoryStore,
    schema_for_deployment,
)
from agent_memory.bootstrap.connect import connect
from agent_memory.contract_tests import AuditLogContract, AuditNeighbours
from portability.helpers import settings as isolated
from postgres.conftest import SPACE, OpenDatabase
from services.test_audit_trail import SECRET
from services.test_audit_trail import _seed as seed


class TestPostgresAuditLog(AuditLogContract):
    @pytest.fixture
    async def audit_log(self, open_database: OpenDatabase) -> AsyncIterator[PostgresAuditLog]:
        log = PostgresAuditLog(await open_database(), owns_database=True)
        yield log
        await log.close()

    @pytest.fixture
    async def neighbours(self, open_database: OpenDatabase) -> AsyncIterator[AuditNeighbours]:
        database = await open_database()
        events = PostgresEventLog(database, owns_database=True)
        store = PostgresMemoryStore(database, SPACE, owns_database=True)
        yield AuditNeighbours(events=events, store=store)
        await events.close()
        await store.close()

    @pytest.fixture
    def reopen(self, open_database: OpenDatabase) -> Callable[[], Awaitable[PostgresAuditLog]]:
        async def open_again() -> PostgresAuditLog:
            return PostgresAuditLog(await open_database(), owns_database=True)

        return open_again


async def test_raw_audit_rows_hold_no_forgotten_text(postgres_url: str, tmp_path: Path) -> None:
    """After forgetting a user with distinctive text through the services, no
    row of the deployment's audit_log table contains that text."""
    settings = isolated(tmp_path)
    async with connect(postgres_url, settings=settings) as memory:
        await seed(memory, "ana")
        receipt = await memory.users.forget("ana")
        assert receipt.facts == 3
    schema = schema_for_deployment(settings.deployment)
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT id, at::text, tenant, entry::text FROM {}").format(
                sql.Identifier(schema, "audit_log")
            )
        )
        rows = await cur.fetchall()
        await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert len(rows) == 1
    assert "forget_user" in repr(rows)  # the scan sees the entry
    assert SECRET not in repr(rows)

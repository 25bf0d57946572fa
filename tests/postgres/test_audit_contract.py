"""The shipped AuditLog contract on PostgreSQL, with the schema's event log and
store as neighbours."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_memory.adapters.postgres import (
    PostgresAuditLog,
    PostgresEventLog,
    PostgresMemoryStore,
)
from agent_memory.contract_tests import AuditLogContract, AuditNeighbours
from postgres.conftest import SPACE, OpenDatabase


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

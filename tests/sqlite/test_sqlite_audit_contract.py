"""The shipped AuditLog contract on SQLite, with the file's event log and store
as neighbours (erasing a user must leave the audit table alone)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agent_memory.adapters.sqlite import SqliteAuditLog, SqliteEventLog, SqliteMemoryStore
from agent_memory.contract_tests import AuditLogContract, AuditNeighbours
from agent_memory.domain.records import EmbeddingSpace

SPACE = EmbeddingSpace(model="audit-model", dimension=8)


class TestSqliteAuditLog(AuditLogContract):
    @pytest.fixture
    async def audit_log(self, tmp_path: Path) -> AsyncIterator[SqliteAuditLog]:
        log = SqliteAuditLog(tmp_path / "audit.db")
        yield log
        await log.close()

    @pytest.fixture
    async def neighbours(self, tmp_path: Path) -> AsyncIterator[AuditNeighbours]:
        events = SqliteEventLog(tmp_path / "audit.db")
        store = SqliteMemoryStore(tmp_path / "audit.db", SPACE)
        yield AuditNeighbours(events=events, store=store)
        await events.close()
        await store.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[], Awaitable[SqliteAuditLog]]:
        async def open_again() -> SqliteAuditLog:
            return SqliteAuditLog(tmp_path / "audit.db")

        return open_again

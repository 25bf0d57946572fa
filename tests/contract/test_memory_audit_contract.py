"""The shipped AuditLog contract on the in-process adapter (the oracle)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_memory.adapters.memory import (
    InMemoryAuditLog,
    InMemoryEventLog,
    InMemoryMemoryStore,
    MemoryAuditBackend,
)
from agent_memory.contract_tests import AuditLogContract, AuditNeighbours
from agent_memory.domain.records import EmbeddingSpace


class TestMemoryAuditLog(AuditLogContract):
    @pytest.fixture
    def backend(self) -> MemoryAuditBackend:
        return MemoryAuditBackend()

    @pytest.fixture
    async def audit_log(self, backend: MemoryAuditBackend) -> AsyncIterator[InMemoryAuditLog]:
        log = InMemoryAuditLog(backend=backend)
        yield log
        await log.close()

    @pytest.fixture
    def neighbours(self) -> AuditNeighbours:
        space = EmbeddingSpace(model="audit-test", dimension=8)
        return AuditNeighbours(events=InMemoryEventLog(), store=InMemoryMemoryStore(space))

    @pytest.fixture
    def reopen(self, backend: MemoryAuditBackend) -> Callable[[], Awaitable[InMemoryAuditLog]]:
        async def open_again() -> InMemoryAuditLog:
            return InMemoryAuditLog(backend=backend)

        return open_again

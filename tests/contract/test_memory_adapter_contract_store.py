"""The MemoryStore contract on the in-memory adapter (the oracle proves itself)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_memory.adapters.memory import InMemoryMemoryStore, MemoryBackend
from agent_memory.contract_tests import Capabilities, MemoryStoreContract
from agent_memory.contract_tests.memory_store import Reopen
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.storage import MemoryStore

SPACE = EmbeddingSpace(model="contract-test", dimension=8)


class TestInMemoryMemoryStore(MemoryStoreContract):
    capabilities = Capabilities(
        atomic_batches=True,
        concurrent_duplicate_rejection=True,
        reopen=True,
        keyword_search=True,
        versioned_writes=True,
    )

    @pytest.fixture
    def backend(self) -> MemoryBackend:
        return MemoryBackend()

    @pytest.fixture
    async def store(self, backend: MemoryBackend) -> AsyncIterator[MemoryStore]:
        store = InMemoryMemoryStore(SPACE, backend)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, backend: MemoryBackend) -> Reopen:
        async def open_again() -> MemoryStore:
            return InMemoryMemoryStore(SPACE, backend)

        return open_again

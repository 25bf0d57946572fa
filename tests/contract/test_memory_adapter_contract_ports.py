"""The shipped EventLog, LeaseStore and Cache contracts on the in-process adapters.

Every capability is declared, so nothing may skip. `reopen` opens a second
adapter on the same shared backend object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_memory.adapters.memory import (
    InMemoryCache,
    InMemoryEventLog,
    InMemoryLeaseStore,
    MemoryCacheBackend,
    MemoryEventBackend,
    MemoryLeaseBackend,
)
from agent_memory.contract_tests import (
    CacheContract,
    Capabilities,
    EventLogContract,
    LeaseStoreContract,
)
from agent_memory.ports.storage import Cache, EventLog, LeaseStore

MEMORY = Capabilities(
    atomic_batches=True,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    versioned_writes=True,
    ttl_resolution_ms=10,
)


class TestInMemoryEventLog(EventLogContract):
    capabilities = MEMORY

    @pytest.fixture
    def backend(self) -> MemoryEventBackend:
        return MemoryEventBackend()

    @pytest.fixture
    async def event_log(self, backend: MemoryEventBackend) -> AsyncIterator[EventLog]:
        log = InMemoryEventLog(backend=backend)
        yield log
        await log.close()

    @pytest.fixture
    def reopen(self, backend: MemoryEventBackend) -> Callable[[], Awaitable[EventLog]]:
        async def _open() -> EventLog:
            return InMemoryEventLog(backend=backend)

        return _open


class TestInMemoryLeaseStore(LeaseStoreContract):
    capabilities = MEMORY

    @pytest.fixture
    def backend(self) -> MemoryLeaseBackend:
        return MemoryLeaseBackend()

    @pytest.fixture
    async def leases(self, backend: MemoryLeaseBackend) -> AsyncIterator[LeaseStore]:
        store = InMemoryLeaseStore(backend=backend)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, backend: MemoryLeaseBackend) -> Callable[[], Awaitable[LeaseStore]]:
        async def _open() -> LeaseStore:
            return InMemoryLeaseStore(backend=backend)

        return _open


class TestInMemoryCache(CacheContract):
    capabilities = MEMORY

    @pytest.fixture
    def backend(self) -> MemoryCacheBackend:
        return MemoryCacheBackend()

    @pytest.fixture
    async def cache(self, backend: MemoryCacheBackend) -> AsyncIterator[Cache]:
        store = InMemoryCache(backend=backend)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, backend: MemoryCacheBackend) -> Callable[[], Awaitable[Cache]]:
        async def _open() -> Cache:
            return InMemoryCache(backend=backend)

        return _open

"""The shipped contract suite, run on PostgreSQL for all four ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_memory.adapters.postgres import (
    PostgresCache,
    PostgresEventLog,
    PostgresLeaseStore,
    PostgresMemoryStore,
)
from agent_memory.contract_tests import (
    CacheContract,
    Capabilities,
    EventLogContract,
    LeaseStoreContract,
    MemoryStoreContract,
)
from budget import STATE_MACHINE_EXAMPLES
from postgres.conftest import SPACE, OpenDatabase

CAPABILITIES = Capabilities(
    atomic_batches=True,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    versioned_writes=True,
    ttl_resolution_ms=20,
)


class TestPostgresMemoryStore(MemoryStoreContract):
    state_machine_examples = STATE_MACHINE_EXAMPLES
    capabilities = CAPABILITIES

    @pytest.fixture
    async def store(self, open_database: OpenDatabase) -> AsyncIterator[PostgresMemoryStore]:
        store = PostgresMemoryStore(await open_database(), SPACE, owns_database=True)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, open_database: OpenDatabase) -> Callable[[], Awaitable[PostgresMemoryStore]]:
        async def open_again() -> PostgresMemoryStore:
            return PostgresMemoryStore(await open_database(), SPACE, owns_database=True)

        return open_again


class TestPostgresEventLog(EventLogContract):
    capabilities = CAPABILITIES

    @pytest.fixture
    async def event_log(self, open_database: OpenDatabase) -> AsyncIterator[PostgresEventLog]:
        log = PostgresEventLog(await open_database(), owns_database=True)
        yield log
        await log.close()

    @pytest.fixture
    def reopen(self, open_database: OpenDatabase) -> Callable[[], Awaitable[PostgresEventLog]]:
        async def open_again() -> PostgresEventLog:
            return PostgresEventLog(await open_database(), owns_database=True)

        return open_again


class TestPostgresLeaseStore(LeaseStoreContract):
    capabilities = CAPABILITIES

    @pytest.fixture
    async def leases(self, open_database: OpenDatabase) -> AsyncIterator[PostgresLeaseStore]:
        leases = PostgresLeaseStore(await open_database(), owns_database=True)
        yield leases
        await leases.close()

    @pytest.fixture
    def reopen(self, open_database: OpenDatabase) -> Callable[[], Awaitable[PostgresLeaseStore]]:
        async def open_again() -> PostgresLeaseStore:
            return PostgresLeaseStore(await open_database(), owns_database=True)

        return open_again


class TestPostgresCache(CacheContract):
    capabilities = CAPABILITIES

    @pytest.fixture
    async def cache(self, open_database: OpenDatabase) -> AsyncIterator[PostgresCache]:
        cache = PostgresCache(await open_database(), owns_database=True)
        yield cache
        await cache.close()

    @pytest.fixture
    def reopen(self, open_database: OpenDatabase) -> Callable[[], Awaitable[PostgresCache]]:
        async def open_again() -> PostgresCache:
            return PostgresCache(await open_database(), owns_database=True)

        return open_again

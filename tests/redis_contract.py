"""The shipped contract suite wired to the Redis adapters, for any Redis URL.

`tests/redis/test_redis_contract.py` (one server) and
`tests/redis_cluster/test_cluster_contract.py` (a cluster) subclass these with
their capabilities and provide the `redis_contract_url` fixture; the classes here
are not collected themselves (their names do not start with `Test`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_memory.adapters.redis import (
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.contract_tests import (
    CacheContract,
    EventLogContract,
    LeaseStoreContract,
    MemoryStoreContract,
)
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["CacheSuite", "EventLogSuite", "LeaseStoreSuite", "MemoryStoreSuite"]

SPACE = EmbeddingSpace(model="test-model", dimension=8)


class MemoryStoreSuite(MemoryStoreContract):
    @pytest.fixture
    async def store(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisMemoryStore]:
        s = RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)
        yield s
        await s.close()
        cleanup = RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)
        await cleanup.drop_index()
        await cleanup.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisMemoryStore]]:
        async def open_again() -> RedisMemoryStore:
            return RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)

        return open_again


class EventLogSuite(EventLogContract):
    @pytest.fixture
    async def event_log(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisEventLog]:
        log = RedisEventLog.from_url(redis_contract_url, deployment=deployment)
        yield log
        await log.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisEventLog]]:
        async def open_again() -> RedisEventLog:
            return RedisEventLog.from_url(redis_contract_url, deployment=deployment)

        return open_again


class LeaseStoreSuite(LeaseStoreContract):
    @pytest.fixture
    async def leases(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisLeaseStore]:
        s = RedisLeaseStore.from_url(redis_contract_url, deployment=deployment)
        yield s
        await s.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisLeaseStore]]:
        async def open_again() -> RedisLeaseStore:
            return RedisLeaseStore.from_url(redis_contract_url, deployment=deployment)

        return open_again


class CacheSuite(CacheContract):
    @pytest.fixture
    async def cache(self, redis_contract_url: str, deployment: str) -> AsyncIterator[RedisCache]:
        c = RedisCache.from_url(redis_contract_url, deployment=deployment)
        yield c
        await c.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisCache]]:
        async def open_again() -> RedisCache:
            return RedisCache.from_url(redis_contract_url, deployment=deployment)

        return open_again

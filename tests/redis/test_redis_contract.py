"""The shipped contract suite, run on Redis for every port (0 skips expected)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis_helpers import SPACE

from agent_memory.adapters.redis import (
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.contract_tests import (
    CacheContract,
    Capabilities,
    EventLogContract,
    LeaseStoreContract,
    MemoryStoreContract,
)

CAPS = Capabilities(
    atomic_batches=True,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    ttl_resolution_ms=20,
)


class TestRedisMemoryStore(MemoryStoreContract):
    capabilities = CAPS

    @pytest.fixture
    async def store(self, redis_url: str, deployment: str) -> AsyncIterator[RedisMemoryStore]:
        s = RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment)
        yield s
        await s.close()
        cleanup = RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment)
        await cleanup.drop_index()
        await cleanup.close()

    @pytest.fixture
    async def reopen(
        self, redis_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisMemoryStore]]:
        async def open_again() -> RedisMemoryStore:
            return RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment)

        return open_again


class TestRedisEventLog(EventLogContract):
    capabilities = CAPS

    @pytest.fixture
    async def event_log(self, redis_url: str, deployment: str) -> AsyncIterator[RedisEventLog]:
        log = RedisEventLog.from_url(redis_url, deployment=deployment)
        yield log
        await log.close()

    @pytest.fixture
    async def reopen(
        self, redis_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisEventLog]]:
        async def open_again() -> RedisEventLog:
            return RedisEventLog.from_url(redis_url, deployment=deployment)

        return open_again


class TestRedisLeaseStore(LeaseStoreContract):
    capabilities = CAPS

    @pytest.fixture
    async def leases(self, redis_url: str, deployment: str) -> AsyncIterator[RedisLeaseStore]:
        s = RedisLeaseStore.from_url(redis_url, deployment=deployment)
        yield s
        await s.close()

    @pytest.fixture
    async def reopen(
        self, redis_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisLeaseStore]]:
        async def open_again() -> RedisLeaseStore:
            return RedisLeaseStore.from_url(redis_url, deployment=deployment)

        return open_again


class TestRedisCache(CacheContract):
    capabilities = CAPS

    @pytest.fixture
    async def cache(self, redis_url: str, deployment: str) -> AsyncIterator[RedisCache]:
        c = RedisCache.from_url(redis_url, deployment=deployment)
        yield c
        await c.close()

    @pytest.fixture
    async def reopen(self, redis_url: str, deployment: str) -> Callable[[], Awaitable[RedisCache]]:
        async def open_again() -> RedisCache:
            return RedisCache.from_url(redis_url, deployment=deployment)

        return open_again

"""The shipped contract suite on a real Redis Cluster (3 primaries + 3 replicas),
every port. Skips only what the cluster declares it lacks: `atomic_batches` (a
batch spanning owners touches several slots, each written atomically by its own
script; no command spans slots, so the batch as a whole is not atomic)."""

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
    Capabilities,
    EventLogContract,
    LeaseStoreContract,
    MemoryStoreContract,
)
from agent_memory.domain.records import EmbeddingSpace

SPACE = EmbeddingSpace(model="test-model", dimension=8)

CLUSTER_CAPS = Capabilities(
    atomic_batches=False,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    ttl_resolution_ms=20,
)


class TestClusterMemoryStore(MemoryStoreContract):
    capabilities = CLUSTER_CAPS

    @pytest.fixture
    async def store(
        self, redis_cluster_url: str, deployment: str
    ) -> AsyncIterator[RedisMemoryStore]:
        s = RedisMemoryStore.from_url(redis_cluster_url, SPACE, deployment=deployment)
        yield s
        await s.close()
        cleanup = RedisMemoryStore.from_url(redis_cluster_url, SPACE, deployment=deployment)
        await cleanup.drop_index()
        await cleanup.close()

    @pytest.fixture
    async def reopen(
        self, redis_cluster_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisMemoryStore]]:
        async def open_again() -> RedisMemoryStore:
            return RedisMemoryStore.from_url(redis_cluster_url, SPACE, deployment=deployment)

        return open_again


class TestClusterEventLog(EventLogContract):
    capabilities = CLUSTER_CAPS

    @pytest.fixture
    async def event_log(
        self, redis_cluster_url: str, deployment: str
    ) -> AsyncIterator[RedisEventLog]:
        log = RedisEventLog.from_url(redis_cluster_url, deployment=deployment)
        yield log
        await log.close()

    @pytest.fixture
    async def reopen(
        self, redis_cluster_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisEventLog]]:
        async def open_again() -> RedisEventLog:
            return RedisEventLog.from_url(redis_cluster_url, deployment=deployment)

        return open_again


class TestClusterLeaseStore(LeaseStoreContract):
    """With the cluster default: every acquire and renew waits for one replica."""

    capabilities = CLUSTER_CAPS

    @pytest.fixture
    async def leases(
        self, redis_cluster_url: str, deployment: str
    ) -> AsyncIterator[RedisLeaseStore]:
        s = RedisLeaseStore.from_url(redis_cluster_url, deployment=deployment)
        assert s.wait_replicas == 1
        yield s
        await s.close()

    @pytest.fixture
    async def reopen(
        self, redis_cluster_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisLeaseStore]]:
        async def open_again() -> RedisLeaseStore:
            return RedisLeaseStore.from_url(redis_cluster_url, deployment=deployment)

        return open_again


class TestClusterCache(CacheContract):
    capabilities = CLUSTER_CAPS

    @pytest.fixture
    async def cache(self, redis_cluster_url: str, deployment: str) -> AsyncIterator[RedisCache]:
        c = RedisCache.from_url(redis_cluster_url, deployment=deployment)
        yield c
        await c.close()

    @pytest.fixture
    async def reopen(
        self, redis_cluster_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisCache]]:
        async def open_again() -> RedisCache:
            return RedisCache.from_url(redis_cluster_url, deployment=deployment)

        return open_again

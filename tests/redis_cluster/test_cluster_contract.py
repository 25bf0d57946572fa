"""The shipped contract suite on a real Redis Cluster (3 primaries + 3 replicas),
every port. Skips only what the cluster declares it lacks: `atomic_batches` (a
batch spanning owners touches several slots, each written atomically by its own
script; no command spans slots, so the batch as a whole is not atomic)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_memory.adapters.redis import RedisLeaseStore
from agent_memory.contract_tests import Capabilities
from redis_contract import (
    CacheSuite,
    EventLogSuite,
    LeaseStoreSuite,
    LexicalVersionSuite,
    MemoryStoreSuite,
)

CLUSTER_CAPS = Capabilities(
    atomic_batches=False,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    versioned_writes=True,
    ttl_resolution_ms=20,
)


@pytest.fixture
def redis_contract_url(redis_cluster_url: str) -> str:
    return redis_cluster_url


class TestClusterMemoryStore(MemoryStoreSuite):
    capabilities = CLUSTER_CAPS


class TestClusterEventLog(EventLogSuite):
    capabilities = CLUSTER_CAPS


class TestClusterLeaseStore(LeaseStoreSuite):
    """With the cluster default: every acquire and renew waits for one replica."""

    capabilities = CLUSTER_CAPS

    @pytest.fixture
    async def leases(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisLeaseStore]:
        s = RedisLeaseStore.from_url(redis_contract_url, deployment=deployment)
        assert s.wait_replicas == 1
        yield s
        await s.close()


class TestClusterCache(CacheSuite):
    capabilities = CLUSTER_CAPS


class TestClusterLexicalVersion(LexicalVersionSuite):
    pass

"""The shipped contract suite, run on Redis for every port (0 skips expected)."""

from __future__ import annotations

import pytest

from agent_memory.contract_tests import Capabilities
from redis_contract import (
    CacheSuite,
    EventLogSuite,
    LeaseStoreSuite,
    LexicalVersionSuite,
    MemoryStoreSuite,
)

CAPS = Capabilities(
    atomic_batches=True,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    versioned_writes=True,
    ttl_resolution_ms=20,
)


@pytest.fixture
def redis_contract_url(redis_url: str) -> str:
    return redis_url


class TestRedisMemoryStore(MemoryStoreSuite):
    capabilities = CAPS


class TestRedisEventLog(EventLogSuite):
    capabilities = CAPS


class TestRedisLeaseStore(LeaseStoreSuite):
    capabilities = CAPS


class TestRedisCache(CacheSuite):
    capabilities = CAPS


class TestRedisLexicalVersion(LexicalVersionSuite):
    pass

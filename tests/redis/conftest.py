"""Fixtures for the redis adapter tests: a unique deployment per test (isolation
without FLUSHALL), the test's index dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis_helpers import SPACE

from agent_memory.adapters.redis import (
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
    connect,
)
from agent_memory.domain.records import EmbeddingSpace


@pytest.fixture
def deployment() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[object]:
    c = connect(redis_url)
    yield c
    await c.aclose()


@pytest.fixture
async def store(redis_url: str, deployment: str) -> AsyncIterator[RedisMemoryStore]:
    s = RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment)
    yield s
    cleanup = RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment)
    await cleanup.drop_index()
    await cleanup.close()
    await s.close()


@pytest.fixture
def open_store(redis_url: str, deployment: str) -> Callable[..., RedisMemoryStore]:
    def _open(space: EmbeddingSpace = SPACE, **kw: object) -> RedisMemoryStore:
        return RedisMemoryStore.from_url(redis_url, space, deployment=deployment, **kw)  # type: ignore[arg-type]

    return _open


@pytest.fixture
async def events(redis_url: str, deployment: str) -> AsyncIterator[RedisEventLog]:
    log = RedisEventLog.from_url(redis_url, deployment=deployment)
    yield log
    await log.close()


@pytest.fixture
async def leases(redis_url: str, deployment: str) -> AsyncIterator[RedisLeaseStore]:
    s = RedisLeaseStore.from_url(redis_url, deployment=deployment)
    yield s
    await s.close()


@pytest.fixture
async def cache(redis_url: str, deployment: str) -> AsyncIterator[RedisCache]:
    c = RedisCache.from_url(redis_url, deployment=deployment)
    yield c
    await c.close()

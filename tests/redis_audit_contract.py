"""The shipped AuditLog contract wired to the Redis adapter, for any Redis URL
(`tests/redis/` and `tests/redis_cluster/` provide `redis_contract_url`), with
the deployment's event log and store as neighbours."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agent_memory.adapters.redis import RedisAuditLog, RedisEventLog, RedisMemoryStore
from agent_memory.contract_tests import AuditLogContract, AuditNeighbours
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["AuditLogSuite"]

SPACE = EmbeddingSpace(model="audit-model", dimension=8)


class AuditLogSuite(AuditLogContract):
    @pytest.fixture
    async def audit_log(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisAuditLog]:
        log = RedisAuditLog.from_url(redis_contract_url, deployment=deployment)
        yield log
        await log.close()

    @pytest.fixture
    async def neighbours(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[AuditNeighbours]:
        events = RedisEventLog.from_url(redis_contract_url, deployment=deployment)
        store = RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)
        yield AuditNeighbours(events=events, store=store)
        await events.close()
        await store.drop_index()
        await store.close()

    @pytest.fixture
    def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisAuditLog]]:
        async def open_again() -> RedisAuditLog:
            return RedisAuditLog.from_url(redis_contract_url, deployment=deployment)

        return open_again

"""Parallel writers on one LangGraph key (LangGraph's `test_large_batches`
workload: 10 threads x 300 calls of the sync API while the loop runs, clause
LG-CONC of agent_memory.contract_tests.langgraph): put is an upsert, delete of
a missing item a no-op, and no interleaving raises, on every backend."""

from __future__ import annotations

import pytest

from agent_memory.contract_tests.langgraph import check_concurrent_writers
from agent_memory.langgraph import AgentMemoryStore


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgres", "qdrant"])
async def test_parallel_sync_writers_on_shared_keys_never_fail(open_memory, backend: str) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        store = AgentMemoryStore(memory, index={"fields": ["text"]})
        # 10 threads x 150 calls on 3 keys (the clause's default is 300 each): every
        # put and delete also takes the item's writer lease, so the suite's
        # default would spend half a minute here on backoff alone
        assert await check_concurrent_writers(store, calls=150) == 1_500

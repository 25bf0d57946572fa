"""Edge cases a LangGraph user meets, on every backend that serves the store:
non-finite filter values (agent_memory.contract_tests.langgraph's edge clauses)."""

from __future__ import annotations

import pytest

from agent_memory.contract_tests.langgraph import check_non_finite_filters
from agent_memory.langgraph import AgentMemoryStore

BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_non_finite_filters_select_what_in_memory_store_selects(
    open_memory, backend: str
) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        await check_non_finite_filters(AgentMemoryStore(memory))

"""Edge cases a LangGraph user meets, on every backend that serves the store:
non-finite filter values, distance types (agent_memory.contract_tests.langgraph's edge clauses)."""

from __future__ import annotations

import pytest
from langgraph.store.base import IndexConfig

from agent_memory.contract_tests.langgraph import check_distance_types, check_non_finite_filters
from agent_memory.domain.errors import ConfigurationError
from agent_memory.langgraph import AgentMemoryStore

from .conftest import DIMENSION

BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_non_finite_filters_select_what_in_memory_store_selects(
    open_memory, backend: str
) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        await check_non_finite_filters(AgentMemoryStore(memory))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_distance_types_score_as_documented_or_are_refused(open_memory, backend: str) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:

        async def factory(index: IndexConfig) -> AgentMemoryStore:
            return AgentMemoryStore(memory, index=index)

        await check_distance_types(factory, DIMENSION)
        for distance in ("l2", "inner_product", "hamming"):
            with pytest.raises(ConfigurationError, match=distance):
                AgentMemoryStore(memory, index={"dims": DIMENSION, "distance_type": distance})  # type: ignore[typeddict-item]
        with pytest.raises(ConfigurationError, match="ann_index_config"):
            AgentMemoryStore(memory, index={"dims": DIMENSION, "ann_index_config": {}})  # type: ignore[typeddict-unknown-key]

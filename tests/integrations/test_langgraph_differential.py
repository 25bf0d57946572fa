"""AgentMemoryStore against LangGraph's InMemoryStore, on every backend
(agent_memory.contract_tests.langgraph). Examples per run come from the loaded
hypothesis profile: memory 55% of a profile's worth (dev 30, ci 100) across
its index modes, SQLite a fifth, Redis and PostgreSQL a tenth (>= 3 each).
The `langgraph-deep` profile runs 500 examples in every case (each backend)::

    HYPOTHESIS_PROFILE=langgraph-deep .venv/bin/python -m pytest -rP \
        tests/integrations/test_langgraph_differential.py

and each case prints what it ran (examples, batches, seconds)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import SearchItem

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.contract_tests.langgraph import differential_index, run_differential
from agent_memory.langgraph import AgentMemoryStore

from .conftest import DIMENSION, profile_examples


def our_order(hit: SearchItem) -> Any:
    """AgentMemoryStore's documented order without a query."""
    return (-hit.updated_at.timestamp(), tuple(hit.namespace), hit.key)


@pytest.mark.parametrize(
    ("backend", "mode", "share"),
    [
        ("memory", "project-embedder", 0.25),
        ("memory", "langgraph-embed", 0.2),
        ("memory", "no-index", 0.1),
        ("sqlite", "project-embedder", 0.2),
        ("redis", "langgraph-embed", 0.1),
        ("postgres", "project-embedder", 0.1),
    ],
)
async def test_agrees_with_in_memory_store(
    open_memory, backend: str, mode: str, share: float
) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        if mode == "project-embedder":
            ours: Any = {"fields": ["text"]}  # the memory's own embedder
            reference: Any = differential_index(
                DIMENSION, embed=HashingEmbedder(DIMENSION).embed_sync
            )
        elif mode == "langgraph-embed":
            ours = reference = differential_index(DIMENSION)
        else:
            ours = reference = None
        store = AgentMemoryStore(memory, index=ours)
        ran = await run_differential(
            store,
            index=reference,
            max_examples=profile_examples(share),
            plain_order=our_order,
        )
    print(f"{backend} {mode}: {ran}")

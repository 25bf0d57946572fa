"""Edge cases a LangGraph user meets, on every backend that serves the store:
non-finite filter values, distance types, embedders of another dimension
(the edge clauses of agent_memory.contract_tests.langgraph)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langgraph.store.base import IndexConfig

import agent_memory
from agent_memory.adapters.langchain import LangChainEmbedder
from agent_memory.contract_tests.langgraph import (
    check_distance_types,
    check_embedder_dimensions,
    check_non_finite_filters,
)
from agent_memory.domain.errors import ConfigurationError, DimensionMismatch
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


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_index_of_another_dimension_shares_the_memory_embedder(
    open_memory, backend: str
) -> None:  # type: ignore[no-untyped-def]
    async with contextlib.AsyncExitStack() as stack:

        async def factory(index: IndexConfig) -> AgentMemoryStore:
            embedder = LangChainEmbedder(index["embed"], dims=index["dims"])
            memory = await stack.enter_async_context(open_memory(backend, embedder))
            return AgentMemoryStore(memory, index=index)

        await check_embedder_dimensions(factory)


async def test_connect_takes_langchain_embeddings_in_one_line(tmp_path: Path) -> None:
    embeddings = DeterministicFakeEmbedding(size=1536)  # a provider's 1536 dimensions
    url = f"sqlite:///{tmp_path / 'lc.db'}"
    async with agent_memory.connect(url, embedder=embeddings) as memory:
        assert memory.store.space.dimension == 1536
        store = AgentMemoryStore(
            memory, index={"dims": 1536, "embed": embeddings, "fields": ["text"]}
        )
        await store.aput(("alice", "notes"), "k", {"text": "dark roast"})
        hits = await store.asearch(("alice", "notes"), query="dark roast")
        assert [h.key for h in hits] == ["k"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)  # the same vectors: one space
        # The memory's own records embed with the same model.
        vector = (await memory.embedder.embed(["dark roast"]))[0]
        assert vector.tolist() == pytest.approx(embeddings.embed_query("dark roast"), abs=1e-6)


async def test_a_plain_function_needs_its_dims() -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0] * 16 for _ in texts]

    with pytest.raises(ConfigurationError, match="LangChainEmbedder"):
        await agent_memory.connect("memory://fn-no-dims", embedder=embed)
    async with agent_memory.connect(
        "memory://fn-dims", embedder=LangChainEmbedder(embed, dims=16)
    ) as memory:
        assert memory.store.space.dimension == 16
    with pytest.raises(DimensionMismatch):
        await LangChainEmbedder(embed, dims=8).embed(["x"])


async def test_a_mismatched_index_points_to_connect_embedder(open_memory) -> None:  # type: ignore[no-untyped-def]
    async with open_memory("memory") as memory:
        with pytest.raises(ConfigurationError, match=r"connect\(url, embedder="):
            AgentMemoryStore(
                memory, index={"dims": 1536, "embed": DeterministicFakeEmbedding(size=1536)}
            )

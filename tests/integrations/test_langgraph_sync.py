"""A plain synchronous program uses `AgentMemoryStore` on the `SyncMemory` that
`agent_memory.sync.connect` returns: its sync API from the main thread (no
event loop), its async API from another loop, and `graph.invoke`, on every
backend that serves the store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

import agent_memory.sync
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings
from agent_memory.domain.errors import ConfigurationError
from agent_memory.langgraph import AgentMemoryStore

from .conftest import DIMENSION, backend_url


class State(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    if state["message"].startswith("remember "):
        text = state["message"].removeprefix("remember ")
        store.put((state["user"], "memories"), uuid.uuid4().hex, {"text": text})
    return {}


def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
    hits = store.search((state["user"], "memories"), query=state["message"], limit=3)
    return {"recalled": [h.value["text"] for h in hits]}


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgres", "qdrant"])
def test_sync_memory_serves_sync_and_async_api_and_graph_invoke(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    url = backend_url(backend, request, tmp_path)
    settings = Settings(deployment=f"lg-{uuid.uuid4().hex[:10]}")
    with agent_memory.sync.connect(
        url, settings=settings, embedder=HashingEmbedder(DIMENSION)
    ) as memory:
        store = AgentMemoryStore(memory, index={"fields": ["text"]})
        store.put(("alice", "notes"), "k1", {"text": "dark roast coffee"})
        got = store.get(("alice", "notes"), "k1")
        assert got is not None
        assert got.value == {"text": "dark roast coffee"}

        async def on_another_loop() -> list[str]:
            await store.aput(("alice", "notes"), "k2", {"text": "green tea"})
            hits = await store.asearch(("alice", "notes"), query="tea")
            return [h.key for h in hits]

        assert asyncio.run(on_another_loop())[0] == "k2"
        # nothing to rewrite (every vector record holds its text), from either API
        assert store.reindex() == 0
        assert asyncio.run(store.areindex()) == 0
        store.delete(("alice", "notes"), "k1")
        store.delete(("alice", "notes"), "k2")

        graph = StateGraph(State)
        graph.add_node("remember", remember)
        graph.add_node("recall", recall)
        graph.add_edge(START, "remember")
        graph.add_edge("remember", "recall")
        graph.add_edge("recall", END)
        app = graph.compile(store=store)
        app.invoke({"user": "bob", "message": "remember I drink dark roast"})
        result = app.invoke({"user": "bob", "message": "what coffee do I drink?"})
        assert result["recalled"] == ["I drink dark roast"]


async def test_the_sync_api_on_the_loop_thread_raises_like_langgraph_stores(
    open_memory,
) -> None:  # type: ignore[no-untyped-def]
    """LangGraph's async stores raise `asyncio.InvalidStateError` there (their
    test_no_running_loop); ours is that and a `ConfigurationError`, not a deadlock."""
    async with open_memory("memory") as memory:
        store = AgentMemoryStore(memory)
        for call in (
            lambda: store.put(("foo", "bar"), "baz", {"val": "baz"}),
            lambda: store.get(("foo", "bar"), "baz"),
            lambda: store.search(("foo",)),
            lambda: store.list_namespaces(prefix=("foo",)),
            store.reindex,
        ):
            with pytest.raises(asyncio.InvalidStateError) as caught:
                call()
            assert isinstance(caught.value, ConfigurationError)

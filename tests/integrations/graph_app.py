"""A small LangGraph app whose nodes remember and recall through the injected
store (run as a script: `graph_app.py <sqlite file> <user> <thread> <message>`;
prints the run's result as JSON). Used by test_langgraph_graph.py."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

import agent_memory
from agent_memory.langgraph import AgentMemoryStore


class State(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]
    everyone: list[str]


async def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    """Async node: write the message as a memory of this user."""
    if state["message"].startswith("remember "):
        fact = state["message"].removeprefix("remember ")
        await store.aput((state["user"], "memories"), uuid.uuid4().hex, {"text": fact})
    return {}


def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
    """Sync node (runs in a worker thread): the store's sync API."""
    hits = store.search((state["user"], "memories"), query=state["message"], limit=10)
    return {
        "recalled": sorted(h.value["text"] for h in hits),
        "everyone": sorted("/".join(ns) for ns in store.list_namespaces()),
    }


def build(store: BaseStore) -> Any:
    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store, checkpointer=InMemorySaver())


async def main(path: str, runs: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    out = []
    async with agent_memory.connect(f"sqlite:///{path}") as memory:
        app = build(AgentMemoryStore(memory, index={"fields": ["text"]}))
        for user, thread, message in runs:
            config = {"configurable": {"thread_id": thread}}
            result = await app.ainvoke({"user": user, "message": message}, config)
            out.append({"recalled": result["recalled"], "everyone": result["everyone"]})
    return out


if __name__ == "__main__":
    file, *args = sys.argv[1:]
    triples = [tuple(args[i : i + 3]) for i in range(0, len(args), 3)]
    print(json.dumps(asyncio.run(main(file, triples))))  # type: ignore[arg-type]

"""The differential suite fails on the bugs it is for: each broken store below
(one deliberate bug) must fail the run with the named clause."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from langgraph.store.base import ListNamespacesOp, Op, Result, SearchOp

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings
from agent_memory.contract_tests.langgraph import differential_index, run_differential
from agent_memory.entrypoints.langgraph import store as store_module
from agent_memory.langgraph import AgentMemoryStore

from .conftest import DIMENSION


class PutsFirst(AgentMemoryStore):
    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        writes = [op for op in ops if not isinstance(op, ListNamespacesOp | SearchOp)]
        writes = [op for op in writes if type(op).__name__ == "PutOp"]
        if writes:
            await super().abatch(writes)
        return [
            None if type(op).__name__ == "PutOp" else r
            for op, r in zip(ops, await super().abatch(ops), strict=True)
        ]


class IgnoresFilter(AgentMemoryStore):
    async def _search(self, op: SearchOp) -> Any:
        return await super()._search(op._replace(filter=None))


class WrongScores(AgentMemoryStore):
    async def _search(self, op: SearchOp) -> Any:
        hits = await super()._search(op)
        for hit in hits:
            if hit.score is not None:
                hit.score *= 0.9
        return hits


class TiesBackwards(AgentMemoryStore):
    """Equal scores ordered by (namespace, key) descending."""

    async def _search(self, op: SearchOp) -> Any:
        hits = await super()._search(op)
        if op.query:
            hits.sort(key=lambda h: (tuple(h.namespace), h.key), reverse=True)
            hits.sort(key=lambda h: (h.score is None, -(h.score or 0.0)))
        return hits


class ListsEmptyNamespaces(AgentMemoryStore):
    async def _holds_items(self, namespace: tuple[str, ...]) -> bool:
        return True


@contextlib.contextmanager
def dots_collide() -> Iterator[None]:
    """Namespaces joined with '.': ('a.b',) and ('a', 'b') become one."""
    original = store_module.owner_of, store_module.record_namespace_of, store_module._item_id

    def owner(namespace: tuple[str, ...]) -> str:
        return "lg-all"

    def joined(namespace: tuple[str, ...]) -> str:
        return "lg:" + ".".join(namespace)

    def item_id(namespace: tuple[str, ...], key: str) -> str:
        return "lg:" + ".".join(namespace) + "/" + key

    store_module.owner_of = owner  # type: ignore[assignment]
    store_module.record_namespace_of = joined  # type: ignore[assignment]
    store_module._item_id = item_id  # type: ignore[assignment]
    try:
        yield
    finally:
        (store_module.owner_of, store_module.record_namespace_of, store_module._item_id) = original


@pytest.mark.parametrize(
    ("broken", "clauses"),
    [
        (PutsFirst, ("LG-GET-1", "LG-GET-2", "LG-BATCH-1")),
        (IgnoresFilter, ("LG-SEARCH-1",)),
        (WrongScores, ("LG-RANK-1",)),
        (TiesBackwards, ("LG-RANK-4", "LG-PAGE-1")),
        (ListsEmptyNamespaces, ("LG-NS-1", "LG-CANARY")),
        ("dots", ("LG-GET", "LG-SEARCH-1", "LG-NS-1", "LG-CANARY")),
    ],
)
async def test_the_suite_catches(broken: Any, clauses: tuple[str, ...]) -> None:
    index = differential_index(DIMENSION)
    cls = AgentMemoryStore if broken == "dots" else broken
    opened: list[Any] = []

    async def fresh() -> Any:  # a new store per example: a leak cannot spill over
        memory = await agent_memory.connect(
            f"memory://catch-{uuid.uuid4().hex}",
            embedder=HashingEmbedder(DIMENSION),
            settings=Settings(),
        )
        opened.append(memory)
        return cls(memory, index=index)

    patch = dots_collide() if broken == "dots" else contextlib.nullcontext()
    try:
        with patch, pytest.raises(AssertionError) as caught:
            await run_differential(
                fresh, index=index, max_examples=300, shrink=False, derandomize=True
            )
    finally:
        for memory in opened:
            await memory.close()
    assert any(f"[{c}" in str(caught.value) for c in clauses), str(caught.value)[:3000]

"""The differential suite and its edge clauses fail on the bugs they are for:
each broken store below (one deliberate bug) must fail with the named clause."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest
from langgraph.store.base import ListNamespacesOp, Op, Result, SearchOp

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings
from agent_memory.contract_tests.langgraph import (
    check_concurrent_writers,
    check_distance_types,
    check_embedder_dimensions,
    check_non_finite_filters,
    differential_index,
    run_differential,
)
from agent_memory.domain.langgraph_layout import bounded_name
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
    async def _holds_items(self, namespace: tuple[str, ...], store: Any = None) -> bool:
        return True


@contextlib.contextmanager
def dots_collide() -> Iterator[None]:
    """Namespaces joined with '.': ('a.b',) and ('a', 'b') become one."""
    original = store_module.owner_of, store_module.record_namespace_of, store_module._item_id

    def owner(namespace: tuple[str, ...]) -> str:
        return "lg-all"

    def joined(namespace: tuple[str, ...]) -> str:  # hashed when too long, as the layout does
        return bounded_name("lg:" + ".".join(namespace))

    def item_id(namespace: tuple[str, ...], key: str) -> str:
        return "lg:" + hashlib.sha256((".".join(namespace) + "/" + key).encode()).hexdigest()

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
        # the collision shows in any read spanning both namespaces, a batch's
        # search included; which read meets it first varies from run to run
        ("dots", ("LG-GET", "LG-SEARCH-1", "LG-NS-1", "LG-CANARY", "LG-BATCH-1")),
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


# -- the edge clauses fail on the bugs they are for ------------------------------------
class ReadThenWrite(AgentMemoryStore):
    """A put that reads the item, then adds or updates it (a concurrent delete
    or put in between makes it raise `NotFound` or `DuplicateRecord`), with
    the writes of one item not serialised."""

    @contextlib.asynccontextmanager
    async def _item_lock(self, item_id: str) -> AsyncIterator[None]:
        yield

    async def _upsert(self, record: Any, *, keep_created: bool) -> None:
        old = await self._store.get(record.owner, record.id)
        await asyncio.sleep(0)  # a concurrent call runs here, as on any real backend
        if old is None:
            await self._store.add([record])
        else:
            await self._store.update(record)


class FiniteFilters(AgentMemoryStore):
    async def _search(self, op: SearchOp) -> Any:
        json.dumps(op.filter, allow_nan=False)
        return await super()._search(op)


class IgnoresDistance(AgentMemoryStore):
    def __init__(self, memory: Any, *, index: Any = None) -> None:
        index = {k: v for k, v in (index or {}).items() if k != "distance_type"} or None
        super().__init__(memory, index=index)


async def fresh_memory(dimension: int = DIMENSION) -> Any:
    return await agent_memory.connect(
        f"memory://catch-{uuid.uuid4().hex}",
        embedder=HashingEmbedder(dimension),
        settings=Settings(),
    )


async def test_the_concurrency_clause_catches_a_read_then_write_put() -> None:
    memory = await fresh_memory()
    try:
        with pytest.raises(AssertionError, match=r"\[LG-CONC-1\]"):
            await check_concurrent_writers(ReadThenWrite(memory, index={"fields": ["text"]}))
    finally:
        await memory.close()


async def test_the_filter_clause_catches_refused_non_finite_values() -> None:
    memory = await fresh_memory()
    try:
        with pytest.raises(AssertionError, match=r"\[LG-FILTER-2\]"):
            await check_non_finite_filters(FiniteFilters(memory))
    finally:
        await memory.close()


async def test_the_distance_clause_catches_an_ignored_distance_type() -> None:
    memory = await fresh_memory()
    try:

        async def factory(index: Any) -> Any:
            return IgnoresDistance(memory, index=index)

        with pytest.raises(AssertionError, match=r"\[LG-DIST-1\]"):
            await check_distance_types(factory, DIMENSION)
    finally:
        await memory.close()


async def test_the_dimension_clause_catches_a_refused_embedder() -> None:
    memory = await fresh_memory()  # the memory's own 32 dimensions only
    try:

        async def factory(index: Any) -> Any:
            return AgentMemoryStore(memory, index=index)

        with pytest.raises(AssertionError, match=r"\[LG-DIMS-1\]"):
            await check_embedder_dimensions(factory)
    finally:
        await memory.close()

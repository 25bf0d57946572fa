"""Canaries: the differential suite (agent_memory.contract_tests.langgraph) run
on LangGraph's own stores, in `strict_order=False` mode (they leave the order
of equal scores open, as LangGraph does): `InMemoryStore` against itself (a
second `ReferenceStore`: InMemoryStore normalised where the suite states its
own rule; the raw store's deviations are pinned in
test_langgraph_reference_notes.py), and
`AsyncSqliteStore` and `AsyncPostgresStore` (the PostgreSQL one in a database
of its own on the session server). A store of LangGraph's that differs from
`InMemoryStore` where the suite compares them has the difference pinned below
(`test_known_difference`) and named in the run's `unsupported`: when LangGraph
fixes one, its pinned test fails and the name comes off the list. The SQLite
store's vector search needs the sqlite-vec extension, which this interpreter's
sqlite3 cannot load (`enable_load_extension` missing): that case is skipped
with the reason.

Each case runs a small share of the loaded hypothesis profile (ci: 5 examples,
a few seconds); `langgraph-deep` runs 500. Each prints what it ran."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import pytest
from langgraph.store.base import (
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from agent_memory.contract_tests.langgraph import (
    ReferenceStore,
    differential_index,
    run_differential,
)

from .conftest import DIMENSION, profile_examples

SHARE = 0.05
UNSUPPORTED_BY = {
    "memory": ("unscored-offsets",),  # pinned in test_langgraph_reference_notes.py
    "sqlite": ("dotted-labels", "nested-filters"),
    "postgres": (
        "dotted-labels",
        "nested-filters",
        "unscored-hits",
        "query-offsets",
        "whole-value-index",
        "stale-vectors",
        "negative-zero",
        "text-orderings",
    ),
}  # each pinned below


@contextlib.asynccontextmanager
async def postgres_database(postgres_url: str) -> AsyncIterator[str]:
    """A fresh database on the session server (dropped after): its conninfo."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"lg_canary_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        # Exact vector search: no index scans (the HNSW index is approximate and
        # misses items once deleted rows outnumber its candidates, 40 by default,
        # even 1000; the exact "flat" kind fails setup() in 3.2.0).
        yield make_conninfo(postgres_url, dbname=name, options="-c enable_indexscan=off")
    finally:
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def open_langgraph_store(
    kind: str, index: IndexConfig | None, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    """An EMPTY LangGraph store of `kind` (memory, sqlite, postgres), set up."""
    if kind == "memory":
        yield ReferenceStore(index=index)
    elif kind == "sqlite":
        from langgraph.store.sqlite.aio import AsyncSqliteStore

        async with AsyncSqliteStore.from_conn_string(":memory:", index=index) as store:
            await store.setup()
            yield store
    else:
        from langgraph.store.postgres.aio import AsyncPostgresStore

        url = str(request.getfixturevalue("postgres_url"))
        async with (
            postgres_database(url) as conninfo,
            AsyncPostgresStore.from_conn_string(conninfo, index=index) as store,  # type: ignore[arg-type]
        ):
            await store.setup()
            yield store


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_langgraph_store_agrees_with_in_memory_store(
    request: pytest.FixtureRequest, kind: str, indexed: bool
) -> None:
    if kind == "sqlite" and indexed and not hasattr(sqlite3.Connection, "enable_load_extension"):
        pytest.skip("SqliteStore's index loads sqlite-vec: this sqlite3 cannot load extensions")
    index = differential_index(DIMENSION) if indexed else None
    async with open_langgraph_store(kind, index, request) as store:
        ran = await run_differential(
            store,
            index=index,
            max_examples=profile_examples(SHARE),
            strict_order=False,
            unsupported=UNSUPPORTED_BY.get(kind, ()),
        )
    print(f"{kind} {'index' if indexed else 'no-index'}: {ran}")


class SkipsOffset(ReferenceStore):
    """A planted bug: search ignores `offset`."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = [op._replace(offset=0) if isinstance(op, SearchOp) else op for op in ops]
        return super().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


class TiesBackwards(ReferenceStore):
    """Equal scores in reverse insertion order: an order LangGraph leaves open."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results = super().batch(
            [op._replace(limit=10_000, offset=0) if isinstance(op, SearchOp) else op for op in ops]
        )
        out: list[Result] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, SearchOp) and op.query:
                hits = list(reversed(cast(list[SearchItem], result)))
                hits.sort(key=lambda h: (h.score is None, -(h.score or 0.0)))
                result = hits[op.offset : op.offset + op.limit]
            elif isinstance(op, SearchOp):
                result = result[op.offset : op.offset + op.limit]  # type: ignore[index]
            out.append(result)
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


async def test_a_canary_can_fail() -> None:
    """strict_order=False still catches a real difference (a planted bug)."""
    index = differential_index(DIMENSION)
    with pytest.raises(AssertionError) as caught:
        await run_differential(
            lambda: _fresh(SkipsOffset, index),
            index=index,
            max_examples=300,
            strict_order=False,
            shrink=False,
            derandomize=True,
        )
    assert "[LG-PAGE-1" in str(caught.value) or "[LG-SEARCH-2" in str(caught.value), str(
        caught.value
    )[:3000]


async def test_strict_order_is_what_the_canary_mode_relaxes() -> None:
    """Reversed ties pass with strict_order=False and fail strict (LG-RANK-4).

    The strict run stops at its first failure, which these sequences reach after
    about 50 examples; it may run 400, so the check does not rest on a margin of a
    few examples (one deep-profile run got through 100 without a visible tie)."""
    index = differential_index(DIMENSION)
    kwargs: Any = {"index": index, "shrink": False, "derandomize": True}
    await run_differential(
        lambda: _fresh(TiesBackwards, index), strict_order=False, max_examples=100, **kwargs
    )
    with pytest.raises(AssertionError) as caught:
        await run_differential(lambda: _fresh(TiesBackwards, index), max_examples=400, **kwargs)
    assert "[LG-RANK-4" in str(caught.value), str(caught.value)[:3000]


async def _fresh(cls: type[ReferenceStore], index: IndexConfig) -> ReferenceStore:
    return cls(index=index)


async def _known_difference(name: str, store: Any) -> None:
    """Asserts that `store` shows the known difference `name` (see
    agent_memory.contract_tests.langgraph); InMemoryStore's side is pinned
    beside it, so the test fails when either side changes."""
    memory = ReferenceStore(index=store.index_config and differential_index(DIMENSION))
    coffee = {"text": "coffee", "meta": {"tag": "x"}}
    if name == "dotted-labels":
        op = PutOp(("a.b",), "k", coffee)
        assert await memory.abatch([op]) == [None]
        with pytest.raises(InvalidNamespaceError, match="periods"):
            await store.abatch([op])
        return
    if name == "nested-filters":
        ops: list[Op] = [PutOp(("a",), "k", coffee)]
        await memory.abatch(ops)
        await store.abatch(ops)
        search = SearchOp(("a",), {"meta": {"tag": "x"}}, 10, 0, None)
        assert len((await memory.abatch([search]))[0]) == 1  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="Unsupported operator: tag"):
            await store.abatch([search])
        return
    if name == "negative-zero":
        ops = [PutOp(("a",), "k", {"f": -0.0})]
        await memory.abatch(ops)
        await store.abatch(ops)
        got_item = (await store.abatch([GetOp(("a",), "k")]))[0]
        want_item = (await memory.abatch([GetOp(("a",), "k")]))[0]
        assert str(cast(Item, want_item).value["f"]) == "-0.0"
        assert str(cast(Item, got_item).value["f"]) == "0.0"
        return
    if name == "text-orderings":  # -3 >= -1 as text ('-3' >= '-1'), not as numbers
        ops = [PutOp(("a",), "k", {"n": -3})]
        await memory.abatch(ops)
        await store.abatch(ops)
        search = SearchOp(("a",), {"n": {"$gte": -1}}, 10, 0, None)
        assert (await memory.abatch([search]))[0] == []
        assert [h.key for h in cast(list[SearchItem], (await store.abatch([search]))[0])] == ["k"]
        return
    if name == "stale-vectors":  # "tea" then "coffee" (index=False): the tea vector stays
        for put in (PutOp(("a",), "k", {"text": "tea"}), PutOp(("a",), "k", coffee, index=False)):
            await memory.abatch([put])
            await store.abatch([put])
        search = SearchOp(("a",), None, 10, 0, "tea")
        got = cast(list[SearchItem], (await store.abatch([search]))[0])
        assert [(h.key, h.value["text"]) for h in got] == [("k", "coffee")], got
        assert math.isclose(cast(float, got[0].score), 1.0, abs_tol=1e-6), got
        assert cast(list[SearchItem], (await memory.abatch([search]))[0])[0].score is None
        return
    if name == "unscored-hits":
        ops = [PutOp(("a",), "v", coffee), PutOp(("a",), "n", coffee, index=False)]
    elif name == "whole-value-index":
        ops = [PutOp(("a",), "v", coffee), PutOp(("a",), "n", {"x": "coffee"}, index=["$"])]
    else:  # query-offsets: 4 items; the page at offset 3 holds one
        ops = [PutOp(("a",), f"k{i}", {"text": "coffee " * i}) for i in range(1, 5)]
    await memory.abatch(ops)
    await store.abatch(ops)
    offset = 3 if name == "query-offsets" else 0
    search = SearchOp(("a",), None, 10 if offset == 0 else 1, offset, "coffee")
    want = cast(list[SearchItem], (await memory.abatch([search]))[0])
    got = cast(list[SearchItem], (await store.abatch([search]))[0])
    if name == "query-offsets":
        assert (len(want), len(got)) == (1, 0), (want, got)
    else:  # the item without a vector: InMemoryStore lists it (unscored), the store does not
        assert sorted(h.key for h in want) == ["n", "v"], want
        assert [h.key for h in got] == ["v"], got


@pytest.mark.parametrize(
    ("kind", "name"),
    [(kind, name) for kind, names in UNSUPPORTED_BY.items() if kind != "memory" for name in names],
)
async def test_known_difference(request: pytest.FixtureRequest, kind: str, name: str) -> None:
    index = differential_index(DIMENSION) if kind == "postgres" else None
    async with open_langgraph_store(kind, index, request) as store:
        await _known_difference(name, store)


def test_unknown_difference_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown \\['ties'\\]"):
        asyncio.run(
            run_differential(ReferenceStore(), index=None, max_examples=1, unsupported=["ties"])
        )

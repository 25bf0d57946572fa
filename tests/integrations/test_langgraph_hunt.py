"""AgentMemoryStore at the edges the differential suite does not draw: values a
backend refuses (a batch must fail before it writes anything), labels too long
for a store's ids, and writers of one item interleaved deterministically (a
gate pauses one write at a chosen record while another runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.langgraph_layout import VECTOR_KIND
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.validation import MAX_ID_BYTES
from agent_memory.langgraph import AgentMemoryStore

NS = ("alice", "notes")
FIELDS: Any = {"fields": ["text"]}


# -- values a backend refuses fail the batch before any write ---------------------


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize(
    "bad",
    [{"text": "\ud800"}, {"\udfff": 1}, {"nested": [{"x": "a\udc00b"}]}],
    ids=["value", "key", "nested"],
)
async def test_a_lone_surrogate_in_a_value_fails_the_batch_before_any_write(
    open_memory, backend: str, bad: dict[str, Any]
) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        store = AgentMemoryStore(memory, index=FIELDS)
        await store.aput(NS, "kept", {"text": "dark roast coffee"})
        with pytest.raises(InvalidInput):
            await store.abatch([PutOp(NS, "first", {"text": "tea"}), PutOp(NS, "bad", bad)])
        assert await store.aget(NS, "first") is None  # nothing of the batch written
        # a refused re-put of an indexed item leaves it (and its vectors) as they were
        with pytest.raises(InvalidInput):
            await store.aput(NS, "kept", {"other": "\ud800"})
        hits = await store.asearch(NS, query="dark roast coffee")
        assert [(h.key, h.value) for h in hits] == [("kept", {"text": "dark roast coffee"})]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)


# -- labels of any length ---------------------------------------------------------

_LONG = [
    ("x" * (MAX_ID_BYTES - 5), "m"),  # fits as an owner, not as its registry shard
    ("é" * MAX_ID_BYTES, "m"),  # too long as an owner (2 bytes a letter)
    ("langgraph" + "z" * MAX_ID_BYTES, "m"),  # escaped owner, too long
    ("a", "b" * MAX_ID_BYTES),  # too long as a record namespace
    ("a", "b" * MAX_ID_BYTES, "c"),
    ("x" * (MAX_ID_BYTES - 5),),
]


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_labels_too_long_for_a_store_id_work_as_in_memory_store(
    open_memory, backend: str
) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        store = AgentMemoryStore(memory, index=FIELDS)
        reference = InMemoryStore()
        for target in (store, reference):
            # in one batch with a short namespace: all or nothing
            await target.abatch(
                [PutOp(ns, "k", {"text": f"coffee {i}"}) for i, ns in enumerate(_LONG)]
                + [PutOp(NS, "k", {"text": "tea"})]
            )
        for ns in [*_LONG, NS]:
            got, want = await store.aget(ns, "k"), await reference.aget(ns, "k")
            assert got is not None
            assert want is not None
            assert (got.namespace, got.value) == (want.namespace, want.value)
            for prefix in (ns[:1], ns):
                got_keys = sorted((h.namespace, h.key) for h in await store.asearch(prefix))
                want_keys = sorted((h.namespace, h.key) for h in await reference.asearch(prefix))
                assert got_keys == want_keys
        assert await store.alist_namespaces(limit=100) == sorted(
            await reference.alist_namespaces(limit=100)
        )
        hits = await store.asearch(_LONG[3][:1], query="coffee 3")
        assert (hits[0].key, tuple(hits[0].namespace)) == ("k", _LONG[3])
        for ns in _LONG:
            await store.adelete(ns, "k")
        assert await store.alist_namespaces(limit=100) == [NS]


async def test_forget_reaches_the_namespaces_of_a_user_id_near_the_id_bound(
    open_memory,
) -> None:  # type: ignore[no-untyped-def]
    user = "u" * (MAX_ID_BYTES - 2)  # a valid user id; its registry shard is longer
    async with open_memory("memory") as memory:
        store = AgentMemoryStore(memory)
        await store.aput((user, "memories"), "k", {"text": "coffee"})
        assert await store.alist_namespaces(prefix=(user,)) == [(user, "memories")]
        receipt = await memory.users.forget(user)
        # (a user id this long also fails the forget's cache step: not the store's)
        assert [f for f in receipt.failures if f.startswith("langgraph")] == []
        assert await store.aget((user, "memories"), "k") is None
        assert await store.alist_namespaces(limit=100) == []


# -- writers of one item, interleaved ------------------------------------------------


class _Gate:
    """A MemoryStore proxy that pauses the first `add` of a vector record
    holding `text` until `release` is set (`reached` is set when it pauses)."""

    def __init__(self, inner: Any, text: str) -> None:
        self._inner, self._text = inner, text
        self.reached, self.release = asyncio.Event(), asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def add(self, records: Sequence[MemoryRecord]) -> Any:
        if not self.reached.is_set() and any(
            r.kind == VECTOR_KIND and r.content == self._text for r in records
        ):
            self.reached.set()
            await self.release.wait()
        return await self._inner.add(records)


async def _interleave(
    gate: _Gate, paused: Awaitable[Any], other: Callable[[], Awaitable[Any]]
) -> None:
    """Run `paused` until the gate holds it, then give `other` every chance to
    finish (the memory backend never suspends on I/O, so a bounded number of
    loop turns is deterministic), then release the gate and finish both."""
    first = asyncio.ensure_future(paused)
    await gate.reached.wait()
    second = asyncio.ensure_future(other())
    for _ in range(200):
        if second.done():
            break
        await asyncio.sleep(0)
    gate.release.set()
    await asyncio.gather(first, second)


async def _cosine(memory: Any, a: str, b: str) -> float:
    rows = np.asarray(await memory.embedder.embed([a, b]), dtype=np.float64)
    return float(rows[0] @ rows[1] / (np.linalg.norm(rows[0]) * np.linalg.norm(rows[1])))


async def _assert_scores_match_values(memory: Any, store: AgentMemoryStore, query: str) -> None:
    """Each hit appears once and is scored by the text its value holds."""
    hits = await store.asearch(NS, query=query, limit=50)
    keys = [h.key for h in hits]
    assert len(keys) == len(set(keys)), f"an item listed twice: {keys}"
    for hit in hits:
        text = hit.value.get("text")
        if hit.score is None:
            continue
        assert isinstance(text, str), hit
        want = await _cosine(memory, query, text)
        assert hit.score == pytest.approx(want, abs=1e-4), (hit.key, hit.value, hit.score)


async def test_two_puts_of_one_item_never_mix_value_and_vectors(open_memory) -> None:  # type: ignore[no-untyped-def]
    async with open_memory("memory") as memory:
        store = AgentMemoryStore(memory, index=FIELDS)
        gate = _Gate(memory.store, "dark roast coffee")
        store._store = gate
        await _interleave(
            gate,
            store.aput(NS, "k", {"text": "dark roast coffee"}),
            lambda: store.aput(NS, "k", {"text": "green tea"}),
        )
        item = await store.aget(NS, "k")
        assert item is not None
        for query in ("dark roast coffee", "green tea"):
            await _assert_scores_match_values(memory, store, query)


async def test_a_delete_racing_a_put_leaves_no_vector_behind(open_memory) -> None:  # type: ignore[no-untyped-def]
    async with open_memory("memory") as memory:
        store = AgentMemoryStore(memory, index=FIELDS)
        gate = _Gate(memory.store, "dark roast coffee")
        store._store = gate
        await _interleave(
            gate,
            store.aput(NS, "k", {"text": "dark roast coffee"}),
            lambda: store.adelete(NS, "k"),
        )
        # whichever write won, a later put decides what the item is indexed by
        await store.aput(NS, "k", {"text": "green tea"}, index=False)
        await store.aput(NS, "other", {"text": "milk"})
        await _assert_scores_match_values(memory, store, "dark roast coffee")
        hits = await store.asearch(NS, query="dark roast coffee", limit=50)
        assert sorted((h.key, h.score is None) for h in hits) == [("k", True), ("other", False)]


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgres"])
async def test_parallel_writers_of_one_item_leave_it_consistent(open_memory, backend: str) -> None:  # type: ignore[no-untyped-def]
    """Tasks and threads (the async and the sync API) put and delete one item
    with different texts at once; afterwards a get and a query search agree
    (one hit at most, scored by the text the value holds), and a last
    acknowledged put is what a get returns."""
    async with open_memory(backend) as memory:
        store = AgentMemoryStore(memory, index=FIELDS)
        texts = ["dark roast coffee", "green tea", "milk", "espresso shot"]

        def sync_writer(worker: int) -> None:
            for n in range(6):
                if n % 3 == 2:
                    store.delete(NS, "k")
                else:
                    store.put(NS, "k", {"text": texts[(worker + n) % len(texts)]})

        async def async_writer(worker: int) -> None:
            for n in range(6):
                ops: list[Any] = [PutOp(NS, "k", {"text": texts[(worker + n) % len(texts)]})]
                if n % 3 == 1:
                    ops.insert(0, PutOp(NS, "k", None))
                    ops.append(GetOp(NS, "k"))
                await store.abatch(ops)

        await asyncio.gather(
            *(asyncio.to_thread(sync_writer, w) for w in range(2)),
            *(async_writer(w) for w in range(2, 4)),
        )
        for query in texts:
            await _assert_scores_match_values(memory, store, query)
        await store.aput(NS, "k", {"text": "milk"})
        item = await store.aget(NS, "k")
        assert item is not None
        assert item.value == {"text": "milk"}
        hits = await store.abatch([SearchOp(NS, None, 10, 0, "milk")])
        assert [(h.key, round(h.score or 0, 4)) for h in hits[0]] == [("k", 1.0)]

"""Property: on random data the Qdrant store answers exactly like the in-process
oracle (search order, scores, ties, min_score, filters, list pages, keyword search)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from qdrant_client import AsyncQdrantClient

from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.domain.records import MemoryRecord
from qdrant.support import SPACE, rec

# Few distinct directions and timestamps, so that ties are common.
_DIRECTIONS = np.array(
    [[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0], [0] * 8]
    + [[(i * 7 + j * 3) % 5 - 2 for j in range(8)] for i in range(4)],
    dtype=np.float32,
)

_records = st.lists(
    st.tuples(
        st.sampled_from(["alice", "bob"]),
        st.text(alphabet="abcxyz:*|", min_size=1, max_size=3),
        st.integers(0, len(_DIRECTIONS) - 1),
        st.sampled_from([0.5, 1.0, 4.0]),  # powers of two: exact ties stay exact
        st.sampled_from(["n1", "n2"]),
        st.sampled_from(["k1", "k2"]),
        st.integers(0, 3),
    ),
    max_size=30,
    unique_by=lambda t: (t[0], t[1]),
)


def _build(rows: list[tuple[str, str, int, float, str, str, int]]) -> list[MemoryRecord]:
    return [
        rec(rid, owner, vector=_DIRECTIONS[d] * scale, namespace=ns, kind=kind, seconds=sec)
        for owner, rid, d, scale, ns, kind, sec in rows
    ]


async def _compare(
    records: list[MemoryRecord],
    query: int,
    limit: int,
    namespace: str | None,
    kinds: list[str] | None,
    min_score: float | None,
) -> None:
    oracle = InMemoryMemoryStore(SPACE)
    store = QdrantMemoryStore(AsyncQdrantClient(location=":memory:"), SPACE, owns_client=True)
    try:
        await oracle.add(records)
        await store.add(records)
        q = _DIRECTIONS[query] + np.float32(0.25)
        for owner in ("alice", "bob"):
            kwargs = {"limit": limit, "namespace": namespace, "kinds": kinds}
            if min_score is not None:
                # A cosine exactly at min_score (0.5 here is reachable) falls on
                # either side by float rounding: only decidable cases are compared.
                every = await oracle.search(owner, q, limit=1000, namespace=namespace, kinds=kinds)
                assume(all(abs(h.score - min_score) > 1e-5 for h in every))
            want = await oracle.search(owner, q, min_score=min_score, **kwargs)  # type: ignore[arg-type]
            got = await store.search(owner, q, min_score=min_score, **kwargs)  # type: ignore[arg-type]
            # Scores agree to float32 rounding (a matrix product of another shape
            # may differ in the last bit); order and ids must agree exactly.
            assert [h.record for h in got] == [h.record for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
            cursor_o = cursor_s = None
            while True:
                page_o = await oracle.list(
                    owner, namespace=namespace, kinds=kinds, limit=limit, cursor=cursor_o
                )
                page_s = await store.list(
                    owner, namespace=namespace, kinds=kinds, limit=limit, cursor=cursor_s
                )
                assert page_s.records == page_o.records
                assert (page_s.next_cursor is None) == (page_o.next_cursor is None)
                if page_o.next_cursor is None:
                    break
                cursor_o, cursor_s = page_o.next_cursor, page_s.next_cursor
    finally:
        await store.close()


@given(
    rows=_records,
    query=st.integers(0, len(_DIRECTIONS) - 1),
    limit=st.integers(1, 6),
    namespace=st.sampled_from([None, "n1"]),
    kinds=st.sampled_from([None, ["k1"], ["k1", "k2"]]),
    min_score=st.sampled_from([None, -1.0, 0.0, 0.5]),
)
def test_store_agrees_with_oracle(
    rows: list[tuple[str, str, int, float, str, str, int]],
    query: int,
    limit: int,
    namespace: str | None,
    kinds: list[str] | None,
    min_score: float | None,
) -> None:
    asyncio.run(_compare(_build(rows), query, limit, namespace, kinds, min_score))


# Inflected forms, stopwords and case, so that stemming and stopword removal decide
# which records match (Qdrant's own `word` tokens would not).
_WORDS = ["paint", "painted", "Paints", "painting", "hike", "hiking", "the", "a", "lake", "Lakes"]
_texts = st.lists(st.sampled_from(_WORDS), max_size=6).map(" ".join)
_keyword_records = st.lists(
    st.tuples(
        st.sampled_from(["alice", "bob"]),
        st.text(alphabet="abcxyz", min_size=1, max_size=3),
        _texts,
        _texts,
        st.sampled_from(["n1", "n2"]),
        st.sampled_from(["k1", "k2"]),
    ),
    max_size=20,
    unique_by=lambda t: (t[0], t[1]),
)


async def _compare_keyword(
    records: list[MemoryRecord],
    query: str,
    limit: int,
    namespace: str | None,
    kinds: list[str] | None,
) -> None:
    oracle = InMemoryMemoryStore(SPACE)
    store = QdrantMemoryStore(AsyncQdrantClient(location=":memory:"), SPACE, owns_client=True)
    try:
        await oracle.add(records)
        await store.add(records)
        for owner in ("alice", "bob"):
            kwargs = {"limit": limit, "namespace": namespace, "kinds": kinds}
            want = await oracle.search_text(owner, query, **kwargs)  # type: ignore[arg-type]
            got = await store.search_text(owner, query, **kwargs)  # type: ignore[arg-type]
            # The same terms, counts and statistics through the same formula: equal
            # ids, order and scores, to the bit.
            assert [(h.record, h.score) for h in got] == [(h.record, h.score) for h in want]
    finally:
        await store.close()


@given(
    rows=_keyword_records,
    query=_texts,
    limit=st.integers(1, 6),
    namespace=st.sampled_from([None, "n1"]),
    kinds=st.sampled_from([None, ["k1"]]),
)
def test_keyword_search_agrees_with_oracle(
    rows: list[tuple[str, str, str, str, str, str]],
    query: str,
    limit: int,
    namespace: str | None,
    kinds: list[str] | None,
) -> None:
    records = [
        rec(rid, owner, content=content or "empty", context=context, namespace=ns, kind=kind)
        for owner, rid, content, context, ns, kind in rows
    ]
    asyncio.run(_compare_keyword(records, query, limit, namespace, kinds))

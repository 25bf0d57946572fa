"""Focused MemoryStore tests on a real server (the contract suite covers the rest)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis_helpers import SPACE, make_record

from agent_memory.adapters.redis import RedisMemoryStore, connect
from agent_memory.domain.errors import (
    DimensionMismatch,
    DuplicateRecord,
    InvalidInput,
    NotFound,
    ScopeRequired,
)
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.domain.validation import as_vector, require_vector_norm

NASTY = ["a}b", "*", "@owner:{x}", "-1", "x|y", "ünï cödé", "a,b", "A", "a", "{a}", "a b", "\\"]


async def test_roundtrip_get_update_delete(store: RedisMemoryStore) -> None:
    r = make_record("r1", content="hello", context="ctx")
    await store.add([r])
    assert await store.get("alice", "r1") == r
    assert await store.get("bob", "r1") is None
    r2 = make_record("r1", content="changed")
    await store.update(r2)
    assert (await store.get("alice", "r1")) == r2
    with pytest.raises(NotFound):
        await store.update(make_record("missing"))
    assert await store.delete("alice", "r1") is True
    assert await store.delete("alice", "r1") is False


async def test_duplicates_rejected_atomically(store: RedisMemoryStore) -> None:
    await store.add([make_record("a")])
    with pytest.raises(DuplicateRecord) as err:
        await store.add([make_record("b"), make_record("a")])
    assert err.value.ids == ("a",)
    assert await store.get("alice", "b") is None
    with pytest.raises(DuplicateRecord):
        await store.add([make_record("c"), make_record("c")])
    assert await store.get("alice", "c") is None


async def test_concurrent_duplicate_add_exactly_one_wins(store: RedisMemoryStore) -> None:
    import asyncio

    results = await asyncio.gather(
        *(store.add([make_record("same")]) for _ in range(5)), return_exceptions=True
    )
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, DuplicateRecord) for r in results if r is not None)


async def test_nasty_scopes_never_collide_or_widen(store: RedisMemoryStore) -> None:
    recs = [make_record(f"id-{o}", owner=o, namespace=o, kind=o) for o in NASTY]
    recs += [make_record(o, owner="shared") for o in NASTY]
    await store.add(recs)
    q = np.ones(8, dtype=np.float32)
    for o in NASTY:
        hits = await store.search(o, q, limit=50)
        assert [h.record.owner for h in hits] == [o], o
        page = await store.list(o, namespace=o, kinds=[o])
        assert [r.id for r in page.records] == [f"id-{o}"]
        assert await store.get(o, f"id-{o}") is not None
    shared = await store.list("shared", limit=100)
    assert sorted(r.id for r in shared.records) == sorted(NASTY)
    assert await store.delete_scope("a", namespace="a") == 1
    assert await store.get("a,b", "id-a,b") is not None
    assert await store.get("A", "id-A") is not None


async def test_search_scores_order_and_ties(store: RedisMemoryStore) -> None:
    same = np.array([1, 0, 0, 0, 0, 0, 0, 0], dtype=np.float32)
    recs = [make_record(f"t{i}", vector=same) for i in (5, 3, 9, 1)]
    recs.append(make_record("opp", vector=-same))
    recs.append(make_record("zero", vector=np.zeros(8)))
    recs.append(make_record("half", vector=[1, 1, 0, 0, 0, 0, 0, 0]))
    await store.add(recs)
    hits = await store.search("alice", same, limit=2)
    assert [h.record.id for h in hits] == ["t1", "t3"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-6)
    hits = await store.search("alice", same, limit=10)
    assert [h.record.id for h in hits] == ["t1", "t3", "t5", "t9", "half", "zero", "opp"]
    assert hits[4].score == pytest.approx(2**-0.5, abs=1e-6)
    assert hits[5].score == 0.0
    assert hits[6].score == pytest.approx(-1.0, abs=1e-6)
    hits = await store.search("alice", same, limit=10, min_score=0.5)
    assert len(hits) == 5
    zero_q = await store.search("alice", np.zeros(8, dtype=np.float32), limit=3)
    assert [(h.record.id, h.score) for h in zero_q] == [("half", 0.0), ("opp", 0.0), ("t1", 0.0)]
    assert await store.search("alice", same, kinds=[]) == []
    with pytest.raises(DimensionMismatch):
        await store.search("alice", np.ones(3, dtype=np.float32))
    with pytest.raises(ScopeRequired):
        await store.search("  ", same)


async def test_list_keyset_pagination_with_equal_timestamps(store: RedisMemoryStore) -> None:
    recs = [make_record(f"r{i:02d}", at=i // 4) for i in range(30)]
    await store.add(recs)
    expected = sorted(recs, key=lambda r: (r.created_at, r.id), reverse=True)
    got, cursor = [], None
    while True:
        page = await store.list("alice", limit=7, cursor=cursor)
        got += page.records
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [r.id for r in got] == [r.id for r in expected]


async def test_delete_scope_filters(store: RedisMemoryStore) -> None:
    recs = [make_record(f"a{i}", namespace="n1", kind="k1") for i in range(3)]
    recs += [make_record(f"b{i}", namespace="n2", kind="k2") for i in range(2)]
    await store.add(recs)
    assert await store.delete_scope("alice", kinds=[]) == 0
    assert await store.delete_scope("alice", namespace="n1", kinds=["k2"]) == 0
    assert await store.delete_scope("alice", kinds=["k2", "zz"]) == 2
    assert await store.delete_scope("alice") == 3
    assert (await store.list("alice")).records == ()


async def test_keyword_search(store: RedisMemoryStore) -> None:
    await store.add(
        [
            make_record("m1", content="The cat sat on the mat"),
            make_record("m2", content="dogs bark loudly", context="a cat was nearby"),
            make_record("m3", content="nothing relevant"),
            make_record("x1", owner="bob", content="cat cat cat"),
        ]
    )
    hits = await store.search_text("alice", "cat?")
    assert {h.record.id for h in hits} == {"m1", "m2"}
    assert all(h.score > 0 for h in hits)
    assert await store.search_text("alice", "@owner:{bob} | *") == []
    assert await store.search_text("alice", "cat", kinds=["other"]) == []
    await store.delete_scope("alice")
    assert await store.search_text("alice", "cat") == []


async def test_spaces_never_mix(open_store) -> None:  # type: ignore[no-untyped-def]
    a = open_store()
    other = EmbeddingSpace(model="other-model", dimension=8)
    b = open_store(other)
    try:
        await a.add([make_record("r1")])
        assert a.index_name != b.index_name
        assert SPACE.identity in a.index_name
        assert await b.get("alice", "r1") is None
        assert await b.search("alice", np.ones(8, dtype=np.float32)) == []
        await b.add([make_record("r1")])  # same id, other space: no duplicate
    finally:
        await a.drop_index()
        await b.drop_index()
        await a.close()
        await b.close()


async def test_closed_store_rejects(store: RedisMemoryStore) -> None:
    from agent_memory.domain.errors import StoreClosed

    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.get("alice", "x")


async def test_keyword_search_scores_every_matching_term(store: RedisMemoryStore) -> None:
    """Regression: a union nested under the owner filter scored only the first
    matching term of each record, so a record matching many rare terms lost to
    short records matching one common term."""
    long = "gina: long time, just launched an ad campaign for my clothing store " + "x " * 20
    recs = [make_record("long", content=long)]
    recs += [make_record(f"s{i}", content=f"gina: store {i}") for i in range(20)]
    await store.add(recs)
    hits = await store.search_text("alice", "When did Gina launch an ad campaign for her store?")
    assert hits[0].record.id == "long"


# -- the query vector's fast path (checked on its bytes) agrees with as_vector --

_SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -1.5, 3.4e38, -3.4e38, 1e-45, np.nan, np.inf, -np.inf])


def _outcome(check: Callable[[], object]) -> object:
    """What a check gives: its value, or the type and field of its typed error."""
    try:
        return check()
    except (InvalidInput, DimensionMismatch) as exc:
        return (type(exc), getattr(exc, "field", None))


def _reference(vector: object) -> tuple[bytes, bool]:
    query = as_vector(vector, "query vector")
    if query.shape[0] != SPACE.dimension:
        raise DimensionMismatch(SPACE.dimension, int(query.shape[0]))
    require_vector_norm(query, "query vector")
    return query.tobytes(), bool(query.any())


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(_SPECIAL, st.floats(width=32)), min_size=6, max_size=10))
def test_query_blob_agrees_with_as_vector(values: list[float]) -> None:
    store = RedisMemoryStore(connect("redis://127.0.0.1:1"), SPACE)  # never connects
    for vector in (
        np.array(values, dtype=np.float32),
        np.array(values, dtype=">f4"),  # non-native byte order: the validating path
        np.array(values, dtype=np.float32)[::-1],  # a strided view
    ):
        expected = _outcome(lambda: _reference(vector))  # noqa: B023
        assert _outcome(lambda: store._query_blob(vector)) == expected  # noqa: B023


async def test_search_query_vector_checks(store: RedisMemoryStore) -> None:
    e = np.eye(8, dtype=np.float32)[0]
    await store.add([make_record("p", vector=e), make_record("z", vector=np.zeros(8))])
    for bad in (np.nan, np.inf, -np.inf):
        q = e.copy()
        q[3] = bad
        with pytest.raises(InvalidInput) as err:
            await store.search("alice", q)
        assert err.value.field == "query vector"
    # finite, but of a norm float32 engines cannot square (require_vector_norm)
    huge = np.full(8, 3.4e38, dtype=np.float32)
    with pytest.raises(InvalidInput) as err:
        await store.search("alice", huge)
    assert err.value.field == "query vector"
    large = np.full(8, 1e14, dtype=np.float32)  # within the bound: scored by direction
    assert [h.record.id for h in await store.search("alice", large)] == ["p", "z"]
    minus_zero = np.full(8, -0.0, dtype=np.float32)  # a zero query: every score is 0
    hits = await store.search("alice", minus_zero)
    assert [(h.record.id, h.score) for h in hits] == [("p", 0.0), ("z", 0.0)]
    as_list = await store.search("alice", [1, 0, 0, 0, 0, 0, 0, 0], limit=1)
    assert [h.record.id for h in as_list] == ["p"]


async def test_zero_vectors_never_take_knn_slots(store: RedisMemoryStore) -> None:
    e = np.eye(8, dtype=np.float32)[0]
    recs = [make_record("p1", vector=e), make_record("n2", vector=-e)]
    recs += [make_record(f"z{i}", vector=np.zeros(8)) for i in range(6)]
    recs.append(make_record("n1", vector=[-1, 3**0.5, 0, 0, 0, 0, 0, 0]))
    await store.add(recs)
    for limit, want in [
        (1, ["p1"]),
        (3, ["p1", "z0", "z1"]),
        (9, ["p1", "z0", "z1", "z2", "z3", "z4", "z5", "n1", "n2"]),
    ]:
        hits = await store.search("alice", e, limit=limit)
        assert [h.record.id for h in hits] == want
    hits = await store.search("alice", e, limit=9)
    assert [h.score for h in hits][7:] == [pytest.approx(-0.5, abs=1e-6), pytest.approx(-1.0)]

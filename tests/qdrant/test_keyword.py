"""Keyword search: the points' `domain.lexical` terms (keyword index, `MatchAny`)
select candidates inside the query (owner and filters included); BM25 with
owner-scoped statistics ranks them."""

from __future__ import annotations

import math

import pytest

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.adapters.qdrant._lexical import bm25_scores, query_terms, record_terms
from agent_memory.domain.errors import InvalidInput, ScopeRequired
from agent_memory.ports.storage import KeywordSearch
from qdrant.support import rec


def test_terms_follow_the_domain_rules() -> None:
    """Stopwords dropped and stemmed, as every other backend: "painted" finds "paints"."""
    assert record_terms("She painted THE sunsets", "paints, x_y") == (
        ["paint", "sunset", "x", "y"],
        [2, 1, 1, 1],
        5,
    )
    assert query_terms("painting the paints") == ["paint"]


def test_bm25_formula() -> None:
    """One term in one of two docs: idf = ln(1 + 1.5/1.5), tf saturation by length."""
    scores = bm25_scores(["cat"], [({"cat": 1, "sat": 1}, 2)], total_docs=2, total_length=4)
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))
    assert scores == [pytest.approx(idf * 2.2 / (1 + 1.2))]


async def test_stemmed_and_stopword_queries(store: QdrantMemoryStore) -> None:
    """The candidates come from the stored terms: an inflected form matches and a
    stopword-only query finds nothing (Qdrant's word tokens found neither way)."""
    await store.add([rec("a", content="Caroline painted a sunrise"), rec("b", content="the end")])
    assert [h.record.id for h in await store.search_text("alice", "paintings")] == ["a"]
    assert await store.search_text("alice", "the") == []


async def test_ranks_by_bm25_and_isolates_owners(store: QdrantMemoryStore) -> None:
    assert isinstance(store, KeywordSearch)
    await store.add(
        [
            rec("a", content="the cat sat on the mat"),
            rec("b", content="a dog chased the cat and the cat ran"),
            rec("c", content="nothing relevant here"),
            rec("d", content="weather report", context="the cat next door"),
            rec("z", "bob", content="cat cat cat cat"),
        ]
    )
    hits = await store.search_text("alice", "Cat!", limit=10)
    ids = [h.record.id for h in hits]
    assert set(ids) == {"a", "b", "d"}
    assert ids[0] == "b"  # two occurrences
    assert all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert [h.record.id for h in await store.search_text("bob", "cat")] == ["z"]
    assert await store.search_text("carol", "cat") == []
    # the context is searched but not returned as content
    d = next(h.record for h in hits if h.record.id == "d")
    assert d.content == "weather report"
    assert d.context == "the cat next door"


async def test_other_owners_do_not_change_scores(store: QdrantMemoryStore) -> None:
    await store.add([rec("a", content="red apple"), rec("b", content="green apple pie")])
    before = await store.search_text("alice", "apple pie")
    await store.add([rec(f"x{i}", "bob", content="apple apple pie") for i in range(20)])
    after = await store.search_text("alice", "apple pie")
    assert [(h.record.id, h.score) for h in after] == [(h.record.id, h.score) for h in before]


async def test_ties_by_id_limit_and_filters(store: QdrantMemoryStore) -> None:
    await store.add(
        [rec(f"r{i}", content="cloudy words", namespace="n1", kind="k1") for i in (3, 1, 2)]
        + [rec("q", content="cloudy words", namespace="n2", kind="k2")]
    )
    assert [h.record.id for h in await store.search_text("alice", "words", limit=2)] == [
        "q",
        "r1",
    ]
    hits = await store.search_text("alice", "cloudy", namespace="n1")
    assert [h.record.id for h in hits] == ["r1", "r2", "r3"]
    assert [h.record.id for h in await store.search_text("alice", "cloudy", kinds=["k2"])] == ["q"]
    assert await store.search_text("alice", "cloudy", kinds=[]) == []
    assert await store.search_text("alice", "  ,, ") == []


async def test_delete_scope_leaves_nothing_findable(store: QdrantMemoryStore) -> None:
    await store.add([rec("a", content="secret plan"), rec("b", content="secret", namespace="x")])
    assert await store.delete_scope("alice", namespace="notes") == 1
    assert [h.record.id for h in await store.search_text("alice", "secret plan")] == ["b"]
    assert await store.delete_scope("alice") == 1
    assert await store.search_text("alice", "secret plan") == []


async def test_invalid_keyword_inputs(store: QdrantMemoryStore) -> None:
    with pytest.raises(ScopeRequired):
        await store.search_text(" ", "x")
    with pytest.raises(InvalidInput, match="query"):
        await store.search_text("alice", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="limit"):
        await store.search_text("alice", "x", limit=0)

"""Keyword search (BM25 over PostgreSQL full-text search), beyond the contract:
user text is never query syntax, rare terms weigh more, context weighs less."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.postgres import PostgresMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from postgres.conftest import OpenDatabase

SPACE = EmbeddingSpace(model="keyword-test", dimension=4)


def _rec(i: str, content: str, context: str = "", owner: str = "alice") -> MemoryRecord:
    at = datetime(2026, 2, 1, tzinfo=UTC) + timedelta(seconds=len(i))
    return MemoryRecord(
        id=i,
        owner=owner,
        namespace="turns",
        kind="turn",
        content=content,
        context=context,
        vector=np.ones(4, dtype=np.float32),
        created_at=at,
        updated_at=at,
    )


@pytest.fixture
async def store(open_database: OpenDatabase) -> AsyncIterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(await open_database(), SPACE, owns_database=True)
    await store.add(
        [
            _rec("t1", "Ingrid went to the chess club meeting"),
            _rec("t2", "Tomas painted a sunrise over the lake"),
            _rec("t3", "Ingrid researched adoption agencies", context="Tomas: how so?"),
            _rec("t4", "we talked about the weather", context="Ingrid: adoption is hard"),
            _rec("t5", "o'neil said \\ back-slash & pipes | (really) <-> :*"),
            _rec("x1", "adoption adoption adoption", owner="bob"),
        ]
    )
    yield store
    await store.close()


HOSTILE = [
    '"unbalanced quote',
    "a & | ! ( ) : * <-> '",
    "\\",
    "'''",
    "-adoption",
    "adoption OR or AND NOT",
    "🙂 émigré naïve",
    "the of and a",  # only stop words
    "x" * 3000,
    "!(ingrid & !tomas)",
    "adoption:*",
    "o'neil",
]


@pytest.mark.parametrize("query", HOSTILE)
async def test_query_syntax_never_errors(store: PostgresMemoryStore, query: str) -> None:
    """When this fails, user text reached to_tsquery as syntax."""
    hits = await store.search_text("alice", query, limit=10)
    assert all(h.record.owner == "alice" for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


async def test_stop_words_only_find_nothing(store: PostgresMemoryStore) -> None:
    assert await store.search_text("alice", "the of and a") == []


async def test_operators_are_plain_words(store: PostgresMemoryStore) -> None:
    """`-adoption` must not mean NOT adoption: the records about adoption come back."""
    ids = [h.record.id for h in await store.search_text("alice", "-adoption")]
    assert set(ids) == {"t3", "t4"}
    assert [h.record.id for h in await store.search_text("alice", "o'neil")] == ["t5"]


async def test_rare_terms_weigh_more(store: PostgresMemoryStore) -> None:
    """When this fails, scoring lost its IDF (BM25) or stemming."""
    hits = await store.search_text("alice", "adoption agencies")
    assert [h.record.id for h in hits] == ["t3", "t4"]  # t3 has both terms
    ids = [h.record.id for h in await store.search_text("alice", "ingrid")]
    assert set(ids) == {"t1", "t3", "t4"}  # content or context
    # Stemming: "researching" finds "researched".
    assert [h.record.id for h in await store.search_text("alice", "researching")] == ["t3"]


async def test_context_weight(open_database: OpenDatabase) -> None:
    """Content and context count alike by default (as on every backend); a
    context_weight below 1 ranks a content match first."""
    db = await open_database()
    equal = PostgresMemoryStore(db, SPACE)
    await equal.add(
        [
            _rec("in-context", "plain words", context="zebra"),
            _rec("in-content", "zebra words", context="plain"),
        ]
    )
    hits = await equal.search_text("alice", "zebra")
    assert [h.record.id for h in hits] == ["in-content", "in-context"]
    assert hits[0].score == pytest.approx(hits[1].score)
    weighted = PostgresMemoryStore(db, SPACE, context_weight=0.5)
    hits = await weighted.search_text("alice", "zebra")
    assert [h.record.id for h in hits] == ["in-content", "in-context"]
    assert hits[0].score > hits[1].score


async def test_ties_break_by_id(open_database: OpenDatabase) -> None:
    store = PostgresMemoryStore(await open_database(), SPACE, owns_database=True)
    await store.add([_rec(i, "identical words here") for i in ("b", "c", "a")])
    hits = await store.search_text("alice", "identical", limit=2)
    assert [h.record.id for h in hits] == ["a", "b"]
    assert hits[0].score == hits[1].score
    await store.close()


@settings(max_examples=40)
@given(query=st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00")))
async def test_any_text_is_a_valid_query(store: PostgresMemoryStore, query: str) -> None:
    """Property: no text raises; hits stay within the owner, best first."""
    hits = await store.search_text("alice", query, limit=5)
    assert len(hits) <= 5
    assert all(h.record.owner == "alice" for h in hits)
    keys = [(-h.score, h.record.id) for h in hits]
    assert keys == sorted(keys)

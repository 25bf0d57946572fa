"""The date factor on every backend, through the public store API: the same turn
said in January and in March; a question naming March (or "last month") must
put the March turn first, and without the factor the tie goes by id (January)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.retrieval import RetrievalConfig, RetrievalMode
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

EMBEDDER = HashingEmbedder(16)  # the space of `backend_store`
OWNER = "dates-owner"
JANUARY = datetime(2023, 1, 12, 10, 0, tzinfo=UTC)
MARCH = datetime(2023, 3, 9, 10, 0, tzinfo=UTC)
TURNS = [
    ConversationTurn("a-jan", "Sam", "I cooked a lentil curry for friends.", JANUARY, "1"),
    ConversationTurn("a-jan2", "Ria", "Sounds tasty, what spices?", JANUARY, "1"),
    ConversationTurn("b-mar", "Sam", "I cooked a lentil curry for friends.", MARCH, "2"),
    ConversationTurn("b-mar2", "Ria", "Sounds tasty, what spices?", MARCH, "2"),
]


async def _ids(store: MemoryStore, config: RetrievalConfig, query: str, asked: date) -> list[str]:
    retriever = HybridRetriever(store, EMBEDDER, config)
    await store.delete_scope(OWNER)
    await retriever.add_conversation(OWNER, TURNS)
    got = await retriever.retrieve(
        OWNER, query, limit=4, mode=RetrievalMode.LEXICAL, reference=asked
    )
    return [h.record.id for h in got.hits]


@pytest.mark.parametrize(
    "query", ["Which lentil curry in March 2023?", "Which lentil curry last month?"]
)
async def test_a_named_date_puts_the_turn_of_that_time_first(
    backend_store: MemoryStore, query: str
) -> None:
    asked = date(2023, 4, 20)
    dated = await _ids(backend_store, RetrievalConfig(), query, asked)
    assert dated[0] == "b-mar", dated
    # the same store and question without the date rules: the tie goes to January
    plain = RetrievalConfig(context_dates=False, date_weight=0.0)
    assert (await _ids(backend_store, plain, query, asked))[0] == "a-jan"


async def test_the_month_is_indexed_where_keyword_search_sees_it(
    backend_store: MemoryStore,
) -> None:
    """Keyword search alone (no date bonus) finds the month through the context."""
    ids = await _ids(
        backend_store, RetrievalConfig(date_weight=0.0), "lentil curry March", date(2024, 1, 1)
    )
    assert ids[0] == "b-mar", ids

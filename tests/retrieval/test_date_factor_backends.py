"""The date factor on every backend, through the public store API: the same turn
said in January and in March; a question naming March (or "last month") must
put the March turn first, and without the factor the tie goes by id (January)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.sqlite import SqliteMemoryStore
from agent_memory.domain.retrieval import RetrievalConfig, RetrievalMode
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

EMBEDDER = HashingEmbedder(16)
OWNER = "dates-owner"
JANUARY = datetime(2023, 1, 12, 10, 0, tzinfo=UTC)
MARCH = datetime(2023, 3, 9, 10, 0, tzinfo=UTC)
TURNS = [
    ConversationTurn("a-jan", "Sam", "I cooked a lentil curry for friends.", JANUARY, "1"),
    ConversationTurn("a-jan2", "Ria", "Sounds tasty, what spices?", JANUARY, "1"),
    ConversationTurn("b-mar", "Sam", "I cooked a lentil curry for friends.", MARCH, "2"),
    ConversationTurn("b-mar2", "Ria", "Sounds tasty, what spices?", MARCH, "2"),
]
BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    space = EMBEDDER.space
    name = request.param
    if name == "memory":
        handle: MemoryStore = InMemoryMemoryStore(space)
        yield handle
        await handle.close()
    elif name == "sqlite":
        handle = SqliteMemoryStore(tmp_path / "dates.db", space)
        yield handle
        await handle.close()
    elif name == "redis":
        from agent_memory.adapters.redis import RedisMemoryStore

        url = request.getfixturevalue("redis_url")
        deployment = "d" + uuid.uuid4().hex[:12]
        redis = RedisMemoryStore.from_url(url, space, deployment=deployment)
        yield redis
        await redis.drop_index()
        await redis.close()
    elif name == "postgres":
        from agent_memory.adapters.postgres import PostgresDatabase, PostgresMemoryStore

        url = request.getfixturevalue("postgres_url")
        db = PostgresDatabase(url, schema="d" + uuid.uuid4().hex[:12], min_size=1, max_size=2)
        await db.open()
        pg = PostgresMemoryStore(db, space, owns_database=True)
        yield pg
        await pg.delete_scope(OWNER)
        await pg.close()
    else:
        from qdrant_client import AsyncQdrantClient

        from agent_memory.adapters.qdrant import QdrantMemoryStore

        client = AsyncQdrantClient(location=":memory:")
        qd = QdrantMemoryStore(client, space, owns_client=True)
        yield qd
        await qd.close()


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
    store: MemoryStore, query: str
) -> None:
    asked = date(2023, 4, 20)
    dated = await _ids(store, RetrievalConfig(), query, asked)
    assert dated[0] == "b-mar", dated
    # the same store and question without the date rules: the tie goes to January
    plain = RetrievalConfig(context_dates=False, date_weight=0.0)
    assert (await _ids(store, plain, query, asked))[0] == "a-jan"


async def test_the_month_is_indexed_where_keyword_search_sees_it(store: MemoryStore) -> None:
    """Keyword search alone (no date bonus) finds the month through the context."""
    ids = await _ids(
        store, RetrievalConfig(date_weight=0.0), "lentil curry March", date(2024, 1, 1)
    )
    assert ids[0] == "b-mar", ids

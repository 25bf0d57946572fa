"""HybridRetriever on real stores (in-process and SQLite) with synthetic conversations."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.errors import InvalidInput, ScopeRequired, UnsupportedBackend
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, Page, ScoredRecord
from agent_memory.domain.retrieval import FusionMethod, LengthPrior, RetrievalConfig, RetrievalMode
from agent_memory.ports.storage import KeywordSearch, MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
OWNER = "alice"

# A synthetic two-session conversation: the answer to "Where did Sam go hiking?"
# sits in a turn that never says "hiking" — only its neighbour does.
SCRIPT = [
    ("1", "Sam", "Morning! How was the weekend?"),
    ("1", "Ria", "Quiet. I repotted my ferns and baked bread."),
    ("1", "Sam", "We went hiking on Saturday, it was lovely."),
    ("1", "Ria", "Oh nice, where was that?"),
    ("1", "Sam", "Up at Kestrel Ridge near the old quarry."),
    ("1", "Ria", "I have heard the views there are great."),
    ("2", "Ria", "My sister adopted a greyhound called Biscuit."),
    ("2", "Sam", "A greyhound! Does Biscuit like long walks?"),
    ("2", "Ria", "He prefers naps on the sofa, honestly."),
    ("2", "Sam", "My cat Pepper would approve of that plan."),
]


def conversation() -> list[ConversationTurn]:
    return [
        ConversationTurn(
            id=f"turn-{i:02d}",
            speaker=speaker,
            text=text,
            at=T0 + timedelta(days=7 * (int(session) - 1), minutes=i),
            session=session,
            attributes={"dia_id": f"D{session}:{i}"},
        )
        for i, (session, speaker, text) in enumerate(SCRIPT)
    ]


EMBEDDER = HashingEmbedder(64)  # the space of the `store` fixture (conftest)


class VectorOnlyStore:
    """A real store seen through the MemoryStore port only (no keyword search)."""

    def __init__(self, inner: InMemoryMemoryStore) -> None:
        self._inner = inner

    @property
    def space(self) -> EmbeddingSpace:
        return self._inner.space

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await self._inner.add(records)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        return await self._inner.get(owner, id)

    async def update(self, record: MemoryRecord) -> None:
        await self._inner.update(record)

    async def delete(self, owner: str, id: str) -> bool:
        return await self._inner.delete(owner, id)

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        return await self._inner.search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
        )

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        return await self._inner.list(
            owner, namespace=namespace, kinds=kinds, limit=limit, cursor=cursor
        )

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        return await self._inner.delete_scope(owner, namespace=namespace, kinds=kinds)

    async def ping(self) -> None:
        await self._inner.ping()

    async def close(self) -> None:
        await self._inner.close()


async def _indexed(store: MemoryStore, config: RetrievalConfig | None = None) -> HybridRetriever:
    # both rankings: the hashing embedder's default config has no vector ranking
    retriever = HybridRetriever(store, EMBEDDER, config or RetrievalConfig(vector_weight=0.2))
    await retriever.add_conversation(OWNER, conversation())
    return retriever


async def test_turns_are_stored_with_neighbour_context_not_in_content(store: MemoryStore) -> None:
    retriever = await _indexed(
        store, RetrievalConfig(context_window=1, context_self_weight=1, context_dates=False)
    )
    rec = await store.get(OWNER, "turn-04")
    assert rec is not None
    assert rec.content == "Sam: Up at Kestrel Ridge near the old quarry."
    assert (
        rec.context == "Ria: Oh nice, where was that?\nRia: I have heard the views there are great."
    )
    assert rec.attributes == {
        "dia_id": "D1:4",
        "speaker": "Sam",
        "session": "1",
        "turn": 4,
        "conversation": "turn-00",  # the first turn of the call: turns of one call
        "terms": 5,  # kestrel ridge near old quarry: the length prior's count
    }
    first_of_session_2 = await store.get(OWNER, "turn-06")
    assert first_of_session_2 is not None
    assert "views" not in first_of_session_2.context
    assert retriever.lexical_available


@pytest.mark.parametrize("mode", list(RetrievalMode))
async def test_context_finds_the_turn_whose_neighbour_names_the_topic(
    store: MemoryStore, mode: RetrievalMode
) -> None:
    retriever = await _indexed(store)
    got = await retriever.retrieve(OWNER, "Where did Sam go hiking?", limit=5, mode=mode)
    ids = [h.record.id for h in got.hits]
    assert got.mode is mode
    assert got.fallback is None
    if mode is not RetrievalMode.VECTOR:
        # the vector ranking embeds content only: it cannot see the neighbour
        assert "turn-04" in ids, ids
    assert len(ids) == len(set(ids)) <= 5
    scores = [h.score for h in got.hits]
    assert scores == sorted(scores, reverse=True)


async def test_the_turn_s_month_and_year_close_its_context(store: MemoryStore) -> None:
    await _indexed(store, RetrievalConfig(context_window=1, context_self_weight=1))
    rec = await store.get(OWNER, "turn-04")
    assert rec is not None
    assert rec.context.endswith("\nJanuary 2026")


async def test_without_context_the_lexical_ranking_misses_it(store: MemoryStore) -> None:
    retriever = await _indexed(store, RetrievalConfig(context_window=0, context_self_weight=1))
    got = await retriever.retrieve(OWNER, "hiking", limit=10, mode=RetrievalMode.LEXICAL)
    assert [h.record.id for h in got.hits] == ["turn-02"]


async def test_hybrid_puts_agreeing_evidence_first(store: MemoryStore) -> None:
    retriever = await _indexed(store)
    got = await retriever.retrieve(OWNER, "greyhound Biscuit", limit=5)
    assert got.hits[0].record.id in {"turn-06", "turn-07"}
    assert got.mode is RetrievalMode.HYBRID


async def test_owner_and_filters_are_respected(store: MemoryStore) -> None:
    retriever = await _indexed(store)
    await retriever.add_conversation(
        "bob",
        [ConversationTurn(id="b1", speaker="Bob", text="Kestrel Ridge hiking again", at=T0)],
        namespace="other",
    )
    got = await retriever.retrieve(OWNER, "Kestrel Ridge hiking", limit=20)
    assert all(h.record.owner == OWNER for h in got.hits)
    none = await retriever.retrieve(OWNER, "Kestrel Ridge", namespace="other")
    assert none.hits == ()
    bob = await retriever.retrieve("bob", "Kestrel Ridge", kinds=["turn"])
    assert [h.record.id for h in bob.hits] == ["b1"]


async def test_results_are_deterministic(store: MemoryStore) -> None:
    retriever = await _indexed(store, RetrievalConfig(fusion=FusionMethod.SCORE))
    one = await retriever.retrieve(OWNER, "Sam weekend walks", limit=10)
    two = await retriever.retrieve(OWNER, "Sam weekend walks", limit=10)
    assert [(h.record.id, h.score) for h in one.hits] == [(h.record.id, h.score) for h in two.hits]


async def test_store_without_keyword_search_falls_back_to_vector_and_says_so() -> None:
    store = VectorOnlyStore(InMemoryMemoryStore(EMBEDDER.space))
    assert not isinstance(store, KeywordSearch)
    retriever = await _indexed(store)
    assert not retriever.lexical_available
    got = await retriever.retrieve(OWNER, "greyhound", limit=3)
    assert got.mode is RetrievalMode.VECTOR
    assert got.fallback is not None
    assert "keyword" in got.fallback
    assert len(got.hits) == 3
    with pytest.raises(UnsupportedBackend, match="keyword search"):
        await retriever.retrieve(OWNER, "greyhound", mode=RetrievalMode.LEXICAL)


async def test_recency_weight_prefers_newer_turns() -> None:
    store = InMemoryMemoryStore(EMBEDDER.space)
    retriever = HybridRetriever(store, EMBEDDER, RetrievalConfig(recency_weight=1.0))
    turns = [
        ConversationTurn(id="old", speaker="Sam", text="my cat Pepper", at=T0),
        ConversationTurn(
            id="new", speaker="Sam", text="my cat Pepper", at=T0 + timedelta(days=200)
        ),
    ]
    await retriever.add_conversation(OWNER, turns)
    got = await retriever.retrieve(OWNER, "cat Pepper", limit=2)
    assert [h.record.id for h in got.hits] == ["new", "old"]


async def test_the_length_prior_lifts_the_turn_that_says_more(store: MemoryStore) -> None:
    # both turns match "Pepper" once; BM25 prefers the short one, the prior the
    # one that holds a fact — with or without the `terms` attribute stored
    turns = [
        ConversationTurn(id="short", speaker="Sam", text="Pepper!", at=T0),
        ConversationTurn(
            id="long",
            speaker="Sam",
            text="Pepper sleeps all day on the warm windowsill above the radiator",
            at=T0,
            session="2",
        ),
        ConversationTurn(  # the weakest match: min-max scaling puts it at 0
            id="filler",
            speaker="Ria",
            text="Pepper " + " ".join(f"word{i}" for i in range(60)),
            at=T0,
            session="3",
        ),
    ]
    plain = RetrievalConfig(context_window=0, context_self_weight=1, length_weight=0)
    retriever = HybridRetriever(store, EMBEDDER, plain)
    await retriever.add_conversation(OWNER, turns)

    async def order(config: RetrievalConfig) -> list[str]:
        got = await HybridRetriever(store, EMBEDDER, config).retrieve(
            OWNER, "Pepper", limit=3, mode=RetrievalMode.LEXICAL
        )
        return [h.record.id for h in got.hits]

    assert await order(plain) == ["short", "long", "filler"]
    with_prior = RetrievalConfig(
        context_window=0, context_self_weight=1, length_weight=1.0, length_saturation=8
    )
    assert await order(with_prior) == ["long", "short", "filler"]
    for rid in ("short", "long", "filler"):
        record = await store.get(OWNER, rid)
        assert record is not None
        assert isinstance(record.attributes["terms"], int)
        attributes = {k: v for k, v in record.attributes.items() if k != "terms"}
        await store.update(attrs.evolve(record, attributes=attributes))
    assert await order(with_prior) == ["long", "short", "filler"]


async def test_a_list_question_spreads_its_hits_over_sessions(store: MemoryStore) -> None:
    # session 1 says "books" three times, session 2 once: a question for several
    # books gets session 2 into the top 2, a question for one book does not
    turns = [
        ConversationTurn(id="a1", speaker="Sam", text="books books books on my desk", at=T0),
        ConversationTurn(id="a2", speaker="Sam", text="books books books by the bed", at=T0),
        ConversationTurn(id="a3", speaker="Sam", text="books books books in a box", at=T0),
        ConversationTurn(id="b1", speaker="Sam", text="books from the market", at=T0, session="2"),
        ConversationTurn(  # the weakest match: min-max scaling puts it at 0
            id="c1",
            speaker="Ria",
            text="books " + " ".join(f"word{i}" for i in range(60)),
            at=T0,
            session="3",
        ),
    ]
    config = RetrievalConfig(
        context_window=0, context_self_weight=1, length_weight=0, list_session_penalty=1.0
    )
    retriever = HybridRetriever(store, EMBEDDER, config)
    await retriever.add_conversation(OWNER, turns)

    async def top(query: str, retriever: HybridRetriever = retriever) -> set[str]:
        got = await retriever.retrieve(OWNER, query, limit=2, mode=RetrievalMode.LEXICAL)
        return {str(h.record.attributes["session"]) for h in got.hits}

    assert await top("Which books has Sam read?") == {"1", "2"}
    assert await top("Which book did Sam read?") == {"1"}
    off = HybridRetriever(store, EMBEDDER, attrs.evolve(config, list_session_penalty=0))
    assert await top("Which books has Sam read?", off) == {"1"}
    # the penalty draws from the list question's deeper candidate pool: with two
    # candidates per ranker session 2 is not among them, with four it is
    shallow = attrs.evolve(config, candidates=2, list_candidates=2, vector_weight=0.0)
    assert await top("Which books has Sam read?", HybridRetriever(store, EMBEDDER, shallow)) == {
        "1"
    }
    deeper = HybridRetriever(store, EMBEDDER, attrs.evolve(shallow, list_candidates=4))
    assert await top("Which books has Sam read?", deeper) == {"1", "2"}


async def test_bad_arguments_raise_typed_errors(store: MemoryStore) -> None:
    retriever = await _indexed(store)
    with pytest.raises(ScopeRequired):
        await retriever.retrieve(" ", "x")
    with pytest.raises(InvalidInput, match="limit"):
        await retriever.retrieve(OWNER, "x", limit=0)
    with pytest.raises(InvalidInput, match="mode"):
        await retriever.retrieve(OWNER, "x", mode="fuzzy")
    with pytest.raises(InvalidInput, match="embedder"):
        HybridRetriever(store, HashingEmbedder(32))


async def test_the_session_prior_brings_the_best_matchs_session_forward(
    store: MemoryStore,
) -> None:
    # "kestrel ridge" is said in session 1; the turn there that answers shares
    # no word with the question, while session 2 has a weak match ("ridge")
    turns = [
        ConversationTurn(id="a1", speaker="Sam", text="the kestrel ridge walk was long", at=T0),
        ConversationTurn(id="a2", speaker="Sam", text="we camped by the quarry lake", at=T0),
        ConversationTurn(
            id="b1", speaker="Ria", text="a ridge of clouds rolled in", at=T0, session="2"
        ),
        ConversationTurn(  # the weakest match: min-max scaling puts it at 0
            id="c1",
            speaker="Ria",
            text="ridge " + " ".join(f"word{i}" for i in range(60)),
            at=T0,
            session="3",
        ),
    ]
    config = RetrievalConfig(  # without category members: "activities" -> camping
        context_window=0,
        context_self_weight=1,
        length_weight=0,
        speaker_weight=0,
        category_members=False,
    )
    await HybridRetriever(store, EMBEDDER, config).add_conversation(OWNER, turns)

    async def order(query: str, weight: float) -> list[str]:
        retriever = HybridRetriever(store, EMBEDDER, attrs.evolve(config, session_weight=weight))
        got = await retriever.retrieve(OWNER, query, limit=2)
        return [h.record.id for h in got.hits]

    assert await order("What happened at Kestrel Ridge?", 0.5) == ["a1", "a2"]
    assert await order("What happened at Kestrel Ridge?", 0.0) == ["a1", "b1"]
    # a list question spreads over sessions instead: no prior for it
    assert await order("What activities did they do at Kestrel Ridge?", 0.5) == ["a1", "b1"]


def test_the_default_config_follows_the_embedder_space() -> None:
    """The knobs each embedder's cross-validation keeps (docs/retrieval.md): the
    hashing embedder's vectors only break ties (a smaller vector weight) and the
    length and session priors, the category members and the list-session penalty
    pass the fold rule with them; with a semantic space (MiniLM) the length prior
    passes at a smaller weight, the reply prior passes and the list-session
    penalty does not."""
    from agent_memory.adapters._common.minilm import MINILM_SPACE
    from agent_memory.services.retrieval import HASHING_VECTOR_WEIGHT, default_config

    hashing = default_config(EMBEDDER.space)
    assert hashing == RetrievalConfig(vector_weight=HASHING_VECTOR_WEIGHT)
    assert (
        hashing.length_weight,
        hashing.session_weight,
        hashing.reply_weight,
        hashing.category_members,
        hashing.list_session_penalty,
    ) == (0.3, 0.5, 0.0, True, 0.1)
    semantic = default_config(MINILM_SPACE)
    assert semantic.vector_weight == RetrievalConfig().vector_weight
    assert (
        semantic.length_weight,
        semantic.session_weight,
        semantic.reply_weight,
        semantic.category_members,
        semantic.list_session_penalty,
    ) == (0.2, 0.5, 0.05, True, 0.0)
    assert semantic.length_prior is LengthPrior.BONUS
    assert 0 < HASHING_VECTOR_WEIGHT < RetrievalConfig().vector_weight


# --- the query's embedding runs while the keyword search does ----------------------


class _Gate:
    """An embedder whose embedding sets `embedding` and then waits for `release`,
    and a store whose keyword search waits for `embedding`: the two must overlap."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.embedding = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    @property
    def space(self) -> EmbeddingSpace:
        return self.inner.space

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.embedding.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        vectors: npt.NDArray[np.float32] = await self.inner.embed(texts)
        return vectors


class _WaitingKeywordStore(InMemoryMemoryStore):
    def __init__(self, space: EmbeddingSpace, gate: _Gate, *, fail: bool = False) -> None:
        super().__init__(space)
        self.gate, self.fail = gate, fail

    async def search_text(self, owner: str, query: str, **kwargs: Any) -> list[ScoredRecord]:
        await asyncio.wait_for(self.gate.embedding.wait(), timeout=5)
        if self.fail:
            raise RuntimeError("keyword search failed")
        self.gate.release.set()
        return await super().search_text(owner, query, **kwargs)


async def test_the_query_is_embedded_while_the_keyword_search_runs() -> None:
    """When this fails (a TimeoutError), retrieval embedded the query only after
    the keyword search returned: the two latencies added up."""
    gate = _Gate()
    store = _WaitingKeywordStore(gate.space, gate)
    retriever = HybridRetriever(store, gate, RetrievalConfig(vector_weight=0.2))
    gate.release.set()  # adding the conversation embeds it
    await retriever.add_conversation(OWNER, conversation())
    gate.release.clear()
    gate.embedding.clear()
    got = await retriever.retrieve(OWNER, "Where did Sam go hiking?", limit=3)
    assert got.mode is RetrievalMode.HYBRID
    assert got.hits


async def test_a_failed_keyword_search_cancels_the_embedding() -> None:
    gate = _Gate()
    store = _WaitingKeywordStore(gate.space, gate, fail=True)
    retriever = HybridRetriever(store, gate, RetrievalConfig(vector_weight=0.2))
    gate.release.set()
    await retriever.add_conversation(OWNER, conversation())
    gate.release.clear()
    gate.embedding.clear()
    with pytest.raises(RuntimeError, match="keyword search failed"):
        await retriever.retrieve(OWNER, "Where did Sam go hiking?", limit=3)
    assert gate.cancelled

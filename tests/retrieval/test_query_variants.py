"""Query variants: irregular verb forms and chat-register words in the keyword query."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.retrieval import (
    RetrievalConfig,
    RetrievalMode,
    category_members,
    query_variants,
)
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
EMBEDDER = HashingEmbedder(64)  # the space of the `store` fixture (conftest)


def test_irregular_verbs_bring_their_other_forms() -> None:
    assert query_variants("What did Caroline draw?") == ["drew", "drawn"]
    assert query_variants("What does her drawing show?") == ["drew", "drawn", "shown"]
    assert query_variants("What has Sam written?") == ["write", "wrote"]
    assert query_variants("What did Nate buy?") == ["bought"]


def test_chat_register_words_for_formal_ones() -> None:
    assert query_variants("What is Gina's favorite dance?") == ["favourite", "fave", "fav"]
    assert query_variants("Who are the children?") == ["child", "kids", "kid"]


def test_light_verbs_and_noun_homographs_are_left_alone() -> None:
    # went/got/made are said in most narrating turns; "rose" is a flower too
    assert query_variants("When did Sam go to the beach and get a tan?") == []
    assert query_variants("What did Ria make?") == []
    assert query_variants("When did prices rise?") == []


def test_a_form_the_query_already_has_is_not_repeated() -> None:
    assert query_variants("Did Sam draw or drew?") == ["drawn"]
    assert query_variants("") == []


# words the two tables know, among others, so generated queries hit them
KNOWN = ["What", "pets", "martial", "arts", "art", "draw", "drew", "favorite", "fave"]
KNOWN += ["children", "kids", "career-high", "cities", "Paris", "dog", "has", "Sam", "?"]
QUERIES = st.one_of(st.text(max_size=80), st.lists(st.sampled_from(KNOWN)).map(" ".join))


@pytest.mark.parametrize("expand", [query_variants, category_members])
@given(query=QUERIES)
def test_added_words_are_new_distinct_single_terms(
    expand: Callable[[str], list[str]], query: str
) -> None:
    """Both query expansions (`query_variants`, `category_members`) add words
    whose term the query lacks, each once."""
    words = expand(query)
    asked = set(tokenize(query))
    assert len(words) == len(set(words))
    for word in words:
        terms = tokenize(word)
        assert len(terms) == 1
        assert terms[0] not in asked


TURNS = [
    ConversationTurn(id="told", speaker="Sam", text="I drew a lighthouse at dusk", at=T0),
    ConversationTurn(
        id="other", speaker="Sam", text="The harbour was busy today", at=T0, session="2"
    ),
]


async def _lexical(store: MemoryStore, config: RetrievalConfig, question: str) -> list[str]:
    retriever = HybridRetriever(store, EMBEDDER, config)
    got = await retriever.retrieve("alice", question, limit=5, mode=RetrievalMode.LEXICAL)
    return [h.record.id for h in got.hits]


async def test_the_turn_told_in_the_past_tense_is_found(store: MemoryStore) -> None:
    plain = RetrievalConfig(context_window=0, context_self_weight=1, query_variants=False)
    await HybridRetriever(store, EMBEDDER, plain).add_conversation("alice", TURNS)
    question = "What did they draw?"
    assert "told" not in await _lexical(store, plain, question)
    varied = RetrievalConfig(context_window=0, context_self_weight=1, query_variants=True)
    assert (await _lexical(store, varied, question))[0] == "told"
    # a list question keeps its words: its answers are spread over sessions and
    # the added forms only widen its already deep pool
    assert "told" not in await _lexical(store, varied, "What pictures did they draw?")

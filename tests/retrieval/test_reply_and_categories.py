"""The reply prior (a turn answering a matching question) and category members
(list questions name a category, the turns that answer them its members)."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.retrieval import (
    RetrievalConfig,
    RetrievalMode,
    category_members,
    is_list_question,
    is_question_turn,
    reply_prior,
)
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

EMBEDDER = HashingEmbedder(16)  # the space of `backend_store`
LOCAL = HashingEmbedder(64)  # the space of `store`
OWNER = "reply-owner"
T0 = datetime(2024, 6, 1, 18, 0, tzinfo=UTC)

# ---------------------------------------------------------------- reply prior


def test_the_reply_gains_a_share_of_its_questions_score() -> None:
    scored = [("q", 1.0), ("x", 0.5), ("a", 0.4)]
    got = dict(reply_prior(scored, {"a": "q"}, weight=0.2))
    assert got == pytest.approx({"q": 1.0, "x": 0.5, "a": 0.6})
    assert [rid for rid, _ in reply_prior(scored, {"a": "q"}, weight=0.2)] == ["q", "a", "x"]
    # the share is of the question's score relative to the best one
    got = dict(reply_prior([("x", 4.0), ("q", 2.0), ("a", 1.0)], {"a": "q"}, weight=0.5))
    assert got["a"] == pytest.approx(1.25)


def test_the_bonus_reads_scores_before_any_is_added_so_it_never_chains() -> None:
    # a replies to q, b replies to a: b gains from a's score before a's own bonus
    scored = [("q", 1.0), ("a", 0.5), ("b", 0.1)]
    got = dict(reply_prior(scored, {"a": "q", "b": "a"}, weight=0.5))
    assert got["a"] == pytest.approx(1.0)
    assert got["b"] == pytest.approx(0.35)


def test_no_replies_no_weight_or_unknown_questions_change_nothing() -> None:
    scored = [("b", 0.9), ("a", 0.9), ("c", 0.2)]
    assert reply_prior(scored, {}, weight=0.5) == scored
    assert reply_prior(scored, {"c": "b"}, weight=0.0) == scored
    assert dict(reply_prior(scored, {"c": "missing"}, weight=0.5)) == dict(scored)
    assert reply_prior([], {"a": "b"}, weight=1.0) == []


scores = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 10, allow_nan=False)),
    unique_by=lambda item: item[0],
    max_size=8,
)


@given(scores, st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from("abcdefgh")))
def test_reply_prior_only_adds_and_keeps_the_order_of_the_rest(
    scored: list[tuple[str, float]], replies: dict[str, str]
) -> None:
    scored = sorted(scored, key=lambda item: (-item[1], item[0]))  # as fusion gives them
    got = reply_prior(scored, replies, weight=0.3)
    before = dict(scored)
    after = dict(got)
    assert after.keys() == before.keys()
    for rid, score in after.items():
        assert score >= before[rid]
        if rid not in replies or replies[rid] not in before or replies[rid] == rid:
            assert score == before[rid]
    # ordered by score, ties by id
    assert got == sorted(got, key=lambda item: (-item[1], item[0]))


def test_a_question_turn_holds_a_question_mark() -> None:
    assert is_question_turn("Ria: So what's your favourite game?")
    assert not is_question_turn("Sam: Definitely Catan.")


def test_reply_weight_is_validated() -> None:
    with pytest.raises(InvalidInput, match="reply_weight"):
        RetrievalConfig(reply_weight=-0.1)


# ---------------------------------------------------------- category members


def test_a_category_brings_its_members() -> None:
    pets = category_members("What pets does Nate have?")
    assert pets[:3] == ["dog", "puppy", "cat"]
    assert category_members("Which pet is his?")[:1] == ["dog"]
    cities = category_members("Which cities has Jon visited?")
    assert {"paris", "rome", "london"} <= set(cities)
    assert "spain" in category_members("What European countries has Maria been to?")


def test_a_two_word_category_is_matched_before_its_last_word() -> None:
    arts = category_members("What martial arts has John done?")
    assert "karate" in arts
    assert "painting" not in arts  # not the members of "art"
    assert "painting" in category_members("What kinds of art does Sam make?")


def test_a_word_inside_a_hyphenated_compound_is_no_category() -> None:
    assert category_members("Which career-high performances did John achieve?") == []
    assert category_members("What state-of-the-art gear has he?") == []
    assert "teacher" in category_members("What careers has she tried?")


def test_members_are_new_terms_each_once_and_unknown_words_bring_none() -> None:
    got = category_members("What activities and hobbies does Sam do, like hiking?")
    assert "hiking" not in got  # the query has it
    assert len(got) == len(set(got))
    assert category_members("What is the answer?") == []
    assert category_members("") == []


# ------------------------------------------------------- on every backend


def _turn(rid: str, speaker: str, text: str, session: str) -> ConversationTurn:
    return ConversationTurn(id=rid, speaker=speaker, text=text, at=T0, session=session)


REPLY_TURNS = [
    _turn("q", "Ria", "So what is your favorite board game?", "1"),
    _turn("reply", "Sam", "Definitely Catan, every Sunday night.", "1"),
    _turn("other", "Sam", "Board games bore me lately.", "2"),
    _turn("other2", "Ria", "Fair enough.", "2"),
]
# no neighbouring context, no session, length or speaker prior: only the reply prior
# can lift the reply, which shares no word with the question
ISOLATED = RetrievalConfig(
    context_window=0,
    context_self_weight=1,
    session_weight=0.0,
    length_weight=0.0,
    speaker_weight=0.0,
)


async def _ranked(
    store: MemoryStore, config: RetrievalConfig, turns: list[ConversationTurn], question: str
) -> list[str]:
    retriever = HybridRetriever(store, EMBEDDER, config)
    await store.delete_scope(OWNER)
    await retriever.add_conversation(OWNER, turns)
    got = await retriever.retrieve(OWNER, question, limit=4, mode=RetrievalMode.HYBRID)
    return [h.record.id for h in got.hits]


async def test_the_reply_to_a_matching_question_rises(backend_store: MemoryStore) -> None:
    question = "What is Sam's favorite board game?"
    assert not is_list_question(question)
    without = await _ranked(
        backend_store, attrs.evolve(ISOLATED, reply_weight=0.0), REPLY_TURNS, question
    )
    assert without.index("reply") > without.index("other"), without
    lifted = await _ranked(
        backend_store, attrs.evolve(ISOLATED, reply_weight=1.0), REPLY_TURNS, question
    )
    assert lifted.index("reply") < lifted.index("other"), lifted


PET_TURNS = [
    _turn("a-weather", "Sam", "The weather was lovely on the walk today.", "1"),
    _turn("b-news", "Ria", "Nice, anything new at home?", "1"),
    _turn("z-dog", "Sam", "I adopted a dog from the shelter last week.", "2"),
    _turn("z-end", "Ria", "Congrats, talk soon!", "2"),
]


async def test_a_list_question_finds_the_member_its_category_names(
    backend_store: MemoryStore,
) -> None:
    question = "What pets does Sam have?"
    assert is_list_question(question)
    # keyword evidence only: the hashing vectors are not what is tested
    keywords = RetrievalConfig(vector_weight=0.0, category_members=False)
    plain = await _ranked(backend_store, keywords, PET_TURNS, question)
    assert plain[0] != "z-dog", plain
    members = attrs.evolve(keywords, category_members=True)
    found = await _ranked(backend_store, members, PET_TURNS, question)
    assert found[0] == "z-dog", found


async def test_turns_of_two_calls_on_one_session_are_not_adjacent(store: MemoryStore) -> None:
    """Each `add_conversation` call numbers its turns from 0: turn 1 of the second
    call does not reply to turn 0 of the first, though both are in session "1"."""
    first = [
        _turn("c1-q", "Ria", "So what is your favorite board game?", "1"),
        _turn("c1-a", "Sam", "Nothing comes to mind, sorry.", "1"),
    ]
    second = [
        _turn("c2-hi", "Ria", "By the way, hello again.", "1"),
        _turn("c2-catan", "Sam", "Definitely Catan, every Sunday night.", "1"),
    ]
    question = "What is Sam's favorite board game?"

    async def scores(weight: float) -> dict[str, float]:
        retriever = HybridRetriever(store, LOCAL, attrs.evolve(ISOLATED, reply_weight=weight))
        got = await retriever.retrieve(OWNER, question, limit=4, mode=RetrievalMode.HYBRID)
        return {h.record.id: h.score for h in got.hits}

    indexer = HybridRetriever(store, LOCAL, ISOLATED)
    await indexer.add_conversation(OWNER, first)
    await indexer.add_conversation(OWNER, second)
    plain, lifted = await scores(0.0), await scores(1.0)
    assert lifted["c1-a"] > plain["c1-a"]  # the reply in the same call rises
    assert lifted["c2-catan"] == pytest.approx(plain["c2-catan"])
    stored = await store.get(OWNER, "c2-catan")
    assert stored is not None
    assert (stored.attributes["conversation"], stored.attributes["turn"]) == ("c2-hi", 1)

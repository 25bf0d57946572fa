"""Per-query diversity (`diversify`) and pseudo-relevance feedback
(`feedback_terms`, the second keyword round): properties and the retriever."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.retrieval import RetrievalConfig, diversify, feedback_terms
from agent_memory.services.retrieval import HybridRetriever

from .test_retriever import EMBEDDER, OWNER, conversation

IDS = [f"r{i:02d}" for i in range(15)]


@st.composite
def scored_groups(draw: st.DrawFn) -> tuple[list[tuple[str, float]], dict[str, int]]:
    ids = draw(st.lists(st.sampled_from(IDS), unique=True, max_size=15))
    scores = sorted((draw(st.integers(0, 100)) / 10 for _ in ids), reverse=True)
    groups = {i: draw(st.integers(0, 3)) for i in ids if draw(st.booleans())}
    return list(zip(ids, scores, strict=True)), groups


@given(case=scored_groups(), penalty=st.floats(0.0, 5.0), depth=st.integers(0, 20))
def test_diversify_reorders_without_losing_or_inventing(
    case: tuple[list[tuple[str, float]], dict[str, int]], penalty: float, depth: int
) -> None:
    scored, groups = case
    out = diversify(scored, groups, penalty=penalty, depth=depth)
    assert sorted(i for i, _ in out) == sorted(i for i, _ in scored)
    values = [s for _, s in out]
    assert values == sorted(values, reverse=True)
    original = dict(scored)
    assert all(s <= original[i] for i, s in out)
    if penalty == 0 or depth == 0:
        assert out == scored


@given(case=scored_groups())
def test_a_large_penalty_lets_every_group_in_before_any_repeats(
    case: tuple[list[tuple[str, float]], dict[str, int]],
) -> None:
    scored, groups = case
    out = diversify(scored, groups, penalty=1000.0, depth=len(scored))
    grouped = [groups[i] for i, _ in out if i in groups]
    distinct = len(set(grouped))
    assert len(set(grouped[:distinct])) == distinct


def test_reach_counts_only_neighbouring_turns() -> None:
    scored = [("a", 1.0), ("b", 0.9), ("c", 0.8)]
    groups = {"a": "s", "b": "s", "c": "s"}
    positions = {"a": 10, "b": 11, "c": 20}
    out = diversify(scored, groups, penalty=0.5, depth=3, positions=positions, reach=2)
    assert [i for i, _ in out] == ["a", "c", "b"]


@given(
    query=st.text(max_size=40),
    top=st.lists(st.text(max_size=80), max_size=4),
    rest=st.lists(st.text(max_size=80), max_size=6),
    count=st.integers(1, 8),
)
def test_feedback_terms_are_new_terms_of_the_top_texts(
    query: str, top: list[str], rest: list[str], count: int
) -> None:
    got = feedback_terms(query, top, [*top, *rest], count=count)
    assert len(got) <= count
    assert len(set(got)) == len(got)
    asked = set(tokenize(query))
    from_top = {t for text in top for t in tokenize(text)}
    assert all(t not in asked and t in from_top for t in got)


def test_feedback_prefers_names_and_rare_terms() -> None:
    top = ["Sam: We drove up to Kestrel Ridge, lovely views.", "Ria: Kestrel Ridge again, views!"]
    pool = [*top, "Sam: lovely day", "Ria: lovely cake", "Sam: lovely walk"]
    got = feedback_terms("Where did Sam go?", top, pool, count=2)
    assert got == [*tokenize("kestrel ridge")]


async def test_the_second_round_and_diversity_run_through_the_retriever() -> None:
    store = InMemoryMemoryStore(EMBEDDER.space)
    config = RetrievalConfig(feedback_weight=0.5, session_penalty=10.0)
    retriever = HybridRetriever(store, EMBEDDER, config)
    await retriever.add_conversation(OWNER, conversation())
    got = await retriever.retrieve(OWNER, "Sam greyhound hiking", limit=4)
    sessions = [h.record.attributes["session"] for h in got.hits]
    assert set(sessions[:2]) == {"1", "2"}, sessions
    scores = [h.score for h in got.hits]
    assert scores == sorted(scores, reverse=True)
    await store.close()


@given(case=scored_groups(), penalty=st.floats(0.0, 5.0), depth=st.integers(0, 20))
def test_the_whole_session_rule_equals_the_general_greedy(
    case: tuple[list[tuple[str, float]], dict[str, int]], penalty: float, depth: int
) -> None:
    """Without `reach` each pick compares only the groups' best candidates; with a
    reach that covers every turn the general greedy must agree pick for pick."""
    scored, groups = case
    everywhere = {rid: 0 for rid, _ in scored}
    general = diversify(
        scored, groups, penalty=penalty, depth=depth, positions=everywhere, reach=10**9
    )
    assert diversify(scored, groups, penalty=penalty, depth=depth) == general

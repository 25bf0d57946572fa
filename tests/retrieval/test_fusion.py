"""Fusion, recency/importance and neighbouring-turn context (domain.retrieval)."""

from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from snowballstemmer.english_stemmer import EnglishStemmer

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.lexical import STOPWORDS, query_terms, stem, tokenize
from agent_memory.domain.retrieval import (
    FusionMethod,
    LengthPrior,
    Ranking,
    RetrievalConfig,
    content_length,
    final_scores,
    fuse,
    is_list_question,
    mentions,
    neighbour_contexts,
    recency_factor,
    reciprocal_rank_fusion,
    score_fusion,
    session_prior,
)

SUFFIXES = ("ing", "ed", "s", "er", "ings", "ously", "ational", "ness")
IDS = st.sampled_from([f"r{i}" for i in range(12)])
SCORES = st.integers(-20, 200).map(lambda n: n / 4)


@st.composite
def rankings(draw: st.DrawFn) -> tuple[tuple[str, float], ...]:
    ids = draw(st.lists(IDS, unique=True, max_size=10))
    scores = sorted((draw(SCORES) for _ in ids), reverse=True)
    return tuple(zip(ids, scores, strict=True))


WEIGHT = st.floats(min_value=0.01, max_value=5.0, allow_nan=False)
METHOD = st.sampled_from(list(FusionMethod))


def _fuse(method: FusionMethod, a: Ranking, b: Ranking) -> list[tuple[str, float]]:
    return fuse([a, b], RetrievalConfig(fusion=method))


@given(a=rankings(), b=rankings(), wa=WEIGHT, wb=WEIGHT, method=METHOD)
def test_fused_ranking_is_a_permutation_of_the_union(
    a: tuple[tuple[str, float], ...],
    b: tuple[tuple[str, float], ...],
    wa: float,
    wb: float,
    method: FusionMethod,
) -> None:
    fused = _fuse(method, Ranking(a, wa), Ranking(b, wb))
    ids = [rid for rid, _ in fused]
    assert sorted(ids) == sorted({rid for rid, _ in (*a, *b)})
    scores = [s for _, s in fused]
    assert scores == sorted(scores, reverse=True)


@given(a=rankings(), b=rankings(), wa=WEIGHT, wb=WEIGHT, method=METHOD)
def test_fusion_is_deterministic_and_order_of_rankings_does_not_matter(
    a: tuple[tuple[str, float], ...],
    b: tuple[tuple[str, float], ...],
    wa: float,
    wb: float,
    method: FusionMethod,
) -> None:
    one = _fuse(method, Ranking(a, wa), Ranking(b, wb))
    again = _fuse(method, Ranking(a, wa), Ranking(b, wb))
    swapped = _fuse(method, Ranking(b, wb), Ranking(a, wa))
    assert one == again
    assert [rid for rid, _ in one] == [rid for rid, _ in swapped]


@given(a=rankings(), b=rankings(), wa=WEIGHT, wb=WEIGHT)
def test_a_record_first_in_both_rankings_is_first(
    a: tuple[tuple[str, float], ...],
    b: tuple[tuple[str, float], ...],
    wa: float,
    wb: float,
) -> None:
    top = ("top", 100.0)
    a2 = (top, *a)
    b2 = (top, *b)
    for method in FusionMethod:
        fused = _fuse(method, Ranking(a2, wa), Ranking(b2, wb))
        assert fused[0][0] == "top", method
    rrf = reciprocal_rank_fusion([Ranking(a2, wa), Ranking(b2, wb)])
    assert rrf[0][1] == pytest.approx(1.0)


@given(a=rankings(), b=rankings(), w=WEIGHT, method=METHOD)
def test_zero_weight_reduces_to_the_other_ranking(
    a: tuple[tuple[str, float], ...],
    b: tuple[tuple[str, float], ...],
    w: float,
    method: FusionMethod,
) -> None:
    fused = _fuse(method, Ranking(a, w), Ranking(b, 0.0))
    ids = [rid for rid, _ in fused]
    positive = [rid for rid, s in fused if s > 0]
    if method is FusionMethod.RRF:
        assert ids[: len(a)] == [rid for rid, _ in a]
    else:
        # min-max scaling maps a's lowest score to 0: a's order is kept among
        # a's ids, ties (equal scores) broken by id
        expected = [rid for rid, _ in sorted(a, key=lambda h: (-h[1], h[0]))]
        assert [rid for rid in ids if rid in dict(a)] == expected
    assert set(positive) <= {rid for rid, _ in a}


def test_rrf_rewards_agreement_over_one_strong_rank() -> None:
    lexical = Ranking((("a", 9.0), ("b", 5.0)))
    vector = Ranking((("c", 0.9), ("b", 0.8)))
    ids = [rid for rid, _ in reciprocal_rank_fusion([lexical, vector], k=1.0)]
    assert ids[0] == "b"


def test_score_fusion_is_calibrated_per_ranking() -> None:
    lexical = Ranking((("a", 40.0), ("b", 20.0), ("c", 0.0)))
    vector = Ranking((("c", 0.31), ("b", 0.30), ("a", 0.29)))
    fused = dict(score_fusion([lexical, vector]))
    assert fused["a"] == pytest.approx(0.5)
    assert fused["b"] == pytest.approx(0.5)
    assert fused["c"] == pytest.approx(0.5)


def test_ranking_rejects_duplicates_and_negative_weight() -> None:
    with pytest.raises(InvalidInput, match="ranking"):
        Ranking((("a", 1.0), ("a", 0.5)))
    with pytest.raises(InvalidInput, match=r"ranking\.weight"):
        Ranking((("a", 1.0),), weight=-1.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rrf_k", 0),
        ("lexical_weight", -0.1),
        ("vector_weight", float("nan")),
        ("recency_weight", float("inf")),
        ("recency_half_life_days", 0),
        ("importance_weight", "1"),
        ("candidates", 0),
        ("context_window", -1),
        ("context_self_weight", 0),
        ("candidates", True),
        ("length_weight", -1),
        ("length_saturation", 0),
        ("list_session_penalty", float("nan")),
        ("list_candidates", 0),
        ("session_weight", -0.5),
        ("length_prior", "multiply"),
        ("length_prior", None),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidInput, match=field):
        RetrievalConfig(**{field: value})  # type: ignore[arg-type]


def test_config_needs_one_ranking() -> None:
    with pytest.raises(InvalidInput, match="both 0"):
        RetrievalConfig(lexical_weight=0, vector_weight=0)
    with pytest.raises(ValueError, match="bogus"):
        RetrievalConfig(fusion="bogus")


NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_recency_halves_every_half_life() -> None:
    assert recency_factor(NOW, NOW, 30.0) == 1.0
    assert recency_factor(NOW + timedelta(days=3), NOW, 30.0) == 1.0
    assert recency_factor(NOW - timedelta(days=30), NOW, 30.0) == pytest.approx(0.5)
    assert recency_factor(NOW - timedelta(days=60), NOW, 30.0) == pytest.approx(0.25)


def test_recency_and_importance_reorder_only_when_weighted() -> None:
    fused = [("old", 0.50), ("new", 0.49)]
    created = {"old": NOW - timedelta(days=300), "new": NOW}
    importance = {"old": 0.0, "new": 1.0}
    plain = final_scores(
        fused, RetrievalConfig(), created_at=created, importance=importance, now=NOW
    )
    assert [rid for rid, _ in plain] == ["old", "new"]
    recent = final_scores(
        fused,
        RetrievalConfig(recency_weight=0.1),
        created_at=created,
        importance=importance,
        now=NOW,
    )
    assert [rid for rid, _ in recent] == ["new", "old"]
    important = final_scores(
        fused,
        RetrievalConfig(importance_weight=0.05),
        created_at=created,
        importance=importance,
        now=NOW,
    )
    assert [rid for rid, _ in important] == ["new", "old"]
    assert important[0][1] == pytest.approx(0.49 + 0.05)


def test_neighbour_context_window_and_sessions() -> None:
    texts = ["t0", "t1", "t2", "t3", "t4"]
    groups = ["s1", "s1", "s1", "s2", "s2"]
    got = neighbour_contexts(texts, window=1, groups=groups)
    assert got == ["t1", "t0\nt2", "t1", "t4", "t3"]
    wide = neighbour_contexts(texts, window=2)
    assert wide[2].split("\n") == ["t1", "t3", "t0", "t4"]
    weighted = neighbour_contexts(texts, window=1, self_weight=3, groups=groups)
    assert weighted[0].split("\n") == ["t0", "t0", "t1"]
    assert neighbour_contexts(texts, window=0) == [""] * 5
    assert neighbour_contexts([], window=3) == []


@given(
    texts=st.lists(st.text(alphabet="abc", min_size=1, max_size=3), max_size=12),
    window=st.integers(0, 4),
)
def test_neighbour_context_never_contains_a_turn_out_of_window(
    texts: list[str], window: int
) -> None:
    labelled = [f"{i}:{t}" for i, t in enumerate(texts)]
    for i, context in enumerate(neighbour_contexts(labelled, window=window)):
        parts = [p for p in context.split("\n") if p]
        indexes = [int(p.split(":")[0]) for p in parts]
        assert all(0 < abs(j - i) <= window for j in indexes)
        assert len(parts) == min(i, window) + min(len(texts) - 1 - i, window)


def test_neighbour_context_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidInput, match="window"):
        neighbour_contexts(["a"], window=-1)
    with pytest.raises(InvalidInput, match="self_weight"):
        neighbour_contexts(["a"], window=1, self_weight=0)
    with pytest.raises(InvalidInput, match="groups"):
        neighbour_contexts(["a", "b"], window=1, groups=["x"])


def test_tokens_are_stemmed_and_stopwords_dropped() -> None:
    assert tokenize("She decided: hiking, hikes; painted the paintings and paints") == [
        "decid",
        "hike",
        "hike",
        "paint",
        "paint",
        "paint",
    ]
    assert query_terms("What did Ingrid paint? Ingrid!") == ["ingrid", "paint"]
    assert stem("running") == "run"
    assert stem("classes") == "class"
    assert stem("activities") == "activ"
    assert stem("status") == "status"
    assert stem("bus") == "bus"
    assert stem("a1s") == "a1s"
    assert tokenize("In 2023 the Über ÜBER 10am") == ["2023", "über", "über", "10am"]


@given(st.text(max_size=80))
def test_tokens_are_the_snowball_stems_of_the_non_stopwords(text: str) -> None:
    """The cached tokeniser gives what a fresh Snowball English stemmer gives for
    every word (all-letter words stemmed, the rest kept), never a stopword or an
    empty term."""
    fresh = EnglishStemmer()
    want = []
    for raw in re.findall(r"[^\W_]+", text):
        word = raw.lower()
        if word not in STOPWORDS:
            want.append((fresh.stemWord(word) or word) if word.isalpha() else word)
    got = tokenize(text)
    assert got == want
    assert all(term and term not in STOPWORDS for term in got)
    assert tokenize(text) == got


def test_stems_are_right_from_many_threads() -> None:
    """The Snowball stemmer keeps its state per call: concurrent cache misses must
    not mix two words up (a tiny switch interval makes threads interleave inside
    a call)."""
    words = [f"{w}{end}" for w in ("paint", "hike", "walk", "climb", "gener") for end in SUFFIXES]
    want = {w: EnglishStemmer().stemWord(w) for w in words}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            stem.cache_clear()
            with ThreadPoolExecutor(max_workers=4) as pool:
                got = list(pool.map(stem, words * 2))
            assert got == [want[w] for w in words * 2]
    finally:
        sys.setswitchinterval(interval)
        stem.cache_clear()


def test_long_words_are_stemmed_but_never_cached() -> None:
    """The per-word caches are bounded in entries; a word longer than any real
    English word is stemmed without being cached, so adversarial text cannot make
    the caches hold megabytes."""
    import agent_memory.domain.lexical as lexical

    long_word = "painting" * 1000
    before = (lexical.stem.cache_info().currsize, lexical._cached.cache_info().currsize)
    assert tokenize(f"{long_word} {long_word}s") == [
        EnglishStemmer().stemWord(long_word),
        EnglishStemmer().stemWord(long_word + "s"),
    ]
    after = (lexical.stem.cache_info().currsize, lexical._cached.cache_info().currsize)
    assert after == before


def test_speaker_named_in_query_is_favoured_only_when_unambiguous() -> None:
    fused = [("by-ria", 0.6), ("by-sam", 0.5)]
    speakers = {"by-ria": "Ria", "by-sam": "Sam"}
    config = RetrievalConfig(speaker_weight=0.2)

    def order(query: str) -> list[str]:
        got = final_scores(
            fused,
            config,
            created_at={},
            importance={},
            now=NOW,
            query=query,
            speakers=speakers,
        )
        return [rid for rid, _ in got]

    assert order("What does Sam's cat eat?") == ["by-sam", "by-ria"]
    assert order("What does Ria's cat eat?") == ["by-ria", "by-sam"]
    assert order("Did Sam and Ria meet?") == ["by-ria", "by-sam"]
    assert order("What does Samantha like?") == ["by-ria", "by-sam"]
    assert mentions("where did SAM go", "Sam")
    assert not mentions("samuel", "Sam")
    assert not mentions("anything", " ")


def test_the_length_prior_saturates_and_is_off_at_weight_zero() -> None:
    fused = [("short", 0.5), ("long", 0.45), ("longer", 0.45)]
    lengths = {"short": 2, "long": 30, "longer": 300}
    config = RetrievalConfig(length_weight=0.3, length_saturation=30)

    def scores(config: RetrievalConfig) -> dict[str, float]:
        got = final_scores(fused, config, created_at={}, importance={}, now=NOW, lengths=lengths)
        return dict(got)

    got = scores(config)
    assert got["short"] == pytest.approx(0.5 + 0.3 * 2 / 30)
    assert got["long"] == got["longer"] == pytest.approx(0.45 + 0.3)
    assert scores(RetrievalConfig(length_weight=0)) == dict(fused)


def test_the_scale_form_needs_a_weight_of_at_most_one() -> None:
    assert RetrievalConfig(length_prior="scale", length_weight=1.0).length_prior is (
        LengthPrior.SCALE
    )
    with pytest.raises(InvalidInput, match="length_weight"):
        RetrievalConfig(length_prior=LengthPrior.SCALE, length_weight=1.5)
    # the bonus form has no such bound
    assert RetrievalConfig(length_weight=1.5).length_weight == 1.5


def test_the_scale_form_multiplies_the_evidence_instead_of_adding_to_it() -> None:
    # a long record with no evidence gains nothing from the scale form (the bonus
    # form lifts it by the full weight); a short one loses in proportion to its score
    fused = [("short", 0.6), ("long", 0.5), ("long-unmatched", 0.0)]
    lengths = {"short": 3, "long": 30, "long-unmatched": 45}

    def scores(prior: LengthPrior) -> dict[str, float]:
        config = RetrievalConfig(length_weight=0.3, length_saturation=30, length_prior=prior)
        return dict(
            final_scores(fused, config, created_at={}, importance={}, now=NOW, lengths=lengths)
        )

    scaled = scores(LengthPrior.SCALE)
    assert scaled["short"] == pytest.approx(0.6 * (0.7 + 0.3 * 3 / 30))
    assert scaled["long"] == pytest.approx(0.5)
    assert scaled["long-unmatched"] == 0.0
    added = scores(LengthPrior.BONUS)
    assert added["long-unmatched"] == pytest.approx(0.3)
    assert [rid for rid, _ in final_scores(
        fused,
        RetrievalConfig(length_weight=0.3, length_prior=LengthPrior.SCALE),
        created_at={}, importance={}, now=NOW, lengths=lengths,
    )] == ["long", "short", "long-unmatched"]  # fmt: skip


@given(
    st.lists(
        st.tuples(IDS, st.integers(0, 100), SCORES.map(abs)), unique_by=lambda p: p[0], min_size=1
    ),
    st.floats(0.0, 1.0),
    st.integers(1, 60),
)
def test_the_scale_form_keeps_a_score_between_its_floor_and_itself(
    items: list[tuple[str, int, float]], weight: float, saturation: int
) -> None:
    fused = [(rid, score) for rid, _, score in items]
    config = RetrievalConfig(
        length_weight=weight, length_saturation=saturation, length_prior=LengthPrior.SCALE
    )
    lengths = {rid: length for rid, length, _ in items}
    got = dict(final_scores(fused, config, created_at={}, importance={}, now=NOW, lengths=lengths))
    for rid, length, score in items:
        assert (1 - weight) * score - 1e-12 <= got[rid] <= score + 1e-12
        if length >= saturation:
            assert got[rid] == pytest.approx(score)


@given(
    st.lists(st.tuples(IDS, st.integers(0, 100)), unique_by=lambda p: p[0], min_size=1),
    st.floats(0.0, 2.0),
    st.integers(1, 60),
)
def test_the_length_prior_never_lowers_a_score_nor_adds_more_than_its_weight(
    items: list[tuple[str, int]], weight: float, saturation: int
) -> None:
    fused = [(rid, 0.5) for rid, _ in items]
    config = RetrievalConfig(length_weight=weight, length_saturation=saturation)
    got = dict(
        final_scores(fused, config, created_at={}, importance={}, now=NOW, lengths=dict(items))
    )
    for rid, length in items:
        assert 0.5 <= got[rid] <= 0.5 + weight + 1e-12
        for other, other_length in items:
            if other_length >= length:
                assert got[other] >= got[rid]


@given(st.text(max_size=80), st.sampled_from(["Sam", "Ria", ""]))
def test_content_length_counts_the_tokens_that_search_sees(text: str, speaker: str) -> None:
    # stemming never adds or drops a token: the count needs no stemming
    assert content_length(text) == len(tokenize(text))
    assert content_length(f"{speaker}: {text}", speaker or None) == len(
        tokenize(text if speaker else f": {text}")
    )


@pytest.mark.parametrize(
    "question",
    [
        "What activities does Melanie partake in?",
        "Which US cities has John visited?",
        "What kinds of books does Tim read?",
        "What European countries has Maria been to?",
        "How many times has Melanie gone to the beach?",
        "What do Jon and Gina both have in common?",
        "What LGBTQ+ events has Caroline attended?",
        "What types of yoga has Maria practiced?",
        "What areas of the country has John seen?",
    ],
)
def test_list_questions_are_recognised(question: str) -> None:
    assert is_list_question(question)


@pytest.mark.parametrize(
    "question",
    [
        "What does Melanie think about the adoption?",
        "What kind of painting did Caroline share?",
        "When did Jon open his studio?",
        "What is Nate's favorite snack?",
        "Which book did Tim recommend?",
        "What was the class about?",
        "What happens to its business?",
        "What motivates Caroline to paint?",
    ],
)
def test_single_fact_questions_are_not_list_questions(question: str) -> None:
    assert not is_list_question(question)


SESSIONS = st.dictionaries(IDS, st.sampled_from(["s1", "s2", "s3"]))


@given(rankings(), SESSIONS, st.floats(0.0, 3.0))
def test_the_session_prior_lifts_whole_sessions_and_keeps_their_inner_order(
    scored: tuple[tuple[str, float], ...], groups: dict[str, str], weight: float
) -> None:
    scored = tuple(sorted(((rid, abs(s)) for rid, s in scored), key=lambda p: (-p[1], p[0])))
    got = session_prior(scored, groups, weight=weight)
    before = dict(scored)
    after = dict(got)
    assert sorted(after) == sorted(before)
    assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    for rid, score in scored:
        assert score - 1e-9 <= after[rid] <= score + weight + 1e-9
    for a, sa in scored:
        for b, sb in scored:
            same = groups.get(a) is not None and groups.get(a) == groups.get(b)
            if same and sa > sb:
                assert after[a] > after[b]  # one session: its own order stands
    # without groups every score is scaled alike: the order does not change
    assert [r for r, _ in session_prior(scored, {}, weight=weight)] == [r for r, _ in scored]


def test_the_session_prior_puts_the_best_sessions_turns_first() -> None:
    scored = [("best", 1.0), ("elsewhere", 0.5), ("answer", 0.3), ("far", 0.1)]
    groups = {"best": "1", "answer": "1", "elsewhere": "2", "far": "3"}
    got = session_prior(scored, groups, weight=0.5)
    assert [rid for rid, _ in got] == ["best", "answer", "elsewhere", "far"]
    assert dict(got)["answer"] == pytest.approx(0.3 + 0.5)
    assert dict(got)["elsewhere"] == pytest.approx(0.5 + 0.5 * 0.5)
    assert session_prior(scored, groups, weight=0) == scored
    assert session_prior([("a", 0.0)], {"a": "1"}, weight=1.0) == [("a", 0.0)]

"""Hybrid retrieval rules (pure): rank fusion, recency and importance weights,
and the neighbouring-turn indexing context of a conversation.

A hybrid search asks two rankers — lexical (BM25 over content and indexing
context) and vector (cosine similarity) — for their best candidates, then fuses
them here. Two fusion methods:

- reciprocal rank fusion (`FusionMethod.RRF`): a candidate at rank r (from 1) in
  a ranking of weight w earns `w / (rrf_k + r)`; scores are ignored, so rankers
  on different scales mix without calibration;
- calibrated score fusion (`FusionMethod.SCORE`): each ranking's scores are
  min-max scaled to [0, 1] over its candidates (a span below `SCORE_RESOLUTION`
  is rounding, not stretched), then summed with the weights.

The fused score is divided by its largest possible value (so it lies in [0, 1])
before the recency, importance and speaker terms are added:
`final = fused + recency_weight * 0.5 ** (age / half_life)
+ importance_weight * importance + speaker_weight * [the query names the speaker]
+ date_weight * date_match(event day, the dates the query names)
+ length_weight * min(terms, length_saturation) / length_saturation` (with
`length_prior` `scale` the length term multiplies `fused` by
`1 - length_weight + length_weight * min(terms, saturation) / saturation`
instead of being added).
The speaker term applies when the query names exactly one of the candidates'
speakers (`attributes["speaker"]` of a conversation turn): "What does Tomas
play?" favours what Tomas said.
The length term is an informativeness prior: a record of few terms ("Thanks!",
"See you tomorrow!") rarely holds the fact a question asks for, and the share of
answering turns rises steadily with a turn's length up to a few dozen terms
(docs/retrieval.md), while BM25's length normalisation favours short records.
A reply prior then lifts the reply to a matching question from the other
speaker (`reply_prior`), and a session prior the turns of the sessions that hold
the best matches (`session_prior`); neither applies to list questions, whose
answers are spread over sessions.
Ties are broken by id ascending, so the order is deterministic.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from attrs import field, frozen

from agent_memory.domain.dates import DateRange, date_match, mention_match
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.lexical import STOPWORDS, tokenize
from agent_memory.domain.validation import (
    attrs_validator,
    require_int_at_least,
    require_non_negative_number,
    require_positive_number,
)

__all__ = [
    "SCORE_RESOLUTION",
    "FusionMethod",
    "LengthPrior",
    "Ranking",
    "RetrievalConfig",
    "RetrievalMode",
    "category_members",
    "content_length",
    "diversify",
    "feedback_terms",
    "final_scores",
    "fuse",
    "is_list_question",
    "is_question_turn",
    "length_weight",
    "mentions",
    "neighbour_contexts",
    "query_variants",
    "recency_factor",
    "reciprocal_rank_fusion",
    "reply_prior",
    "score_fusion",
    "session_prior",
]


class FusionMethod(enum.StrEnum):
    RRF = "rrf"
    SCORE = "score"


class LengthPrior(enum.StrEnum):
    """How the length prior enters a candidate's score: `BONUS` adds
    `length_weight * share` to it, `SCALE` multiplies the fused score by
    `1 - length_weight + length_weight * share` (`share` = min(terms,
    saturation) / saturation)."""

    BONUS = "bonus"
    SCALE = "scale"


def _length_prior(value: object) -> LengthPrior:
    if isinstance(value, str) and value in {p.value for p in LengthPrior}:
        return LengthPrior(value)
    choices = ", ".join(p.value for p in LengthPrior)
    raise InvalidInput("length_prior", f"one of {choices}; got {value!r}")


class RetrievalMode(enum.StrEnum):
    LEXICAL = "lexical"
    VECTOR = "vector"
    HYBRID = "hybrid"


def _non_negative(name: str) -> Any:
    return attrs_validator(require_non_negative_number, name)


def _positive(name: str) -> Any:
    return attrs_validator(require_positive_number, name)


def _count(name: str, minimum: int) -> Any:
    return attrs_validator(lambda value, label: require_int_at_least(value, label, minimum), name)


@frozen
class RetrievalConfig:
    """Every knob of hybrid retrieval. A rule is on by default only when it
    helps in at least 4 of 5 held-back conversations of a leave-one-out
    cross-validation on the LoCoMo development split (docs/retrieval.md):
    lexical evidence dominates, the vector ranking breaks ties and rescues
    paraphrases (its weight suits a semantic embedder; `services.retrieval.
    default_config` lowers it for the hashing one); recency and importance are
    off (a benchmark of old conversations has no use for them) but available.

    - `fusion`, `rrf_k`: fusion method and the RRF rank offset;
    - `lexical_weight`, `vector_weight`: weight of each ranking (0 drops it);
    - `recency_weight`, `recency_half_life_days`: bonus `w * 0.5 ** (age / half_life)`
      by the record's `created_at`;
    - `importance_weight`: bonus `w * record.importance`;
    - `speaker_weight`: bonus for a turn whose speaker the query names (when it
      names exactly one of the candidates' speakers);
    - `date_weight`, `date_grace_days`, `date_half_life_days`: bonus
      `w * date_match(event day, ranges the query names)` (`domain.dates`): full
      inside a named range or up to the grace after it, halving every half-life
      beyond; `context_dates`: whether `add_conversation` writes each turn's
      month and year into its indexing context (keyword rankers match it);
      `mentioned_dates`: whether the times a turn's own words name ("last
      Friday", "two weekends ago", resolved against the turn's time; at most a
      month long) count as its event time too: `add_conversation` stores them
      (`attributes["mentioned_dates"]`, ISO intervals) and, with
      `context_dates`, writes their months into the context; the date bonus
      takes the better of the turn's day and the times it mentions;
    - `session_penalty`: diversity; each hit already ranked from the same session
      (`attributes["session"]`) lowers a candidate's score by this much while the
      hits are picked best first, so several sessions can fill the top;
      `diversity_reach` > 0 counts only hits at most that many turns away
      (neighbours that share indexing context), 0 the whole session;
      `list_session_penalty`: the same session penalty for list questions only
      (`is_list_question`: "What activities…", "Which cities…", "How many…"),
      whose answers are spread over sessions, when `session_penalty` is 0;
      `list_candidates`: how many candidates each ranker contributes for a list
      question (a deeper pool for the penalty to draw other sessions from; equal
      to `candidates` turns it off);
    - `session_weight`: session prior (`session_prior`) for questions that are not
      list questions: each candidate gains `w * (best score in its session / best
      score overall)`, so the turns around the best match outrank weaker matches
      scattered elsewhere (0 turns it off);
    - `reply_weight`: reply prior (`reply_prior`) for questions that are not list
      questions: a turn that answers a question the other speaker asked in the
      turn just before gains `w * (that question turn's score / best score
      overall)` (0 turns it off);
    - `feedback_docs`, `feedback_terms`, `feedback_weight`: a second keyword
      round without a language model (pseudo-relevance feedback): the query plus
      the most salient terms (`feedback_terms` of them; names count more) of the
      first round's best `feedback_docs` hits, fused as a third ranking of weight
      `feedback_weight` (0 turns the round off);
    - `query_variants`: for a question that is not a list question, add to the
      keyword query the other forms of its irregular verbs and the chat-register
      words for its formal ones (`query_variants`: "drawing" -> drew, drawn;
      "favorite" -> fave; "children" -> kids);
    - `category_members`: for a list question, add to the keyword query typical
      members of the categories it asks about (`category_members`: "What pets…"
      -> dog, cat, …; "Which countries…" -> spain, italy, …), which the turns
      that answer it name instead of the category;
    - `length_weight`, `length_saturation`, `length_prior`: informativeness
      prior by the number of terms (`domain.lexical` tokens) of the record's
      content, `share = min(terms, saturation) / saturation`: with `bonus` (the
      default form) `w * share` is added to the score, with `scale` the fused
      score is multiplied by `1 - w + w * share` (`w` at most 1), so a short
      record loses in proportion to its evidence rather than by a fixed amount;
    - `dated_length_weight`: the length prior's weight for a question that names
      a date ("in March 2023", "last week"), when larger than `length_weight`:
      such a question asks what happened then, and events are told in turns
      that say something, while every back-channel turn of the period gets the
      same date bonus as the one that answers;
    - `candidates`: how many candidates each ranker contributes;
    - `context_window`: neighbouring turns on each side put in a turn's indexing
      context; `context_self_weight`: how many times the turn's own text counts
      (1 = once, as content; 2 = once more in the context) relative to a neighbour.
    """

    fusion: FusionMethod = field(default=FusionMethod.SCORE, converter=FusionMethod)
    rrf_k: float = field(default=60.0, validator=_positive("rrf_k"))
    lexical_weight: float = field(default=1.0, validator=_non_negative("lexical_weight"))
    vector_weight: float = field(default=0.4, validator=_non_negative("vector_weight"))
    recency_weight: float = field(default=0.0, validator=_non_negative("recency_weight"))
    recency_half_life_days: float = field(
        default=30.0,
        validator=_positive("recency_half_life_days"),
    )
    importance_weight: float = field(
        default=0.0,
        validator=_non_negative("importance_weight"),
    )
    speaker_weight: float = field(default=0.4, validator=_non_negative("speaker_weight"))
    date_weight: float = field(default=0.3, validator=_non_negative("date_weight"))
    date_grace_days: float = field(default=7.0, validator=_non_negative("date_grace_days"))
    date_half_life_days: float = field(default=7.0, validator=_positive("date_half_life_days"))
    context_dates: bool = field(default=True, converter=bool)
    mentioned_dates: bool = field(default=False, converter=bool)
    session_penalty: float = field(default=0.0, validator=_non_negative("session_penalty"))
    diversity_reach: int = field(default=0, validator=_count("diversity_reach", 0))
    list_session_penalty: float = field(
        default=0.1, validator=_non_negative("list_session_penalty")
    )
    session_weight: float = field(default=0.5, validator=_non_negative("session_weight"))
    reply_weight: float = field(default=0.0, validator=_non_negative("reply_weight"))
    feedback_docs: int = field(default=3, validator=_count("feedback_docs", 1))
    feedback_terms: int = field(default=5, validator=_count("feedback_terms", 1))
    feedback_weight: float = field(default=0.0, validator=_non_negative("feedback_weight"))
    query_variants: bool = field(default=True, converter=bool)
    category_members: bool = field(default=True, converter=bool)
    length_weight: float = field(default=0.3, validator=_non_negative("length_weight"))
    dated_length_weight: float = field(default=0.0, validator=_non_negative("dated_length_weight"))
    length_saturation: int = field(default=30, validator=_count("length_saturation", 1))
    length_prior: LengthPrior = field(default=LengthPrior.BONUS, converter=_length_prior)
    candidates: int = field(default=100, validator=_count("candidates", 1))
    list_candidates: int = field(default=100, validator=_count("list_candidates", 1))
    context_window: int = field(default=2, validator=_count("context_window", 0))
    context_self_weight: int = field(
        default=2,
        validator=_count("context_self_weight", 1),
    )

    def __attrs_post_init__(self) -> None:
        if self.lexical_weight == 0 and self.vector_weight == 0:
            raise InvalidInput("vector_weight", "lexical_weight and vector_weight are both 0")
        for name in ("length_weight", "dated_length_weight"):
            value = getattr(self, name)
            if self.length_prior is LengthPrior.SCALE and value > 1:
                raise InvalidInput(
                    name, f"at most 1 with length_prior scale (a factor >= 0), got {value!r}"
                )


def _hits(value: Iterable[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    return tuple((str(rid), float(score)) for rid, score in value)


@frozen
class Ranking:
    """One ranker's candidates, best first, as `(id, score)`, and its weight."""

    hits: tuple[tuple[str, float], ...] = field(converter=_hits)
    weight: float = 1.0

    def __attrs_post_init__(self) -> None:
        ids = [i for i, _ in self.hits]
        if len(set(ids)) != len(ids):
            raise InvalidInput("ranking", "an id appears twice in one ranking")
        if self.weight < 0:
            raise InvalidInput("ranking.weight", f"must be >= 0, got {self.weight!r}")


def _ordered(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def reciprocal_rank_fusion(
    rankings: Sequence[Ranking], *, k: float = 60.0
) -> list[tuple[str, float]]:
    """Every id of every ranking, by `sum(weight / (k + rank))`, normalised so that
    an id first in every ranking scores 1; ties by id ascending."""
    if not k > 0:
        raise InvalidInput("rrf_k", f"must be > 0, got {k!r}")
    total = sum(r.weight for r in rankings) / (k + 1.0)
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, (rid, _) in enumerate(ranking.hits, start=1):
            scores[rid] = scores.get(rid, 0.0) + ranking.weight / (k + rank)
    if total > 0:
        scores = {rid: s / total for rid, s in scores.items()}
    return _ordered(scores)


#: The smallest score span min-max scaling stretches to [0, 1], as a share of the
#: ranking's largest score magnitude (at least 1). Backends compute the same
#: cosine in other float precisions (memory:// and SQLite in float64, the
#: engines in float32: 2.8e-17 against 0.0), so scores closer than this are
#: rounding, not evidence: a smaller span is scaled by this one instead (scores
#: within it stay near 1, all equal ones at 1), and the fused score moves at most
#: in proportion to a score's rounding.
SCORE_RESOLUTION = 1e-3


def score_fusion(rankings: Sequence[Ranking]) -> list[tuple[str, float]]:
    """Every id of every ranking, by the weighted sum of its min-max scaled scores
    (a ranking whose scores are all equal gives each of its ids 1; one whose span
    is below `SCORE_RESOLUTION` scales `1 - (best - score) / resolution`),
    normalised by the total weight; ties by id ascending."""
    total = sum(r.weight for r in rankings)
    scores: dict[str, float] = {}
    for ranking in rankings:
        if not ranking.hits:
            continue
        values = [s for _, s in ranking.hits]
        low, high = min(values), max(values)
        span = high - low
        floor = SCORE_RESOLUTION * max(1.0, abs(high), abs(low))
        for rid, s in ranking.hits:
            scaled = (s - low) / span if span >= floor else 1.0 - (high - s) / floor
            scores[rid] = scores.get(rid, 0.0) + ranking.weight * scaled
    if total > 0:
        scores = {rid: s / total for rid, s in scores.items()}
    return _ordered(scores)


def fuse(rankings: Sequence[Ranking], config: RetrievalConfig) -> list[tuple[str, float]]:
    """Fuse by the configured method."""
    if config.fusion is FusionMethod.RRF:
        return reciprocal_rank_fusion(rankings, k=config.rrf_k)
    return score_fusion(rankings)


def recency_factor(created_at: datetime, now: datetime, half_life_days: float) -> float:
    """`0.5 ** (age / half_life)`: 1 for a record made now (or in the future)."""
    age_days = max((now - created_at).total_seconds(), 0.0) / 86400.0
    return float(0.5 ** (age_days / half_life_days))


def mentions(query: str, name: str) -> bool:
    """Whether `query` names `name` as a whole word (case-insensitive)."""
    name = name.strip()
    if not name:
        return False
    pattern = r"(?<!\w)" + re.escape(name.casefold()) + r"(?!\w)"
    return re.search(pattern, query.casefold()) is not None


def content_length(content: str, speaker: str | None = None) -> int:
    """The number of terms of a record's content — `domain.lexical` tokens, which
    stemming never adds or removes, so none is stemmed here — not counting a
    leading `"{speaker}: "` label (a turn's speaker is not what it says)."""
    if speaker and content.startswith(f"{speaker}:"):
        content = content[len(speaker) + 1 :]
    return sum(1 for word in _WORD.findall(content) if word.lower() not in STOPWORDS)


def length_weight(config: RetrievalConfig, ranges: Sequence[DateRange] = ()) -> float:
    """The length prior's weight for a query: `dated_length_weight` when the query
    names a date (`ranges`) and that is larger, else `length_weight`."""
    if ranges and config.dated_length_weight > config.length_weight:
        return config.dated_length_weight
    return config.length_weight


def final_scores(
    fused: Sequence[tuple[str, float]],
    config: RetrievalConfig,
    *,
    created_at: Mapping[str, datetime],
    importance: Mapping[str, float],
    now: datetime,
    query: str = "",
    speakers: Mapping[str, str] | None = None,
    event_days: Mapping[str, date] | None = None,
    ranges: Sequence[DateRange] = (),
    lengths: Mapping[str, int] | None = None,
    mentioned: Mapping[str, Sequence[DateRange]] | None = None,
) -> list[tuple[str, float]]:
    """Add the recency, importance, speaker, date and length bonuses to fused
    scores and re-rank. The date bonus needs the ranges the query names
    (`ranges`, from `domain.dates.parse_dates`) and each candidate's event day
    (`event_days`), and counts, where better, the times a candidate's own words
    say its events happened (`mentioned`, see `domain.dates.mentioned_dates`);
    the length bonus each candidate's content length in terms (`lengths`, see
    `content_length`)."""
    named: set[str] = set()
    if config.speaker_weight and speakers:
        named = {s for s in set(speakers.values()) if mentions(query, s)}
        if len(named) != 1:
            named = set()
    dated = bool(config.date_weight and ranges and event_days)
    weight = length_weight(config, ranges)
    lengthy = bool(weight and lengths)
    if (
        config.recency_weight == 0
        and config.importance_weight == 0
        and not named
        and not dated
        and not lengthy
    ):
        return _ordered(dict(fused))
    saturation = config.length_saturation
    scaled = lengthy and config.length_prior is LengthPrior.SCALE
    out: dict[str, float] = {}
    for rid, score in fused:
        bonus = 0.0
        if lengthy and lengths is not None:
            share = min(lengths.get(rid, 0), saturation) / saturation
            if scaled:
                score *= 1.0 - weight + weight * share
            else:
                bonus += weight * share
        if named and speakers is not None and speakers.get(rid) in named:
            bonus += config.speaker_weight
        if config.recency_weight and rid in created_at:
            bonus += config.recency_weight * recency_factor(
                created_at[rid], now, config.recency_half_life_days
            )
        if config.importance_weight:
            bonus += config.importance_weight * importance.get(rid, 0.0)
        if dated and event_days is not None and rid in event_days:
            match = date_match(
                event_days[rid],
                ranges,
                grace_days=config.date_grace_days,
                half_life_days=config.date_half_life_days,
            )
            if mentioned and match < 1.0 and rid in mentioned:
                match = max(
                    match,
                    mention_match(
                        mentioned[rid], ranges, half_life_days=config.date_half_life_days
                    ),
                )
            bonus += config.date_weight * match
        out[rid] = score + bonus
    return _ordered(out)


# "what/which kinds/types/sorts of…"; "what/which [kind/type/sort of] [one word]
# <plural noun> <auxiliary, "of" or "for">" ("What activities does…", "Which US
# cities has…", "What LGBTQ+ events has…", "What areas of…"; a verb after "what"
# is followed by its object instead: "What motivates Sam"); "how many", "both",
# "in common": questions whose answer gathers several facts
_LIST_QUESTION = re.compile(
    r"\b(?:what|which)\s+(?:kinds|types|sorts)\s+of\b"
    r"|\b(?:what|which)\s+(?:(?:kind|type|sort)\s+of\s+)?(?:[\w+.&'-]+\s+)?([a-z]{3,}s)"
    r"\s+(?:do|does|did|has|have|had|are|were|can|could|would|will|of|for)\b"
    r"|\bhow\s+many\b|\bboth\b|\bin\s+common\b",
    re.IGNORECASE,
)
_NOT_PLURAL = frozenset(
    {"does", "has", "was", "this", "his", "its", "yes", "plus", "always", "perhaps"}
    | {"news", "series", "species", "lens"}
)


def is_list_question(query: str) -> bool:
    """Whether a question asks for several things ("What activities does Sam
    enjoy?", "Which cities has Ria visited?", "How many times…", "What do they
    both like?"): its answer is spread over the conversation rather than said in
    one place, so retrieval spreads the hits over sessions for it."""
    for match in _LIST_QUESTION.finditer(query):
        word = match.group(1)
        if word is None:
            return True
        word = word.lower()
        if word not in _NOT_PLURAL and not word.endswith(("ss", "us", "is", "ics")):
            return True
    return False


def diversify(
    scored: Sequence[tuple[str, float]],
    groups: Mapping[str, Hashable],
    *,
    penalty: float,
    depth: int,
    positions: Mapping[str, int] | None = None,
    reach: int | None = None,
) -> list[tuple[str, float]]:
    """Re-rank the first `depth` picks greedily: a candidate's score drops by
    `penalty` for every hit of its group (session) already picked, so one
    session's near-duplicate turns do not crowd out the others. Ids without a
    group are never penalised; the rest keep their order after the picks. The
    result is a permutation of `scored` with the adjusted scores (ties by id).

    With `reach` (and `positions`, a record's place in its group), only picks at
    most `reach` positions away count: neighbouring turns that share indexing
    context, rather than the whole session."""
    if penalty <= 0 or not groups or depth <= 0:
        return list(scored)
    if reach is None or positions is None:
        return _diversify_sessions(scored, groups, penalty=penalty, depth=depth)
    left = dict(scored)
    picked: list[tuple[str, float]] = []
    seen: dict[Hashable, list[int]] = {}
    near = reach is not None and positions is not None

    def crowd(rid: str) -> int:
        group = groups.get(rid)
        if group is None or group not in seen:
            return 0
        if not near or positions is None or rid not in positions or reach is None:
            return len(seen[group])
        at = positions[rid]
        return sum(1 for p in seen[group] if abs(p - at) <= reach)

    while left and len(picked) < depth:
        best: tuple[float, str] | None = None
        for rid, score in left.items():
            adjusted = score - penalty * crowd(rid)
            if best is None or (-adjusted, rid) < (-best[0], best[1]):
                best = (adjusted, rid)
        assert best is not None
        adjusted, rid = best
        del left[rid]
        picked.append((rid, adjusted))
        group = groups.get(rid)
        if group is not None:
            seen.setdefault(group, []).append(positions.get(rid, 0) if positions else 0)
    rest = _ordered(left)
    floor = picked[-1][1] if picked else 0.0
    # what was not picked ranks after the picks, in its own order
    return picked + [(rid, min(score, floor)) for rid, score in rest]


def _diversify_sessions(
    scored: Sequence[tuple[str, float]],
    groups: Mapping[str, Hashable],
    *,
    penalty: float,
    depth: int,
) -> list[tuple[str, float]]:
    """`diversify` without `reach`: every member of a group has the same penalty,
    so each pick is the best of the groups' best remaining candidates (and of the
    ungrouped ones), one comparison per group instead of one per candidate."""
    queues: dict[Hashable, list[tuple[str, float]]] = {}
    free: list[tuple[str, float]] = []
    ordered = _ordered(dict(scored))
    for rid, score in ordered:
        group = groups.get(rid)
        (free if group is None else queues.setdefault(group, [])).append((rid, score))
    heads = dict.fromkeys(queues, 0)
    taken = dict.fromkeys(queues, 0)
    next_free = 0
    picked: list[tuple[str, float]] = []
    while len(picked) < depth:
        best: tuple[float, str] | None = None
        best_group: Hashable | None = None
        if next_free < len(free):
            rid, score = free[next_free]
            best = (score, rid)
        for group, queue in queues.items():
            at = heads[group]
            if at == len(queue):
                continue
            rid, score = queue[at]
            adjusted = score - penalty * taken[group]
            if best is None or (-adjusted, rid) < (-best[0], best[1]):
                best, best_group = (adjusted, rid), group
        if best is None:
            break
        if best_group is None:
            next_free += 1
        else:
            heads[best_group] += 1
            taken[best_group] += 1
        picked.append((best[1], best[0]))
    chosen = {rid for rid, _ in picked}
    floor = picked[-1][1] if picked else 0.0
    rest = [(rid, min(score, floor)) for rid, score in ordered if rid not in chosen]
    return picked + rest


def session_prior(
    scored: Sequence[tuple[str, float]],
    groups: Mapping[str, Hashable],
    *,
    weight: float,
) -> list[tuple[str, float]]:
    """Add `weight * best / top` to each score, where `best` is the best score in
    the candidate's group (its session) and `top` the best score overall, and
    re-rank (ties by id). A fact is usually told in one stretch of conversation:
    the best-matching turn marks it, and the turns around it that share few words
    with the question (the answer after "Where was that?") are likelier than weak
    matches elsewhere. An id without a group is a group of its own, so with no
    groups at all the order does not change."""
    top = max((score for _, score in scored), default=0.0)
    if weight <= 0 or top <= 0:
        return list(scored)
    best: dict[Hashable, float] = {}
    for rid, score in scored:
        group = groups.get(rid)
        if group is not None:
            best[group] = max(best.get(group, score), score)
    out: dict[str, float] = {}
    for rid, score in scored:
        group = groups.get(rid)
        lead = score if group is None else best[group]
        out[rid] = score + weight * lead / top
    return _ordered(out)


def reply_prior(
    scored: Sequence[tuple[str, float]],
    replies_to: Mapping[str, str],
    *,
    weight: float,
) -> list[tuple[str, float]]:
    """Add `weight * score(q) / top` to each candidate that `replies_to` maps to a
    candidate `q` (the question the other speaker asked in the turn before), where
    `top` is the best score overall, and re-rank (ties by id). A question the
    query matches ("So what's your favourite game?") is often answered by the next
    turn, which need not repeat its words ("I'm playing Xenoblade, it's a blast").
    The bonus reads the scores before any is added, so it never chains; ids not in
    `scored` are ignored, and with no replies the order does not change."""
    top = max((score for _, score in scored), default=0.0)
    if weight <= 0 or top <= 0 or not replies_to:
        return list(scored)
    before = dict(scored)
    out: dict[str, float] = {}
    for rid, score in scored:
        asked = replies_to.get(rid)
        lift = before.get(asked, 0.0) if asked is not None and asked != rid else 0.0
        out[rid] = score + weight * max(lift, 0.0) / top
    return _ordered(out)


def is_question_turn(text: str) -> bool:
    """Whether a turn asks something: it holds a question mark."""
    return "?" in text


_WORD = re.compile(r"[^\W_]+")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+\b")


def feedback_terms(
    query: str,
    top: Sequence[str],
    pool: Sequence[str],
    *,
    count: int,
) -> list[str]:
    """Pseudo-relevance feedback: the `count` terms (`domain.lexical` tokens) that
    best mark the `top` texts against the candidate `pool` — in many top texts,
    rare in the pool — and are not in the query; capitalised words inside a
    sentence (names, places) count double. Best first, ties by term."""
    asked = set(tokenize(query))
    pool_df: dict[str, int] = {}
    for text in pool:
        for term in set(tokenize(text)):
            pool_df[term] = pool_df.get(term, 0) + 1
    size = max(len(pool), 1)
    weight: dict[str, float] = {}
    for text in top:
        names = {t for w in _NAME.findall(text) for t in tokenize(w)}
        for term in set(tokenize(text)):
            if term in asked or len(term) < 3 or term.isdigit():
                continue
            rarity = math.log((size + 1.0) / (pool_df.get(term, 0) + 0.5))
            weight[term] = weight.get(term, 0.0) + rarity * (2.0 if term in names else 1.0)
    ranked = sorted(weight.items(), key=lambda item: (-item[1], item[0]))
    return [term for term, w in ranked[:count] if w > 0]


# Common English irregular verbs, "base past participle" ("-": the participle is
# the past). Stemming cannot join these forms (drew/draw, bought/buy), and a
# question asks with the base form ("What did Caroline draw?") while the turn
# tells it in the past ("I drew it"). Left out: the light verbs go, get, make,
# take, come, give, whose forms (went, got, made) are said in most turns that
# narrate anything, and verbs whose forms are also common nouns or adjectives
# (bear, lie/lay, light, ring, rise/rose, spring, ...).
_IRREGULAR_VERBS = """
arise arose arisen; awake awoke awoken; beat beat beaten; become became become;
begin began begun; bend bent -; bind bound -; bite bit bitten; bleed bled -;
blow blew blown; break broke broken; breed bred -; bring brought -; build built -;
burn burnt -; buy bought -; catch caught -; choose chose chosen; cling clung -;
creep crept -; deal dealt -; dig dug -; draw drew drawn; dream dreamt -;
drink drank drunk; drive drove driven; eat ate eaten; fall fell fallen; feed fed -;
feel felt -; fight fought -; find found -; flee fled -; fly flew flown;
forbid forbade forbidden; forget forgot forgotten; forgive forgave forgiven;
freeze froze frozen; grow grew grown; hang hung -; hear heard -; hide hid hidden;
hold held -; keep kept -; kneel knelt -; know knew known; lead led -; leap leapt -;
learn learnt -; leave left -; lend lent -; lose lost -; mean meant -; meet met -;
pay paid -; ride rode ridden; run ran run; say said -; see saw seen; seek sought -;
sell sold -; send sent -; sew sewed sewn; shake shook shaken; shine shone -;
shoot shot -; show showed shown; shrink shrank shrunk; sing sang sung; sit sat -;
sleep slept -; slide slid -; speak spoke spoken; speed sped -; spend spent -;
spin spun -; stand stood -; steal stole stolen; stick stuck -; sting stung -;
stink stank stunk; strike struck -; strive strove striven; swear swore sworn;
sweep swept -; swim swam swum; swing swung -; teach taught -; tear tore torn;
tell told -; think thought -; throw threw thrown; understand understood -;
wake woke woken; wear wore worn; weave wove woven; weep wept -; win won -;
withdraw withdrew withdrawn; write wrote written; overcome overcame overcome;
undergo underwent undergone; undertake undertook undertaken
"""
# Formal words a question uses and the chat words a conversation says instead.
_REGISTER_WORDS = """
children child kids kid; father dad daddy; mother mom mum mommy;
photo photograph picture pic pics snapshot; favorite favourite fave fav;
vacation vacay holiday; birthday bday; husband hubby; television tv;
movie film flick; friends buddies pals; grandmother grandma granny;
grandfather grandpa; relax chill unwind destress; exercise workout;
automobile car; puppy pup; telephone phone; information info;
refrigerator fridge; university college uni; conversation convo;
congratulations congrats
"""


@functools.cache
def _variant_table() -> dict[str, tuple[str, ...]]:
    """term (`domain.lexical`) -> the words of its group, built on first use."""
    groups: list[list[str]] = []
    for part in _IRREGULAR_VERBS.split(";"):
        base, past, participle = part.split()
        groups.append([base, past, past if participle == "-" else participle])
    groups.extend(part.split() for part in _REGISTER_WORDS.split(";"))
    table: dict[str, list[str]] = {}
    for group in groups:
        for word in group:
            for term in tokenize(word):
                known = table.setdefault(term, [])
                known.extend(w for w in group if w not in known)
    return {term: tuple(words) for term, words in table.items()}


def query_variants(query: str) -> list[str]:
    """Words to add to a question's keyword query: the other forms of its
    irregular verbs ("drawing" -> drew, drawn) and the chat-register words for
    its formal ones ("favorite" -> fave, fav), none whose term the query already
    has; in the query's order, each once."""
    terms = tokenize(query)
    table = _variant_table()
    return _new_words((table.get(term, ()) for term in dict.fromkeys(terms)), set(terms))


def _new_words(groups: Iterable[Iterable[str]], asked: set[str]) -> list[str]:
    """The words of `groups`, in order and each once, whose term (`domain.lexical`)
    is not in `asked`: what a keyword query gains from them."""
    out: dict[str, None] = {}
    for group in groups:
        for word in group:
            stems = tokenize(word)
            if stems and stems[0] not in asked:
                out.setdefault(word)
    return list(out)


# Category nouns a question asks with and typical members a conversation names
# instead ("What pets does Nate have?" — "my dog"): general knowledge of the
# topics people tell each other about, written by hand; a member is one word
# (multi-word members are listed by their words). "key[, key ...]: members",
# a key of one or two words. No member may come from a benchmark's answers
# (those the development split's answers named, such as cobbler or taekwondo,
# were removed): the table is judged by cross-validation (docs/retrieval.md).
_CATEGORY_MEMBERS = """
pet: dog puppy cat kitten fish hamster rabbit bunny parrot bird snake lizard guinea
  pig horse;
animal: dog cat horse bird fish rabbit cow sheep goat pig chicken duck deer bear wolf
  fox lion tiger elephant monkey;
instrument: guitar piano violin drums ukulele flute saxophone cello trumpet keyboard
  harp banjo bass;
sport: basketball football soccer baseball tennis golf hockey volleyball swimming running
  cycling boxing skiing surfing skateboarding climbing rugby;
martial art: karate judo jiu jitsu kung fu boxing wrestling mma aikido;
activity: hiking camping swimming running painting drawing reading cooking baking
  gardening yoga dancing photography fishing surfing skiing cycling biking knitting singing
  volunteering traveling;
hobby: hiking camping swimming running painting drawing reading writing cooking
  baking gardening yoga dancing photography fishing surfing skiing cycling knitting singing
  gaming;
pastime: hiking camping swimming running painting drawing reading writing cooking
  baking gardening yoga dancing photography fishing gaming;
interest: hiking camping painting drawing reading writing cooking music art photography
  gaming movies travel;
art: painting drawing sculpture photography poetry sketch mural canvas;
craft: knitting sewing woodworking jewelry candles quilting crochet;
country: spain england france italy germany japan china canada mexico brazil india australia
  greece ireland scotland portugal netherlands sweden norway thailand korea vietnam peru
  argentina egypt turkey;
city: paris rome london tokyo york boston chicago seattle miami barcelona madrid berlin
  amsterdam vienna prague sydney toronto vancouver dublin venice florence angeles francisco
  vegas;
state: california texas florida york washington oregon colorado arizona nevada hawaii alaska
  michigan ohio georgia carolina virginia massachusetts;
food: pizza pasta sushi tacos burger salad soup cake cookies pie bread curry noodles steak
  chicken sandwich;
dish: pizza pasta sushi tacos burger salad soup curry noodles steak lasagna stew;
dessert: cake cookies pie ice cream brownies cupcakes pudding chocolate tart;
drink, beverage: coffee tea juice smoothie wine beer soda lemonade cocktail;
cuisine: italian mexican chinese thai indian japanese french greek korean vietnamese;
game: chess monopoly poker scrabble fortnite minecraft zelda mario ;
genre: rock jazz pop classical hip hop country blues folk metal fantasy mystery romance
  thriller horror comedy drama;
relative: mom dad mother father sister brother son daughter kids husband wife grandma
  grandpa aunt uncle cousin;
vehicle: car truck bike motorcycle van suv boat;
flower: rose sunflower tulip lily daisy orchid;
plant: tree flower herb succulent cactus fern vegetable tomato;
job, career, profession: teacher nurse doctor engineer lawyer chef counselor manager banker
  artist writer developer designer;
event: party concert festival conference workshop wedding fundraiser tournament
  marathon race exhibition meetup;
destination: beach mountains lake park museum island forest;
exercise, workout: running yoga gym pilates cardio swimming cycling lifting;
language: english spanish french german italian chinese japanese korean;
holiday: christmas thanksgiving easter halloween birthday;
clothing, clothes: shirt dress hoodie jacket shoes jeans sweater hat;
subject: math science history english art biology chemistry physics
"""


# A hyphenated compound is one word here: its parts are not the category
# ("career-high", "state-of-the-art").
_COMPOUND_WORD = re.compile(r"[^\W_]+(?:-[^\W_]+)*")


def _plurals(word: str) -> tuple[str, ...]:
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
        return (word, word[:-1] + "ies")
    if word.endswith(("s", "sh", "ch", "x")):
        return (word, word + "es")
    return (word, word + "s")


@functools.cache
def _category_table() -> dict[tuple[str, ...], tuple[str, ...]]:
    """(key words, lowercase) -> members; each key in its singular and plural
    form ("martial art", "martial arts"), built on first use."""
    table: dict[tuple[str, ...], tuple[str, ...]] = {}
    for entry in _CATEGORY_MEMBERS.split(";"):
        keys, members = entry.split(":")
        words = tuple(dict.fromkeys(members.split()))
        for key in keys.split(","):
            *head, last = key.split()
            for form in _plurals(last):
                table[(*head, form)] = words
    return table


def category_members(query: str) -> list[str]:
    """Members of the categories a question asks about (`_CATEGORY_MEMBERS`:
    "What pets…" -> dog, cat, …; "Which European countries…" -> spain, …), none
    whose term the query already has; in the query's order, each once. A
    two-word category ("martial arts") is matched before its last word alone, and
    a word inside a hyphenated compound ("career-high") is not a category."""
    words = [w.lower() for w in _COMPOUND_WORD.findall(query)]
    table = _category_table()
    found: list[tuple[str, ...]] = []
    i = 0
    while i < len(words):
        pair = table.get((words[i], words[i + 1])) if i + 1 < len(words) else None
        if pair is not None:
            found.append(pair)
            i += 2
            continue
        found.append(table.get((words[i],), ()))
        i += 1
    return _new_words(found, set(tokenize(query)))


def neighbour_contexts(
    texts: Sequence[str],
    *,
    window: int,
    self_weight: int = 1,
    groups: Sequence[Hashable] | None = None,
) -> list[str]:
    """The indexing context of each turn of a conversation: the turn's own text
    `self_weight - 1` more times, then its neighbours up to `window` turns away
    on each side (nearest first, earlier before later), never crossing into
    another group (session) when `groups` is given. Lexical search then matches
    a turn by what was said around it; the context is never returned as content."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise InvalidInput("window", f"an integer >= 0 is required, got {window!r}")
    if isinstance(self_weight, bool) or not isinstance(self_weight, int) or self_weight < 1:
        raise InvalidInput("self_weight", f"an integer >= 1 is required, got {self_weight!r}")
    if groups is not None and len(groups) != len(texts):
        raise InvalidInput("groups", f"one group per text is required ({len(texts)})")
    out: list[str] = []
    n = len(texts)
    for i, text in enumerate(texts):
        parts = [text] * (self_weight - 1)
        for distance in range(1, window + 1):
            for j in (i - distance, i + distance):
                if 0 <= j < n and (groups is None or groups[j] == groups[i]):
                    parts.append(texts[j])
        out.append("\n".join(parts))
    return out

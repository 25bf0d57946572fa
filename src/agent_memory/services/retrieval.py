"""Hybrid retrieval over a `MemoryStore`: lexical and vector rankings fused.

The lexical ranking comes from the store's optional `KeywordSearch` capability
(BM25 over content and indexing context, filters inside the query); the vector
ranking from `MemoryStore.search` with the query embedded by the `Embedder`.
When the store has no keyword search, hybrid retrieval falls back to the vector
ranking and says so (`Retrieval.fallback`); asking for lexical-only retrieval
there raises `UnsupportedBackend`.

`add_conversation` indexes a conversation the way retrieval expects it: one
record per turn, the neighbouring turns (same session) as indexing context.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from attrs import field, frozen

from agent_memory.domain.dates import (
    DateRange,
    event_time_words,
    format_ranges,
    mentioned_dates,
    parse_ranges,
    question_spans,
    range_words,
)
from agent_memory.domain.errors import InvalidInput, UnsupportedBackend
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, ScoredRecord
from agent_memory.domain.retrieval import (
    Ranking,
    RetrievalConfig,
    RetrievalMode,
    category_members,
    content_length,
    diversify,
    feedback_terms,
    final_scores,
    fuse,
    is_list_question,
    is_question_turn,
    length_weight,
    neighbour_contexts,
    query_variants,
    reply_prior,
    session_prior,
)
from agent_memory.domain.time import SystemClock
from agent_memory.domain.validation import (
    MAX_QUERY_BYTES,
    require_positive,
    require_scope,
    require_text,
)
from agent_memory.ports.models import Clock, Embedder
from agent_memory.ports.storage import KeywordSearch, MemoryStore

__all__ = ["ConversationTurn", "HybridRetriever", "Retrieval", "default_config"]

#: the model prefix of the dependency-free hashing embedder's spaces
_HASHING_MODEL = "agent-memory/hashing"


#: the vector weight for the hashing embedder's vectors, weaker than a model's
HASHING_VECTOR_WEIGHT = 0.2

#: the length prior's weight with a semantic embedder's vectors (the largest on a
#: 0.1 grid whose "length prior" row passes the fold rule with MiniLM)
SEMANTIC_LENGTH_WEIGHT = 0.2

#: the reply prior's weight with a semantic embedder's vectors
SEMANTIC_REPLY_WEIGHT = 0.05


def default_config(space: EmbeddingSpace) -> RetrievalConfig:
    """The default configuration for vectors of `space`, each knob kept only when
    leave-one-conversation-out cross-validation with that embedder says it helps
    in at least 4 of 5 held-back conversations and on average (docs/retrieval.md):
    for the hashing embedder, whose vectors only break ties, `RetrievalConfig()`
    with the smaller `HASHING_VECTOR_WEIGHT`; for a semantic embedder (MiniLM),
    vector weight 0.4 with `SEMANTIC_LENGTH_WEIGHT`, the reply prior on
    (`SEMANTIC_REPLY_WEIGHT`) and the list-session penalty off. With MiniLM the
    length prior at the hashing embedder's 0.3 helps in only 3 of 5 folds, at 0.2
    in 4; the list-session penalty helps in 2."""
    if space.model.startswith(_HASHING_MODEL):
        return RetrievalConfig(vector_weight=HASHING_VECTOR_WEIGHT)
    return RetrievalConfig(
        length_weight=SEMANTIC_LENGTH_WEIGHT,
        reply_weight=SEMANTIC_REPLY_WEIGHT,
        list_session_penalty=0.0,
    )


@frozen
class ConversationTurn:
    """One turn of a conversation, to be stored as one record.

    `session` groups turns: neighbouring-turn context never crosses sessions.
    """

    id: str
    speaker: str
    text: str
    at: datetime
    session: str = "1"
    attributes: Mapping[str, Any] = field(factory=dict)

    @property
    def content(self) -> str:
        return f"{self.speaker}: {self.text}"


@frozen
class Retrieval:
    """The hits, best first, with the fused score; `mode` is the mode actually
    used; `fallback` explains a downgrade (None when none happened)."""

    hits: tuple[ScoredRecord, ...]
    mode: RetrievalMode
    fallback: str | None = None


class HybridRetriever:
    """Lexical + vector retrieval fused by `RetrievalConfig` (without one, the
    `default_config` of the embedder's space)."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: RetrievalConfig | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        if embedder.space.dimension != store.space.dimension:
            raise InvalidInput(
                "embedder",
                f"dimension {embedder.space.dimension} does not match the store's "
                f"{store.space.dimension}",
            )
        self._store = store
        self._embedder = embedder
        self._config = config if config is not None else default_config(embedder.space)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._keyword: KeywordSearch | None = store if isinstance(store, KeywordSearch) else None

    @property
    def config(self) -> RetrievalConfig:
        return self._config

    @property
    def lexical_available(self) -> bool:
        """Whether the store offers keyword search."""
        return self._keyword is not None

    async def add_conversation(
        self,
        owner: str,
        turns: Sequence[ConversationTurn],
        *,
        namespace: str = "conversation",
        kind: str = "turn",
        batch_size: int = 256,
    ) -> list[MemoryRecord]:
        """Store each turn as one record (content `"{speaker}: {text}"`, the turn's
        attributes plus `speaker`, `session`, `turn` (its index in `turns`), `conversation`
        (the id of the first of `turns`: turns added by one call are adjacent, those
        of two calls are not) and `terms` (its length in terms, for the length prior),
        created at
        the turn's time) with its neighbouring turns as indexing context, ended by the
        turn's month and year when `context_dates` is on; the records, in turn order."""
        require_scope(owner, "owner")
        require_positive(batch_size, "batch_size")
        contents = [t.content for t in turns]
        contexts = neighbour_contexts(
            contents,
            window=self._config.context_window,
            self_weight=self._config.context_self_weight,
            groups=[t.session for t in turns],
        )
        mentioned = [
            mentioned_dates(t.text, t.at) if self._config.mentioned_dates else () for t in turns
        ]
        if self._config.context_dates:
            contexts = [
                _date_context(c, t.at, m)
                for c, t, m in zip(contexts, turns, mentioned, strict=True)
            ]
        records: list[MemoryRecord] = []
        # turn indexes count from 0 in every call: the first turn's id tells
        # this call's turns from those of another call on the same session
        conversation = turns[0].id if turns else ""
        for start in range(0, len(turns), batch_size):
            chunk = turns[start : start + batch_size]
            vectors = await self._embedder.embed(contents[start : start + batch_size])
            batch = [
                MemoryRecord(
                    id=turn.id,
                    owner=owner,
                    namespace=namespace,
                    kind=kind,
                    content=contents[start + offset],
                    vector=vectors[offset],
                    created_at=turn.at,
                    updated_at=turn.at,
                    attributes={
                        **turn.attributes,
                        "speaker": turn.speaker,
                        "session": turn.session,
                        "turn": start + offset,
                        "conversation": conversation,
                        "terms": content_length(contents[start + offset], turn.speaker),
                        **(
                            {"mentioned_dates": format_ranges(mentioned[start + offset])}
                            if mentioned[start + offset]
                            else {}
                        ),
                    },
                    context=contexts[start + offset],
                )
                for offset, turn in enumerate(chunk)
            ]
            await self._store.add(batch)
            records.extend(batch)
        return records

    async def retrieve(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        mode: RetrievalMode | str = RetrievalMode.HYBRID,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        reference: datetime | date | None = None,
    ) -> Retrieval:
        """The best `limit` records for `query`, by the requested mode.

        `reference` is when the question is asked (default: the clock's now): the
        dates the query names ("last week", "in May") resolve against it."""
        require_scope(owner, "owner")
        require_positive(limit, "limit")
        require_text(query, "query")
        try:
            wanted = RetrievalMode(mode)
        except ValueError:
            raise InvalidInput("mode", f"one of lexical, vector, hybrid; got {mode!r}") from None
        config = self._config
        listing = is_list_question(query)
        depth = max(config.list_candidates if listing else config.candidates, limit)
        fallback: str | None = None
        if wanted is not RetrievalMode.VECTOR and self._keyword is None:
            if wanted is RetrievalMode.LEXICAL:
                raise UnsupportedBackend(
                    "lexical retrieval needs a store with keyword search (KeywordSearch)"
                )
            fallback = "the store has no keyword search: vector ranking only"
            wanted = RetrievalMode.VECTOR
        if wanted is RetrievalMode.HYBRID and config.vector_weight == 0:
            wanted = RetrievalMode.LEXICAL
        elif wanted is RetrievalMode.HYBRID and config.lexical_weight == 0:
            wanted = RetrievalMode.VECTOR

        now = self._clock.now()
        spans = question_spans(query, reference if reference is not None else now.date())
        ranges = tuple(dict.fromkeys(r for _, r in spans))
        lexical: list[ScoredRecord] = []
        vector: list[ScoredRecord] = []
        # "as of <date>" asks for the state then, which was told before it, and
        # "since <date>" for what happened from then on: the date's words would
        # match what was said in that month or year (later turns included, or
        # earlier ones left out), so they leave the keyword query (the date
        # bonus reads it)
        keywords = _without(query, [span for span, r in spans if r.open])
        # the query's embedding (a model's forward pass, off the event loop)
        # runs while the keyword search does
        embedding = (
            asyncio.ensure_future(self._embedder.embed([query]))
            if wanted is not RetrievalMode.LEXICAL
            else None
        )
        try:
            if wanted is not RetrievalMode.VECTOR and self._keyword is not None:
                if ranges and config.context_dates:
                    words = [range_words(r) for r in ranges if not r.open]
                    keywords = _extended(keywords, words)
                if config.query_variants and not listing:
                    keywords = _extended(keywords, query_variants(query))
                if config.category_members and listing:
                    keywords = _extended(keywords, category_members(query))
                lexical = await self._keyword.search_text(
                    owner, keywords, limit=depth, namespace=namespace, kinds=kinds
                )
        except BaseException:
            if embedding is not None:
                embedding.cancel()
                with contextlib.suppress(BaseException):
                    await embedding
            raise
        if embedding is not None:
            embedded = await embedding
            vector = await self._store.search(
                owner, embedded[0], limit=depth, namespace=namespace, kinds=kinds
            )

        if wanted is RetrievalMode.LEXICAL:
            rankings = [_ranking(lexical, 1.0)]
        elif wanted is RetrievalMode.VECTOR:
            rankings = [_ranking(vector, 1.0)]
        else:
            rankings = [
                _ranking(lexical, config.lexical_weight),
                _ranking(vector, config.vector_weight),
            ]
        by_id = {hit.record.id: hit.record for hit in (*lexical, *vector)}
        fused = fuse(rankings, config)
        if (
            config.feedback_weight
            and wanted is not RetrievalMode.VECTOR
            and self._keyword is not None
            and fused
        ):
            expansion = feedback_terms(
                query,
                [by_id[rid].content for rid, _ in fused[: config.feedback_docs]],
                [r.content for r in by_id.values()],
                count=config.feedback_terms,
            )
            second_query = " ".join([keywords, *expansion])
            if expansion and len(second_query.encode()) <= MAX_QUERY_BYTES:
                second = await self._keyword.search_text(
                    owner, second_query, limit=depth, namespace=namespace, kinds=kinds
                )
                by_id.update({hit.record.id: hit.record for hit in second})
                fused = fuse([*rankings, _ranking(second, config.feedback_weight)], config)
        scored = final_scores(
            fused,
            config,
            created_at={rid: r.created_at for rid, r in by_id.items()},
            importance={rid: r.importance for rid, r in by_id.items()},
            now=now,
            query=query,
            speakers={
                rid: r.attributes["speaker"]
                for rid, r in by_id.items()
                if isinstance(r.attributes.get("speaker"), str)
            },
            event_days={rid: r.created_at.date() for rid, r in by_id.items()},
            ranges=ranges,
            lengths=(
                {rid: _length(r) for rid, r in by_id.items()}
                if length_weight(config, ranges)
                else None
            ),
            mentioned=(
                {
                    rid: found
                    for rid, r in by_id.items()
                    if (found := parse_ranges(r.attributes.get("mentioned_dates")))
                }
                if config.mentioned_dates and ranges
                else None
            ),
        )
        sessions = {
            rid: r.attributes["session"]
            for rid, r in by_id.items()
            if isinstance(r.attributes.get("session"), str | int)
        }
        if config.reply_weight and not listing:
            scored = reply_prior(scored, _replies(by_id), weight=config.reply_weight)
        if config.session_weight and not listing:
            scored = session_prior(scored, sessions, weight=config.session_weight)
        penalty = config.session_penalty
        if not penalty and config.list_session_penalty and listing:
            penalty = config.list_session_penalty
        if penalty:
            scored = diversify(
                scored,
                sessions,
                penalty=penalty,
                depth=limit,
                positions={
                    rid: r.attributes["turn"]
                    for rid, r in by_id.items()
                    if isinstance(r.attributes.get("turn"), int)
                },
                reach=config.diversity_reach or None,
            )
        hits = tuple(ScoredRecord(record=by_id[rid], score=s) for rid, s in scored[:limit])
        return Retrieval(hits=hits, mode=wanted, fallback=fallback)


def _date_context(context: str, at: datetime, mentioned: Sequence[DateRange]) -> str:
    """The indexing context ended by the turn's month and year and, after them,
    the months of the times its words mention that differ ("March 2023" for "last
    month" said in April)."""
    words = [event_time_words(at)]
    for r in mentioned:
        for day in (r.start, r.end):
            word = event_time_words(day)
            if word not in words:
                words.append(word)
    return f"{context}\n{' '.join(words)}"


def _extended(keywords: str, words: Sequence[str]) -> str:
    """`keywords` with `words` added, unless that would pass the query size limit."""
    longer = " ".join([keywords, *words])
    return longer if words and len(longer.encode()) <= MAX_QUERY_BYTES else keywords


def _without(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """`text` with the `spans` cut out (the query itself when nothing is left)."""
    if not spans:
        return text
    kept, at = [], 0
    for start, end in sorted(spans):
        kept.append(text[at:start])
        at = max(at, end)
    kept.append(text[at:])
    out = " ".join(" ".join(kept).split())
    return out if out.strip(" ?.!,") else text


def _length(record: MemoryRecord) -> int:
    """The content's length in terms: the `terms` attribute `add_conversation`
    stores, else counted now."""
    stored = record.attributes.get("terms")
    if isinstance(stored, int) and not isinstance(stored, bool) and stored >= 0:
        return stored
    speaker = record.attributes.get("speaker")
    return content_length(record.content, speaker if isinstance(speaker, str) else None)


def _replies(records: Mapping[str, MemoryRecord]) -> dict[str, str]:
    """Candidate id -> the candidate it replies to: the turn just before it in the
    same session and `add_conversation` call (`session`, `conversation` and
    `turn` attributes), said by another speaker, that asks a question."""
    at: dict[tuple[str | int, str | None, int], str] = {}
    asking: list[tuple[tuple[str | int, str | None, int], str]] = []
    for rid, record in records.items():
        key = _position(record)
        if key is not None:
            at[key] = rid
            if is_question_turn(record.content):
                asking.append((key, rid))
    out: dict[str, str] = {}
    for (session, conversation, turn), asked in asking:
        reply = at.get((session, conversation, turn + 1))
        if reply is None:
            continue
        speaker = records[reply].attributes.get("speaker")
        other = records[asked].attributes.get("speaker")
        if isinstance(speaker, str) and isinstance(other, str) and speaker != other:
            out[reply] = asked
    return out


def _position(record: MemoryRecord) -> tuple[str | int, str | None, int] | None:
    """(session, conversation, turn) of a turn `add_conversation` stored; None for
    any other record. Turns stored before `conversation` existed share None."""
    attributes = record.attributes
    session = attributes.get("session")
    turn = attributes.get("turn")
    if type(turn) is not int or not (type(session) is str or type(session) is int):
        return None  # `type` rather than isinstance: True is no turn or session
    conversation = attributes.get("conversation")
    return (session, conversation if type(conversation) is str else None, turn)


def _ranking(hits: Sequence[ScoredRecord], weight: float) -> Ranking:
    return Ranking(hits=tuple((h.record.id, h.score) for h in hits), weight=weight)

"""Keyword terms as the Qdrant payload keeps them, and BM25 over candidates.

A point stores its record's keyword terms by the domain's rules
(`domain.lexical.tokenize` of content + context: stopwords dropped, stemmed,
the rule every backend uses): the distinct terms (`terms`, a keyword-indexed
array that `MatchAny` selects candidates from inside the query), each term's
count in the same order (`term_counts`), the length in terms (`token_count`),
and the `domain.lexical.LEXICAL_VERSION` they were derived with (`lexical`).
Ranking is the domain's Okapi BM25 with statistics over the owner's filtered
records only, so another owner's data never changes a score.

`domain.lexical` is read at call time (not bound at import), so a store always
derives terms with the rules its version marker names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent_memory.domain import lexical

__all__ = ["bm25_scores", "current_version", "query_terms", "record_terms"]


def current_version() -> str:
    """The `domain.lexical.LEXICAL_VERSION` new terms are derived with."""
    return lexical.LEXICAL_VERSION


def record_terms(content: str, context: str) -> tuple[list[str], list[int], int]:
    """(distinct terms in first-seen order, their counts, length in terms) of a
    record: `domain.lexical.tokenize` of content + context.

    It runs once per record on every write, so it counts with a plain dict
    (`Counter`'s own overhead was half the cost on short texts; the result is
    the same, which tests check) and skips the join when there is no context
    (a line break is no part of any term)."""
    tokens = lexical.tokenize(f"{content}\n{context}" if context else content)
    counts: dict[str, int] = {}
    get = counts.get
    for token in tokens:
        counts[token] = get(token, 0) + 1
    return list(counts), list(counts.values()), len(tokens)


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query (`domain.lexical.query_terms`)."""
    return lexical.query_terms(query)


def bm25_scores(
    terms: Sequence[str],
    candidates: Sequence[tuple[Mapping[str, int], int]],
    *,
    total_docs: int,
    total_length: int,
) -> list[float]:
    """BM25 score of each candidate (term counts, length) for `terms`, by the
    domain's formula (`domain.lexical.bm25_scores`).

    `total_docs` and `total_length` describe the whole filtered corpus; the
    document frequency of a term is the number of candidates holding it (every
    document holding a query term is a candidate).
    """
    if total_docs <= 0 or not candidates:
        return [0.0] * len(candidates)
    doc_freq = {term: sum(1 for counts, _ in candidates if term in counts) for term in terms}
    return lexical.bm25_scores(
        terms,
        candidates,
        total_docs=total_docs,
        avg_length=total_length / total_docs,
        doc_freq=doc_freq,
    )

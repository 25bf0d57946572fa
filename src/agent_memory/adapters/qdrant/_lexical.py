"""BM25 over the candidates Qdrant's full-text index selects.

Qdrant's text index answers "which of this owner's points hold one of these
words" inside the query (owner and filters applied there too); the ranking is
the domain's Okapi BM25 (`domain.lexical`), with statistics (document count,
average length, document frequencies) over the owner's filtered records only,
so another owner's data never changes a score. The tokenizer mirrors Qdrant's default
`word` tokenizer with lowercasing: runs of letters and digits.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from agent_memory.domain.lexical import bm25_scores as domain_bm25_scores

__all__ = ["bm25_scores", "count_tokens", "query_terms", "tokenize"]

_WORD = re.compile(r"[^\W_]+")
# The same runs in ASCII text, where they are exactly these (matched faster).
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits (Qdrant's `word` tokenizer)."""
    return [token.lower() for token in _WORD.findall(text)]


def count_tokens(text: str) -> int:
    """`len(tokenize(text))`, without building the lowercased tokens."""
    if not text:
        return 0
    return len((_ASCII_WORD if text.isascii() else _WORD).findall(text))


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in first-seen order (a repeat counts once)."""
    return list(dict.fromkeys(tokenize(query)))


def bm25_scores(
    terms: Sequence[str],
    candidates: Sequence[Sequence[str]],
    *,
    total_docs: int,
    total_length: int,
) -> list[float]:
    """BM25 score of each candidate (its tokens) for `terms`, by the domain's
    formula (`domain.lexical.bm25_scores`).

    `total_docs` and `total_length` describe the whole filtered corpus; the
    document frequency of a term is the number of candidates holding it (every
    document holding a query term is a candidate).
    """
    if total_docs <= 0 or not candidates:
        return [0.0] * len(candidates)
    docs = [(Counter(tokens), len(tokens)) for tokens in candidates]
    doc_freq = {term: sum(1 for counts, _ in docs if term in counts) for term in terms}
    return domain_bm25_scores(
        terms, docs, total_docs=total_docs, avg_length=total_length / total_docs, doc_freq=doc_freq
    )

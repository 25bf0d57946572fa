"""Lexical matching rules (pure): tokenisation and Okapi BM25.

Tokens are lowercased runs of letters and digits, so punctuation and query
syntax in user text never mean anything. BM25 statistics (document count,
average length, document frequencies) are computed over the caller's corpus —
one owner's filtered records — so another owner's data never changes a score.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["BM25_B", "BM25_K1", "bm25_scores", "query_terms", "term_counts", "tokenize"]

BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits."""
    return [token.lower() for token in _WORD.findall(text)]


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in first-seen order (a repeat counts once)."""
    return list(dict.fromkeys(tokenize(query)))


def bm25_scores(
    terms: Sequence[str],
    docs: Sequence[tuple[Mapping[str, int], int]],
    *,
    total_docs: int,
    avg_length: float,
    doc_freq: Mapping[str, int],
) -> list[float]:
    """BM25 score of each document, given as (term counts, length), for `terms`."""
    if total_docs <= 0:
        return [0.0] * len(docs)
    avg = max(avg_length, 1e-9)
    idf = {
        t: math.log(1.0 + (total_docs - doc_freq.get(t, 0) + 0.5) / (doc_freq.get(t, 0) + 0.5))
        for t in terms
    }
    out: list[float] = []
    for counts, length in docs:
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg)
        score = 0.0
        for term in terms:
            tf = counts.get(term, 0)
            if tf:
                score += idf[term] * tf * (BM25_K1 + 1.0) / (tf + norm)
        out.append(score)
    return out


def term_counts(text: str) -> tuple[Counter[str], int]:
    """(term counts, length in tokens) of one document."""
    tokens = tokenize(text)
    return Counter(tokens), len(tokens)

"""BM25 over the candidates Qdrant's full-text index selects.

Qdrant's text index answers "which of this owner's points hold one of these
words" inside the query (owner and filters applied there too); the ranking is
Okapi BM25 computed here, with statistics (document count, average length,
document frequencies) over the owner's filtered records only, so another
owner's data never changes a score. The tokenizer mirrors Qdrant's default
`word` tokenizer with lowercasing: runs of letters and digits.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["BM25_B", "BM25_K1", "bm25_scores", "count_tokens", "query_terms", "tokenize"]

BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits (Qdrant's `word` tokenizer)."""
    return [token.lower() for token in _WORD.findall(text)]


def count_tokens(text: str) -> int:
    """`len(tokenize(text))`, without building the lowercased tokens."""
    return len(_WORD.findall(text)) if text else 0


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
    """BM25 score of each candidate (its tokens) for `terms`.

    `total_docs` and `total_length` describe the whole filtered corpus; the
    document frequency of a term is the number of candidates holding it (every
    document holding a query term is a candidate).
    """
    if total_docs <= 0 or not candidates:
        return [0.0] * len(candidates)
    avg_len = max(total_length / total_docs, 1e-9)
    counts = [Counter(tokens) for tokens in candidates]
    idf: dict[str, float] = {}
    for term in terms:
        df = sum(1 for c in counts if term in c)
        idf[term] = math.log(1.0 + (total_docs - df + 0.5) / (df + 0.5))
    out: list[float] = []
    for tokens, count in zip(candidates, counts, strict=True):
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(tokens) / avg_len)
        score = 0.0
        for term in terms:
            tf = count.get(term, 0)
            if tf:
                score += idf[term] * tf * (BM25_K1 + 1.0) / (tf + norm)
        out.append(score)
    return out

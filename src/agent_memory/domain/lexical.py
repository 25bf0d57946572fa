"""Lexical matching rules (pure): tokenisation and Okapi BM25.

Tokens are lowercased runs of letters and digits, so punctuation and query
syntax in user text never mean anything. Common English function words
(`STOPWORDS`) are dropped and every other all-letter token is reduced by the
Snowball English stemmer (`stem`; the algorithm of PostgreSQL's `english` text
search configuration), so "painted" finds "paints"; the same rule applies to
documents and queries. BM25 statistics (document count,
average length, document frequencies) are computed over the caller's corpus —
one owner's filtered records — so another owner's data never changes a score.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from collections.abc import Container, Mapping, Sequence

from snowballstemmer.english_stemmer import EnglishStemmer

__all__ = [
    "BM25_B",
    "BM25_K1",
    "LEXICAL_VERSION",
    "STOPWORDS",
    "bm25_by_postings",
    "bm25_scores",
    "query_terms",
    "stem",
    "term_counts",
    "tokenize",
]

# Bump whenever `tokenize` can return other terms for the same text (stopwords,
# stemming, splitting, case folding): stores that keep derived terms (the SQLite
# keyword index) re-derive them when the version they were built with differs.
LEXICAL_VERSION = "2"  # 2: the Snowball English stemmer (1: a light suffix stemmer)

BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"[^\W_]+")

_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his
    how i if in into is it its itself just me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through
    to too under until up very was we were what when where which while who whom why
    will with would you your yours yourself yourselves s t d ll m re ve"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# Stems and terms are cached per word: a stem costs ~60 us in pure Python, and a
# conversation repeats a small vocabulary. Bounded, so arbitrary input cannot grow
# them without limit.
_CACHE_SIZE = 1 << 16
# Longer words (rare in text, unbounded in adversarial input) are stemmed uncached.
_CACHED_WORD = 48


class _Stemmer:
    """One Snowball English stemmer, made on first use; its state is per call, so
    calls are serialised (cache misses only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stemmer: EnglishStemmer | None = None

    def __call__(self, word: str) -> str:
        with self._lock:
            if self._stemmer is None:
                self._stemmer = EnglishStemmer()
            stemmed: str = self._stemmer.stemWord(word)
            return stemmed


_STEMMER = _Stemmer()


def _stem(word: str) -> str:
    if not word.isalpha():
        return word
    return _STEMMER(word) or word


stem = functools.lru_cache(maxsize=_CACHE_SIZE)(_stem)
stem.__doc__ = """The Snowball English stem of a lowercase word: "painted"/"paints"/
"painting" -> "paint", "hiking"/"hikes" -> "hike", "activities" -> "activ". A token
with a digit or other non-letter ("2023", "a1s") is kept as it is."""


def _uncached_term(raw: str) -> str:
    """The term of one raw word ("" for a stopword), nothing cached."""
    token = raw.lower()
    return "" if token in STOPWORDS else _stem(token)


def _cached_term(raw: str) -> str:
    token = raw.lower()
    return "" if token in STOPWORDS else stem(token)


_cached = functools.lru_cache(maxsize=_CACHE_SIZE)(_cached_term)


def _term(raw: str) -> str:
    """The term of one raw word; only words of up to `_CACHED_WORD` characters are
    cached, so the caches hold at most `_CACHE_SIZE` short strings whatever the input."""
    return _cached(raw) if len(raw) <= _CACHED_WORD else _uncached_term(raw)


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits, stopwords dropped, stemmed."""
    return [term for term in map(_term, _WORD.findall(text)) if term]


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in first-seen order (a repeat counts once)."""
    return list(dict.fromkeys(tokenize(query)))


def _idf(total_docs: int, df: int) -> float:
    """BM25's inverse document frequency of a term in `df` of `total_docs` documents."""
    return math.log(1.0 + (total_docs - df + 0.5) / (df + 0.5))


def _norm(length: int, avg: float) -> float:
    """BM25's length normalisation of a document of `length` terms (`avg`: the mean)."""
    return BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg)


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
    idf = {t: _idf(total_docs, doc_freq.get(t, 0)) for t in terms}
    out: list[float] = []
    for counts, length in docs:
        norm = _norm(length, avg)
        score = 0.0
        for term in terms:
            tf = counts.get(term, 0)
            if tf:
                score += idf[term] * tf * (BM25_K1 + 1.0) / (tf + norm)
        out.append(score)
    return out


def bm25_by_postings(
    terms: Sequence[str],
    postings: Mapping[str, Mapping[str, int]],
    lengths: Mapping[str, int],
    *,
    total_docs: int,
    avg_length: float,
    doc_freq: Mapping[str, int],
    within: Container[str] | None = None,
) -> dict[str, float]:
    """`bm25_scores` of the documents that hold a query term, found through
    `postings` (term -> {document id: the term's count there}) instead of scanning
    every document: id -> score, for ids in `within` when given; `lengths` maps an
    id to its length in terms. The same arithmetic in the same order, so each
    score equals `bm25_scores`'."""
    if total_docs <= 0:
        return {}
    avg = max(avg_length, 1e-9)
    scores: dict[str, float] = {}
    norms: dict[str, float] = {}
    for term in terms:
        counts = postings.get(term)
        if not counts:
            continue
        idf = _idf(total_docs, doc_freq.get(term, 0))
        for rid, tf in counts.items():
            if not tf or (within is not None and rid not in within):
                continue
            norm = norms.get(rid)
            if norm is None:
                norm = norms[rid] = _norm(lengths[rid], avg)
            scores[rid] = scores.get(rid, 0.0) + idf * tf * (BM25_K1 + 1.0) / (tf + norm)
    return scores


def term_counts(text: str) -> tuple[Counter[str], int]:
    """(term counts, length in tokens) of one document."""
    tokens = tokenize(text)
    return Counter(tokens), len(tokens)

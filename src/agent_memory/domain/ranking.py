"""Pure ranking and paging rules every MemoryStore must follow.

- search: cosine similarity, score descending, ties broken by id ascending;
- list: created_at descending, then id descending, with a keyset cursor that
  stays stable while records are added.
Adapters that compute in process (memory, SQLite) call these; adapters whose
engine ranks (Redis, PostgreSQL, Qdrant) must agree with them.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.validation import require_id, require_utc

# The C function `np.einsum` ends in when not asked to optimise (numpy 2's
# `numpy._core.multiarray.c_einsum`), called directly: `np.einsum`'s dispatch
# and argument handling cost more than the product of a few dozen rows.
# `tests/test_ranking_exact.py` compares the scores with `np.einsum`'s, bit for bit.
_einsum: Callable[..., Any]
try:
    from numpy._core.multiarray import c_einsum as _einsum
except ImportError:  # pragma: no cover - another numpy layout: the public spelling
    _einsum = np.einsum

__all__ = [
    "cosine_scores",
    "decode_cursor",
    "encode_cursor",
    "list_sort_key",
    "normalise_rows",
    "rank_rows",
    "top_k",
]


def normalise_rows(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """L2-normalise each row; an all-zero row stays zero (its similarity is 0)."""
    # `np.linalg.norm(matrix, axis=1, keepdims=True)`, spelled as the very ufuncs
    # it runs for a real matrix (the same values, bit for bit), without its
    # Python-level argument handling: this runs on every search. The squares'
    # buffer then receives the quotient (the same ufunc, no second allocation),
    # and the zero norms are looked for only when there is one.
    squares = matrix * matrix
    norms = np.add.reduce(squares, axis=1, keepdims=True)
    np.sqrt(norms, out=norms)
    if np.count_nonzero(norms) < norms.shape[0]:  # `not norms.all()`, without its wrapper
        norms[norms == 0.0] = 1.0
    if squares.dtype == np.float32:
        out: npt.NDArray[np.float32] = np.divide(matrix, norms, out=squares)
        return out
    return (matrix / norms).astype(np.float32, copy=False)


def cosine_scores(
    normalised_matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Cosine similarity of `query` with each row of an already normalised matrix."""
    qn = float(np.sqrt(query.dot(query)))  # `np.linalg.norm(query)`, its own steps
    if qn == 0.0 or normalised_matrix.shape[0] == 0:
        return np.zeros(normalised_matrix.shape[0], dtype=np.float32)
    unit = query / qn
    if unit.dtype != np.float32:
        unit = unit.astype(np.float32)
    # einsum, not `@`: a BLAS matrix-vector product may round identical rows
    # differently depending on their position, which would break exact ties
    # (`_einsum`: the function `np.einsum` calls, without its Python layers).
    scores = _einsum("ij,j->i", normalised_matrix, unit)
    # Clipped to [-1, 1] (what `np.clip` computes, without its Python wrapper),
    # in place: the scores are a new array of our own.
    np.maximum(scores, -1.0, out=scores)
    np.minimum(scores, 1.0, out=scores)
    if scores.dtype != np.float32:
        scores = scores.astype(np.float32)
    out: npt.NDArray[np.float32] = scores
    return out


def top_k(
    scores: npt.NDArray[np.float32],
    ids: Sequence[str],
    limit: int,
    min_score: float | None = None,
) -> list[tuple[int, float]]:
    """Indices and scores of the best `limit` rows: score desc, then id asc."""
    n = scores.shape[0]
    if n == 0:
        return []
    values = scores.tolist()  # the float32 scores as Python floats, exactly
    # Sorted as (-score, id, index) tuples, compared in C: the order of the key
    # (-score, id) with ties kept in index order, as a stable sort by that key
    # gives, without a key function called per row. `-scores` is the exact
    # negation of each float32 score.
    negated = (-scores).tolist()
    if min_score is None and n <= 4 * limit:  # the usual case: every row competes
        ordered = sorted(zip(negated, ids, range(n), strict=True))
        return [(i, values[i]) for _, _, i in ordered[:limit]]
    candidates = np.arange(n)
    if min_score is not None:
        candidates = candidates[scores >= np.float32(min_score)]
    if candidates.shape[0] > 4 * limit:
        # Narrow with a partition, keeping every row tied with the cut-off score.
        part = candidates[np.argpartition(-scores[candidates], limit - 1)[:limit]]
        cutoff = scores[part].min()
        candidates = candidates[scores[candidates] >= cutoff]
    ordered = sorted([(negated[i], ids[i], i) for i in candidates.tolist()])
    return [(i, values[i]) for _, _, i in ordered[:limit]]


def rank_rows(
    matrix: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
    ids: Sequence[str],
    limit: int,
    min_score: float | None = None,
) -> tuple[list[tuple[int, float]], float]:
    """`top_k(cosine_scores(normalise_rows(matrix), query), ids, limit, min_score)`
    and the lowest of those scores (`inf` with no rows), bit for bit, in fewer
    numpy calls for the few rows of a search's candidates (an engine's top
    hits re-ranked in process): the same ufuncs on the same values, with the
    clip, the negation and the sort done on the scores as Python floats
    (`tests/test_ranking_exact.py` compares the two spellings)."""
    n = matrix.shape[0]
    if (
        n == 0
        or min_score is not None
        or n > 4 * limit
        or matrix.dtype != np.float32
        or query.dtype != np.float32
    ):
        return _rank_rows_composed(matrix, query, ids, limit, min_score)
    # `normalise_rows`, for rows with no zero norm (else the general spelling).
    squares = matrix * matrix
    norms = np.add.reduce(squares, axis=1, keepdims=True)
    np.sqrt(norms, out=norms)
    if np.count_nonzero(norms) < n:
        return _rank_rows_composed(matrix, query, ids, limit, min_score)
    normalised = np.divide(matrix, norms, out=squares)
    # `cosine_scores`, clipped on the Python floats: `min(max(v, -1), 1)` is
    # `np.minimum(np.maximum(v, -1), 1)` for any number (-0.0 included). The
    # query's norm in float64 (`math.sqrt`): the division rounds it to float32
    # first, and a float64 square root rounded to float32 is the float32 square
    # root (53 >= 2 * 24 + 2 bits), so the unit vector is the same.
    qn = math.sqrt(float(query.dot(query)))
    if qn == 0.0:
        return _rank_rows_composed(matrix, query, ids, limit, min_score)
    values: list[float] = _einsum("ij,j->i", normalised, query / qn).tolist()
    total = sum(values)
    if total != total:  # a NaN score (never from finite rows): the general spelling
        return _rank_rows_composed(matrix, query, ids, limit, min_score)
    # `top_k` when every row competes (`min_score` is None, n <= 4 * limit).
    ordered = sorted(zip([-v for v in values], ids, range(n), strict=True))
    if -ordered[0][0] > 1.0 or -ordered[-1][0] < -1.0:
        # A score past +-1 (rounding): clipped first, as `cosine_scores` does,
        # which can tie it with others, then sorted again.
        values = [min(max(v, -1.0), 1.0) for v in values]
        ordered = sorted(zip([-v for v in values], ids, range(n), strict=True))
    # The lowest score is the last one sorted.
    return [(i, values[i]) for _, _, i in ordered[:limit]], -ordered[-1][0]


def _rank_rows_composed(
    matrix: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
    ids: Sequence[str],
    limit: int,
    min_score: float | None,
) -> tuple[list[tuple[int, float]], float]:
    scores = cosine_scores(normalise_rows(matrix), query)
    low = float(scores.min()) if scores.shape[0] else float("inf")
    return top_k(scores, ids, limit, min_score), low


def list_sort_key(created_at: datetime, record_id: str) -> tuple[datetime, str]:
    """Sort key for list order (use with reverse=True: created_at desc, id desc)."""
    return (created_at, record_id)


def encode_cursor(created_at: datetime, record_id: str) -> str:
    """An opaque keyset cursor: the position of the last record returned."""
    raw = json.dumps([created_at.isoformat(), record_id]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_cursor(cursor: object) -> tuple[datetime, str]:
    """Inverse of `encode_cursor`; raise `InvalidInput` naming the cursor when it
    is not a string this encoding produced (any other type, bad base64 or JSON,
    a naive or out-of-range time, an id that is blank or holds NUL)."""
    if not isinstance(cursor, str):
        got = type(cursor).__name__
        raise InvalidInput("cursor", f"a cursor string from a previous page is required, got {got}")
    shown = cursor if len(cursor) <= 80 else f"{cursor[:80]}..."
    try:
        created_raw, record_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        created = require_utc(datetime.fromisoformat(created_raw), "cursor")
        require_id(record_id, "cursor")
    except (ValueError, TypeError, UnicodeError, RecursionError) as exc:
        raise InvalidInput("cursor", f"malformed cursor {shown!r}: {exc}") from None
    return created, record_id

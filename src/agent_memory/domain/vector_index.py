"""Exact cosine search over one owner's vectors, kept incrementally (pure).

`ExactIndex` holds L2-normalised rows in a buffer that grows by doubling: an add
appends, an update rewrites its row in place, a delete moves the last row into
the hole. A write therefore costs O(dimension) and never rebuilds the matrix,
so a search right after a write is as fast as any other.

A search scans all rows with one BLAS matrix-vector product, keeps every row
within a rounding margin of the k-th best score, and re-scores only those
candidates in float64 — the same arithmetic for every row wherever it sits in
the buffer — so identical vectors always get identical scores and the order
(score descending, then id ascending) is exact and deterministic. BLAS may
round a row differently depending on its position; the margin bounds that
error (float32 dot products of unit vectors err by at most about
dimension x 2^-24), so no row that belongs in the top k is ever cut.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["ExactIndex", "exact_cosines"]

_F32 = np.float32
_MIN_CAPACITY = 16


class ExactIndex:
    """Normalised rows keyed by id, with an optional int64 tag per row (e.g. a
    storage key). Not thread-safe: one owner's index is used by one thread."""

    __slots__ = ("_dimension", "_n", "_pos", "_rows", "_tags", "ids")

    def __init__(self, dimension: int) -> None:
        self._dimension = dimension
        self._rows: npt.NDArray[np.float32] = np.zeros((0, dimension), dtype=_F32)
        self._tags: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._n = 0
        self._pos: dict[str, int] = {}
        self.ids: list[str] = []

    def __len__(self) -> int:
        return self._n

    def __contains__(self, id: object) -> bool:
        return id in self._pos

    @property
    def matrix(self) -> npt.NDArray[np.float32]:
        """The live rows (a view; normalised)."""
        return self._rows[: self._n]

    @property
    def tags(self) -> npt.NDArray[np.int64]:
        """The live rows' tags (a view), aligned with `ids`."""
        return self._tags[: self._n]

    def position(self, id: str) -> int | None:
        return self._pos.get(id)

    def add(
        self,
        ids: Sequence[str],
        vectors: npt.NDArray[np.float32],
        tags: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """Append rows (`vectors` shaped (len(ids), dimension)); an id already
        present is rewritten in place instead."""
        fresh: list[int] = []
        for i, id in enumerate(ids):
            at = self._pos.get(id)
            if at is None:
                fresh.append(i)
            else:
                self._rows[at] = _normalised(vectors[i : i + 1])[0]
                if tags is not None:
                    self._tags[at] = tags[i]
        if not fresh:
            return
        count = len(fresh)
        self._reserve(self._n + count)
        start, end = self._n, self._n + count
        every = count == len(ids)  # the common case: no fancy-index copy of the input
        _normalised(vectors if every else vectors[fresh], out=self._rows[start:end])
        self._tags[start:end] = 0 if tags is None else (tags if every else tags[fresh])
        for offset, i in enumerate(fresh):
            self._pos[ids[i]] = start + offset
            self.ids.append(ids[i])
        self._n = end

    def update(self, id: str, vector: npt.NDArray[np.float32]) -> None:
        """Rewrite the row of `id` (which must be present)."""
        self._rows[self._pos[id]] = _normalised(vector.reshape(1, -1))[0]

    def remove(self, ids: Sequence[str]) -> None:
        """Drop rows (absent ids are ignored): the last row moves into each hole."""
        for id in ids:
            at = self._pos.pop(id, None)
            if at is None:
                continue
            last = self._n - 1
            if at != last:
                moved = self.ids[last]
                self._rows[at] = self._rows[last]
                self._tags[at] = self._tags[last]
                self.ids[at] = moved
                self._pos[moved] = at
            self.ids.pop()
            self._n = last
        if self._n < len(self._rows) // 4 and len(self._rows) > _MIN_CAPACITY:
            self._resize(max(_MIN_CAPACITY, self._n * 2))

    def search(
        self,
        query: npt.NDArray[np.float32],
        limit: int,
        *,
        min_score: float | None = None,
        positions: npt.NDArray[np.intp] | None = None,
    ) -> list[tuple[int, float]]:
        """(row position, cosine score) of the best `limit` rows — score
        descending, then id ascending — among `positions` (all rows if None),
        keeping only scores >= `min_score` when given. Positions are scored
        the same way wherever they come from (a filter, an approximate index's
        candidates): the order is exact over them."""
        n = self._n
        candidates = np.arange(n) if positions is None else np.asarray(positions, dtype=np.intp)
        if candidates.shape[0] == 0:
            return []
        q64 = _unit(query)
        if q64 is None:
            exact = np.zeros(candidates.shape[0], dtype=_F32)
        else:
            q32 = q64.astype(_F32)
            if positions is not None and 8 * candidates.shape[0] < n:
                # A few candidates (an approximate index's): score only those rows.
                approx = self._rows[candidates] @ q32
            else:
                approx = self._rows[:n] @ q32  # BLAS: may round by position
                if positions is not None:
                    approx = approx[candidates]
            margin = _F32(4.0 * self._dimension * 2.0**-24 + 1e-6)
            if min_score is not None:
                chosen = np.flatnonzero(approx >= _F32(min_score) - margin)
                candidates, approx = candidates[chosen], approx[chosen]
            if approx.shape[0] > limit:
                cut = approx.shape[0] - limit
                kth = np.partition(approx, cut)[cut]
                candidates = candidates[np.flatnonzero(approx >= kth - margin)]
            exact = _exact(self._rows[candidates], q64)
        if min_score is not None:
            chosen = np.flatnonzero(exact >= _F32(min_score))
            candidates, exact = candidates[chosen], exact[chosen]
        if exact.shape[0] > limit:
            cut = exact.shape[0] - limit
            chosen = np.flatnonzero(exact >= np.partition(exact, cut)[cut])
            candidates, exact = candidates[chosen], exact[chosen]
        ids = self.ids
        order = sorted(
            range(exact.shape[0]), key=lambda i: (-float(exact[i]), ids[int(candidates[i])])
        )
        return [(int(candidates[i]), float(exact[i])) for i in order[:limit]]

    def _reserve(self, size: int) -> None:
        if size > len(self._rows):
            self._resize(max(_MIN_CAPACITY, size, 2 * len(self._rows)))

    def _resize(self, capacity: int) -> None:
        rows = np.zeros((capacity, self._dimension), dtype=_F32)
        rows[: self._n] = self._rows[: self._n]
        tags = np.zeros(capacity, dtype=np.int64)
        tags[: self._n] = self._tags[: self._n]
        self._rows, self._tags = rows, tags


def exact_cosines(
    vectors: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """The cosine of `query` with each row of `vectors` (not normalised), as
    `ExactIndex.search` scores it, bit for bit: rows normalised with float64
    norms, the products of float32 values summed in float64. For adapters that
    re-score an engine's candidates: their scores, and so their order of scores
    that tie in exact arithmetic, are those of the in-process stores (float32
    sums round such ties apart differently, e.g. 0.0 against 2.8e-17)."""
    q64 = _unit(query)
    if q64 is None or vectors.shape[0] == 0:
        return np.zeros(vectors.shape[0], dtype=_F32)
    return _exact(_normalised(np.asarray(vectors, dtype=_F32)), q64)


def _unit(query: npt.NDArray[np.float32]) -> npt.NDArray[np.float64] | None:
    """`query` scaled to unit length in float64 (None for a zero vector)."""
    q64: npt.NDArray[np.float64] = query.astype(np.float64)
    norm = float(np.sqrt(q64 @ q64))
    if norm == 0.0:
        return None
    q64 /= norm
    return q64


def _exact(rows: npt.NDArray[np.float32], q64: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """Exact products of float32 values in float64, summed row by row in one fixed
    order (a row's score does not depend on where it sits), clipped to [-1, 1]."""
    products = rows.astype(np.float64) * q64
    exact: npt.NDArray[np.float32] = np.clip(products.sum(axis=1), -1.0, 1.0).astype(_F32)
    return exact


def _normalised(
    rows: npt.NDArray[np.float32], out: npt.NDArray[np.float32] | None = None
) -> npt.NDArray[np.float32]:
    """L2-normalise each row (norms accumulated in float64); a zero row stays zero.
    Written into `out` (float32, same shape) when given: no temporary matrix."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    norms[norms == 0.0] = 1.0
    scale = (1.0 / norms).astype(_F32)[:, None]
    if out is None:
        out = np.empty(rows.shape, dtype=_F32)
    np.multiply(rows, scale, out=out, casting="same_kind")
    return out

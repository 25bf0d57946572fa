"""Approximate search for the embedded backends (memory://, SQLite) past the
exact-search threshold: an HNSW graph (faiss-cpu, extra `ann`) proposes
candidates, `ExactIndex` re-scores them.

`AnnIndex` is an `ExactIndex` (the rows stay the source of every score) plus a
graph over the same rows. A search of an owner with at most `exact_threshold`
records, or with the extra missing, is the exact search, unchanged. Above the
threshold the graph is built on the first search (the cold search pays for it),
then kept in step by every write: an add or update inserts the new row under a
fresh graph label, an update or delete marks the old label dead. The graph's
`max(ef_search, limit)` best labels, minus the dead ones, are handed to
`ExactIndex.search` as the candidate positions, so the answer is the exact
answer over those candidates: the same float64 scores, the same order (score
descending, then id ascending), never a deleted record and always the current
vector of an updated one. When dead labels outnumber the live ones the graph is
dropped and rebuilt on the next search.

Records whose rows are the same or nearly so (equal once rounded to 1/4096: a
duplicate, a multiple of a vector, the same text embedded twice) share one graph
label: HNSW prunes a node's links among neighbours at (nearly) equal distances,
so a run of such rows makes islands no walk leaves or enters (3,000 records of 5
vectors gave 52 reachable labels out of 3,000, and a search could miss the best
group by a score of 0.3). The labelled record stands for its twins, and a search
adds every twin of a label it reaches to the candidates. A search that would
ask the graph for every label (`ef_search` or `limit` at least the labels, or
too few candidates left by a filter) is the exact search over the matching
rows instead: it costs no more, and reaches what no walk reaches. A filtered
search (namespace, kinds) whose matching records are at most the threshold is
exact over them; otherwise the graph's candidates are filtered and, when fewer
than `limit` remain, asked for again with four times as many, up to all of them.

faiss is imported on the first search that needs the graph, never at import
time. Not thread-safe, like `ExactIndex`: one owner's index is used by one
thread at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.domain.vector_index import ExactIndex

__all__ = [
    "ANN_MISSING",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_M",
    "AnnIndex",
    "AnnSettings",
    "ann_available",
    "build_graph",
]

_log = logging.getLogger(__name__)

# Defaults of memory:// and SQLite (docs/scale.md has the measurements).
DEFAULT_EXACT_THRESHOLD: Final = 100_000
DEFAULT_M: Final = 16
DEFAULT_EF_CONSTRUCTION: Final = 40
DEFAULT_EF_SEARCH: Final = 200
MAX_AUTO_EF_SEARCH: Final = 2000
AUTO_EF_RECORDS: Final = 500  # one graph candidate per this many records
# Rows equal once rounded to 1/_CELL share a graph label (`AnnIndex._insert`).
_CELL: Final = 4096.0
_CELL_CHUNK: Final = 65_536

ANN_MISSING: Final = (
    "owners past the exact-search threshold are searched exactly: the approximate "
    "index needs the 'ann' extra (pip install 'agent-memory[ann]')"
)

_faiss: Any = None
_checked = False


def ann_available() -> bool:
    """Whether faiss (the `ann` extra) can be imported; imported on first call."""
    global _faiss, _checked
    if not _checked:
        _checked = True
        try:
            import faiss

            _faiss = faiss
        except ImportError:
            _faiss = None
            _log.warning(ANN_MISSING)
    return _faiss is not None


def describe_search(options: IndexOptions | None) -> str:
    """What vector search an embedded store does, for `doctor` (finds the extra
    without importing it)."""
    import importlib.util

    settings = AnnSettings.of(options)
    if importlib.util.find_spec("faiss") is None:
        return "exact at any size (the 'ann' extra is not installed)"
    ef = (
        f"ef_search {settings.ef_search}"
        if settings.ef_search is not None
        else f"ef_search {DEFAULT_EF_SEARCH}, {MAX_AUTO_EF_SEARCH:,} at 1M records"
    )
    return (
        f"exact up to {settings.exact_threshold:,} records per owner, then an HNSW graph "
        f"(faiss; M {settings.m}, {ef}) re-scored exactly"
    )


@attrs.frozen
class AnnSettings:
    """The embedded backends' index parameters, defaults filled in."""

    exact_threshold: int = DEFAULT_EXACT_THRESHOLD
    m: int = DEFAULT_M
    ef_construction: int = DEFAULT_EF_CONSTRUCTION
    ef_search: int | None = None
    """Graph candidates per search; None: `DEFAULT_EF_SEARCH`, growing with the
    owner's size (`ef_for`)."""

    @classmethod
    def of(cls, options: IndexOptions | None) -> AnnSettings:
        """`options` (validated by `IndexOptions`), its unset fields at the defaults."""
        return cls(**(options.kwargs() if options is not None else {}))

    def ef_for(self, rows: int) -> int:
        """The graph candidates a search of an owner with `rows` records asks
        for: the configured `ef_search` as given, else 200, rising with the
        owner past 100,000 records to 2,000 at 1M (one per 500 records, at most
        `MAX_AUTO_EF_SEARCH`). Measured on 1M clustered vectors (M 16,
        ef_construction 40) through the store (docs/scale.md): recall@10 0.934
        at ef 1,000, 0.950 at 1,500, 0.964 at 2,000, 0.968 at 3,000; the search
        0.10x to 0.12x the exact scan from 1,000 to 2,000."""
        if self.ef_search is not None:
            return self.ef_search
        return max(DEFAULT_EF_SEARCH, min(MAX_AUTO_EF_SEARCH, -(-rows // AUTO_EF_RECORDS)))


class AnnIndex(ExactIndex):
    """`ExactIndex` with an HNSW graph used above `settings.exact_threshold`."""

    __slots__ = (
        "_dead",
        "_graph",
        "_label_of",
        "_labels",
        "_pending",
        "_rep_of_row",
        "_row_hash",
        "_touched",
        "_twin_of",
        "_twins",
        "_zeros",
        "settings",
    )

    def __init__(self, dimension: int, settings: AnnSettings | None = None) -> None:
        super().__init__(dimension)
        self.settings = settings if settings is not None else AnnSettings()
        self._graph: Any = None
        self._labels: list[str | None] = []  # graph label -> id (None: dead)
        self._label_of: dict[str, int] = {}
        self._dead = 0
        # While a graph is built off this thread (`snapshot` .. `attach`): the ids
        # written since the snapshot, re-examined when the graph is attached.
        self._touched: set[str] | None = None
        # Ids whose row is zero: they score 0 against any query, but a graph walk
        # by inner product never reaches them (a zero row is no one's neighbour),
        # so every search past the threshold adds them to the candidates.
        self._zeros: set[str] = set()
        # Rows in one cell (equal once rounded, `_cell`) share a label (`_insert`):
        # a labelled id stands for its twins. twin id -> its labelled id, labelled
        # id -> its twins, and the hash of a labelled id's cell both ways.
        self._twin_of: dict[str, str] = {}
        self._twins: dict[str, set[str]] = {}
        self._row_hash: dict[str, int] = {}
        self._rep_of_row: dict[int, str] = {}
        # `snapshot` .. `attach`: the snapshot's twins and row hashes.
        self._pending: tuple[dict[str, str], dict[str, int]] | None = None

    @property
    def graph_built(self) -> bool:
        return self._graph is not None

    def add(
        self,
        ids: Sequence[str],
        vectors: npt.NDArray[np.float32],
        tags: npt.NDArray[np.int64] | None = None,
    ) -> None:
        super().add(ids, vectors, tags)
        self._note_zeros(ids, vectors)
        if self._touched is not None:
            self._touched.update(ids)
        if self._graph is not None:
            self._insert(ids)

    def update(self, id: str, vector: npt.NDArray[np.float32]) -> None:
        super().update(id, vector)
        self._note_zeros([id], vector.reshape(1, -1))
        if self._touched is not None:
            self._touched.add(id)
        if self._graph is not None:
            self._insert([id])

    def remove(self, ids: Sequence[str]) -> None:
        super().remove(ids)
        self._zeros.difference_update(ids)
        if self._touched is not None:
            self._touched.update(ids)
        if self._graph is not None:
            for id in ids:
                self._kill(id)
            self._maybe_drop()

    def needs_graph(
        self, query: npt.NDArray[np.float32], positions: npt.NDArray[np.intp] | None = None
    ) -> bool:
        """Whether `search(query, positions=positions)` would go through the graph
        and build it first (so a caller can build it elsewhere: `snapshot`)."""
        return self._graph is None and self._uses_graph(query, positions)

    def _uses_graph(
        self, query: npt.NDArray[np.float32], positions: npt.NDArray[np.intp] | None
    ) -> bool:
        threshold = self.settings.exact_threshold
        if len(self) <= threshold or (positions is not None and len(positions) <= threshold):
            return False
        q64 = query.astype(np.float64)
        return float(q64 @ q64) > 0.0 and ann_available()

    def snapshot(self) -> tuple[list[str], npt.NDArray[np.float32]]:
        """The ids and a copy of the rows to build a graph from in another thread
        (`build_graph`); from now until `attach`, writes are remembered so the
        graph can be brought up to date."""
        self._touched = set()
        reps, positions, twin_of, row_hash = self._distinct()
        self._pending = (twin_of, row_hash)
        return reps, self.matrix[positions]

    def attach(self, ids: list[str], graph: Any) -> None:
        """Take `graph`, built by `build_graph` from `snapshot()`'s rows: label i
        is `ids[i]`, standing for its twins of the snapshot. An id written since
        the snapshot gets a fresh label when it is still present (its current
        row) and its snapshot label dies, so the
        graph matches the rows as they are now. Ignored when a graph was built
        meanwhile (`search` builds one itself when none is there); `graph` None
        (the build failed) just ends the snapshot."""
        touched, self._touched = self._touched or set(), None
        pending, self._pending = self._pending, None
        if self._graph is not None or graph is None or pending is None:  # None: the build failed
            return
        self._install(graph, ids, *pending)
        present = [id for id in touched if id in self._pos]
        for id in touched:
            if id not in self._pos:
                self._kill(id)
        if present:
            self._insert(present)
        self._maybe_drop()

    def search(
        self,
        query: npt.NDArray[np.float32],
        limit: int,
        *,
        min_score: float | None = None,
        positions: npt.NDArray[np.intp] | None = None,
    ) -> list[tuple[int, float]]:
        if not self._uses_graph(query, positions):
            return super().search(query, limit, min_score=min_score, positions=positions)
        q64 = query.astype(np.float64)
        norm = float(np.sqrt(q64 @ q64))
        graph = self._built()
        q = (q64 / norm).astype(np.float32).reshape(1, -1)
        allowed: npt.NDArray[np.bool_] | None = None
        if positions is not None:
            allowed = np.zeros(len(self), dtype=bool)
            allowed[positions] = True
        total = int(graph.ntotal)
        want = min(max(self.settings.ef_for(total), limit), total)
        while True:
            if want >= total:
                # The walk would be asked for every label: the exact scan costs no
                # more, and reaches rows no walk from the entry point reaches
                # (HNSW prunes links among near-equal neighbours, so tight
                # clusters can make islands).
                return super().search(query, limit, min_score=min_score, positions=positions)
            candidates = self._candidates(graph, q, want, allowed)
            if len(candidates) >= limit:
                break
            want = min(want * 4, total)
        if self._zeros:
            candidates = np.union1d(candidates, self._zero_positions(limit, allowed))
        return super().search(query, limit, min_score=min_score, positions=candidates)

    def _note_zeros(self, ids: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        """Track which of `ids` (just written with `vectors`) have a zero row."""
        zero: list[bool] = np.logical_not(np.asarray(vectors).any(axis=1)).tolist()
        for id, is_zero in zip(ids, zero, strict=True):
            if is_zero:
                self._zeros.add(id)
            else:
                self._zeros.discard(id)

    def _zero_positions(
        self, limit: int, allowed: npt.NDArray[np.bool_] | None
    ) -> npt.NDArray[np.intp]:
        """The positions of the `limit` zero rows (among `allowed`) with the
        smallest ids: all zero rows tie at 0, and ties go by id ascending."""
        pos = self._pos
        ids = sorted(id for id in self._zeros if allowed is None or allowed[pos[id]])[:limit]
        return np.asarray([pos[id] for id in ids], dtype=np.intp)

    def adopt(self, old: AnnIndex) -> None:
        """Take over `old`'s graph (this index was reloaded after another
        process wrote): an id whose row is unchanged keeps its label, a new or
        changed row is inserted afresh, an id no longer here dies. Cheaper than
        a rebuild, and never stale: every row is compared."""
        if old._graph is None or self._graph is not None:
            return
        self._graph, self._labels, self._label_of, self._dead = (
            old._graph,
            old._labels,
            old._label_of,
            old._dead,
        )
        self._twin_of, self._twins, self._row_hash, self._rep_of_row = (
            old._twin_of,
            old._twins,
            old._row_hash,
            old._rep_of_row,
        )
        old._graph = None
        old._forget()
        # A twin of a vanished labelled id may inherit its label (`_kill`) before
        # the changed rows below are looked at: a changed heir is inserted again.
        for id in [id for id in (*self._label_of, *self._twin_of) if id not in self._pos]:
            self._kill(id)
        kept = [id for id in self.ids if id in self._label_of or id in self._twin_of]
        if kept:
            before = old._rows[[old._pos[id] for id in kept]]
            now = self._rows[[self._pos[id] for id in kept]]
            same = np.all(before == now, axis=1)
            changed = [id for id, ok in zip(kept, same.tolist(), strict=True) if not ok]
        else:
            changed = []
        fresh = [id for id in self.ids if id not in self._label_of and id not in self._twin_of]
        if changed or fresh:
            self._insert(changed + fresh)
        self._maybe_drop()

    def _candidates(
        self,
        graph: Any,
        q: npt.NDArray[np.float32],
        want: int,
        allowed: npt.NDArray[np.bool_] | None,
    ) -> npt.NDArray[np.intp]:
        """The positions of the graph's best `want` labels' records (among
        `allowed`), each with its twins (rows in its cell)."""
        params = _faiss.SearchParametersHNSW()
        params.efSearch = max(self.settings.ef_for(int(graph.ntotal)), want)
        _, found = graph.search(q, want, params=params)
        labels, pos, twins = self._labels, self._pos, self._twins
        out: list[int] = []
        for label in found[0].tolist():
            if label < 0:
                continue
            id = labels[label]
            if id is None:
                continue
            group = twins.get(id)
            if group is None:
                at = pos[id]
                if allowed is None or allowed[at]:
                    out.append(at)
                continue
            members = [pos[m] for m in (id, *group)]
            if allowed is not None:
                members = [at for at in members if allowed[at]]
            out.extend(members)
        return np.asarray(out, dtype=np.intp)

    def _built(self) -> Any:
        if self._graph is None:
            reps, positions, twin_of, row_hash = self._distinct()
            self._install(
                build_graph(self.matrix[positions], self.settings), reps, twin_of, row_hash
            )
        return self._graph

    def _distinct(self) -> tuple[list[str], list[int], dict[str, str], dict[str, int]]:
        """One id per cell (with its position), the other ids of each cell (twin
        -> that id) and the labelled ids' cell hashes: what a graph is built
        from."""
        reps: list[str] = []
        positions: list[int] = []
        twin_of: dict[str, str] = {}
        row_hash: dict[str, int] = {}
        first: dict[int, int] = {}
        rows, ids = self.matrix, self.ids
        for start in range(0, len(ids), _CELL_CHUNK):
            cells = _cell(rows[start : start + _CELL_CHUNK])
            for offset, cell in enumerate(cells):
                at = start + offset
                key = hash(cell.tobytes())
                seen = first.get(key)
                if seen is not None and np.array_equal(_cell(rows[seen]), cell):
                    twin_of[ids[at]] = ids[seen]
                else:
                    first.setdefault(key, at)
                    row_hash[ids[at]] = key
                    reps.append(ids[at])
                    positions.append(at)
        return reps, positions, twin_of, row_hash

    def _install(
        self, graph: Any, ids: list[str], twin_of: dict[str, str], row_hash: dict[str, int]
    ) -> None:
        """Take `graph` (label i is `ids[i]`) with its twins and row hashes."""
        self._graph, self._labels, self._dead = graph, list(ids), 0
        self._label_of = {id: label for label, id in enumerate(ids)}
        self._twin_of, self._row_hash = twin_of, row_hash
        self._twins = {}
        for twin, rep in twin_of.items():
            self._twins.setdefault(rep, set()).add(twin)
        self._rep_of_row = {}
        for id, key in row_hash.items():
            self._rep_of_row.setdefault(key, id)

    def _insert(self, ids: Sequence[str]) -> None:
        """Give `ids` (present, rows current) fresh labels, or make each the twin
        of a labelled id in the same cell; their old labels die."""
        fresh = list(dict.fromkeys(ids))
        for id in fresh:
            self._kill(id)
        rows, pos = self._rows, self._pos
        labelled: list[str] = []
        for id in fresh:
            cell = _cell(rows[pos[id]])
            key = hash(cell.tobytes())
            rep = self._rep_of_row.get(key)
            if rep is not None and np.array_equal(_cell(rows[pos[rep]]), cell):
                self._twin_of[id] = rep
                self._twins.setdefault(rep, set()).add(id)
            else:
                self._rep_of_row[key] = id
                self._row_hash[id] = key
                labelled.append(id)
        self._label(labelled)
        self._maybe_drop()

    def _label(self, ids: list[str]) -> None:
        """Add the rows of `ids` (present, not labelled) to the graph."""
        if not ids:
            return
        start = len(self._labels)
        rows = self._rows[[self._pos[id] for id in ids]]
        self._graph.add(np.ascontiguousarray(rows, dtype=np.float32))
        for offset, id in enumerate(ids):
            self._label_of[id] = start + offset
        self._labels.extend(ids)

    def _kill(self, id: str) -> None:
        """Take `id` out of the graph: a twin leaves its group; a labelled id's
        label dies and its smallest present twin (same cell) gets a fresh label
        for the rest."""
        rep = self._twin_of.pop(id, None)
        if rep is not None:
            group = self._twins[rep]
            group.discard(id)
            if not group:
                del self._twins[rep]
            return
        label = self._label_of.pop(id, None)
        if label is None:
            return
        self._labels[label] = None
        self._dead += 1
        key = self._row_hash.pop(id)
        if self._rep_of_row.get(key) == id:
            del self._rep_of_row[key]
        group = self._twins.pop(id, set())
        if not group:
            return
        present = {t for t in group if t in self._pos}
        for t in group - present:  # removed in the same batch: nothing left to do
            del self._twin_of[t]
        if not present:
            return
        heir = min(present)
        del self._twin_of[heir]
        present.discard(heir)
        for t in present:
            self._twin_of[t] = heir
        if present:
            self._twins[heir] = present
        heir_key = hash(_cell(self._rows[self._pos[heir]]).tobytes())
        self._row_hash[heir] = heir_key
        self._rep_of_row.setdefault(heir_key, heir)
        self._label([heir])

    def _maybe_drop(self) -> None:
        """Drop the graph once dead labels outnumber live ones (rebuilt on demand)."""
        if self._dead > max(len(self), 1_000):
            self._graph = None
            self._forget()

    def _forget(self) -> None:
        self._labels, self._label_of, self._dead = [], {}, 0
        self._twin_of, self._twins, self._row_hash, self._rep_of_row = {}, {}, {}, {}


def _cell(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.int16]:
    """Unit rows rounded to multiples of 1/`_CELL`: rows that are the same but
    for rounding (a multiple of a vector, one text embedded twice) fall in one
    cell, distinct embeddings do not."""
    cells: npt.NDArray[np.int16] = np.rint(rows * np.float32(_CELL)).astype(np.int16)
    return cells


def build_graph(rows: npt.NDArray[np.float32], settings: AnnSettings) -> Any:
    """A faiss HNSW graph (inner product) over `rows` (unit, float32), label i
    for row i. Touches nothing but its arguments, so it can run in a worker
    thread (faiss releases the GIL while it builds); needs `ann_available()`."""
    ann_available()
    graph = _faiss.IndexHNSWFlat(rows.shape[1], settings.m, _faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = settings.ef_construction
    graph.hnsw.efSearch = settings.ef_search or DEFAULT_EF_SEARCH
    if len(rows):
        graph.add(np.ascontiguousarray(rows, dtype=np.float32))
    return graph

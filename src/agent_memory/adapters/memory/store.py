"""In-process `MemoryStore`: dicts per owner, numpy matrix search.

The data lives in a `MemoryBackend` object, so several store handles can share
it (the way two clients share one server); closing one handle leaves the data.
"""

from __future__ import annotations

import asyncio
import builtins
import heapq
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.ann import AnnIndex, AnnSettings, build_graph
from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_filters,
    check_list_args,
    check_record,
    check_records,
    check_search_args,
    check_search_text_args,
)
from agent_memory.domain.errors import DuplicateRecord, NotFound
from agent_memory.domain.lexical import bm25_by_postings, query_terms, term_counts
from agent_memory.domain.ranking import encode_cursor
from agent_memory.domain.records import (
    EmbeddingSpace,
    MemoryRecord,
    Page,
    ScoredRecord,
)
from agent_memory.domain.validation import (
    require_id,
    require_scope,
    require_utc,
)

__all__ = ["InMemoryMemoryStore", "MemoryBackend"]


class _OwnerIndex:
    """One owner's records plus their vectors as an incrementally kept
    `AnnIndex` (exact rows, plus an HNSW graph past the exact-search threshold;
    built on the first search, then updated by every write), and
    for keyword search their term counts (content + indexing context) with a
    postings map term -> ids and the summed length (built on the first keyword
    search, then updated by every write)."""

    def __init__(self) -> None:
        self.records: dict[str, MemoryRecord] = {}
        self._vectors: AnnIndex | None = None
        self._building: asyncio.Future[None] | None = None
        self._terms: dict[str, tuple[Counter[str], int]] = {}
        self._postings: dict[str, dict[str, int]] | None = None
        self._lengths: dict[str, int] = {}
        self._total_length = 0

    def put(self, records: Sequence[MemoryRecord]) -> None:
        """Store (add or replace) `records`, keeping the vector index and the
        postings in step."""
        for r in records:
            if self._postings is not None and r.id in self.records:
                self._unindex(r.id)
            self.records[r.id] = r
            self._terms.pop(r.id, None)
            if self._postings is not None:
                self._index(r.id)
        if self._vectors is not None and records:
            self._vectors.add([r.id for r in records], np.stack([r.vector for r in records]))

    def remove(self, ids: Sequence[str]) -> None:
        for i in ids:
            if self._postings is not None:
                self._unindex(i)
            del self.records[i]
            self._terms.pop(i, None)
        if self._vectors is not None:
            self._vectors.remove(ids)

    def _index(self, record_id: str) -> None:
        assert self._postings is not None
        counts, length = self.terms(record_id)
        self._lengths[record_id] = length
        self._total_length += length
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[record_id] = tf

    def _unindex(self, record_id: str) -> None:
        assert self._postings is not None
        counts, length = self.terms(record_id)
        del self._lengths[record_id]
        self._total_length -= length
        for term in counts:
            ids = self._postings[term]
            del ids[record_id]
            if not ids:
                del self._postings[term]

    def postings(self) -> tuple[dict[str, dict[str, int]], dict[str, int], int]:
        """term -> {id: the term's count in that record}, id -> length in terms, and
        the summed length of the owner's records."""
        if self._postings is None:
            self._postings, self._lengths, self._total_length = {}, {}, 0
            for record_id in self.records:
                self._index(record_id)
        return self._postings, self._lengths, self._total_length

    def vectors(self, dimension: int, settings: AnnSettings) -> AnnIndex:
        if self._vectors is None:
            index = AnnIndex(dimension, settings)
            if self.records:
                ids = list(self.records)
                index.add(ids, np.stack([self.records[i].vector for i in ids]))
            self._vectors = index
        # Handles sharing a backend may differ in settings: each search uses its own.
        self._vectors.settings = settings
        return self._vectors

    async def build_graph(self, vectors: AnnIndex) -> None:
        """Build `vectors`' HNSW graph in a worker thread, so the event loop keeps
        serving while it runs (minutes at 1M records). The graph is built from a
        snapshot of the rows; writes made meanwhile go to the exact rows at once
        and are applied to the graph when it is attached (`AnnIndex.attach`), so
        the graph matches the final state. Concurrent searches wait for the one
        build; a cancelled search does not cancel it."""
        if self._building is None:
            ids, rows = vectors.snapshot()
            settings = vectors.settings

            async def run() -> None:
                try:
                    graph = await asyncio.to_thread(build_graph, rows, settings)
                except BaseException:
                    vectors.attach(ids, None)
                    raise
                finally:
                    self._building = None
                vectors.attach(ids, graph)

            self._building = asyncio.ensure_future(run())
        await asyncio.shield(self._building)

    def terms(self, record_id: str) -> tuple[Counter[str], int]:
        found = self._terms.get(record_id)
        if found is None:
            record = self.records[record_id]
            found = term_counts(f"{record.content}\n{record.context}")
            self._terms[record_id] = found
        return found


class MemoryBackend:
    """Shared state for in-process stores: per embedding space, per owner."""

    def __init__(self) -> None:
        self.spaces: dict[str, dict[str, _OwnerIndex]] = {}

    def owners(self, space: EmbeddingSpace) -> dict[str, _OwnerIndex]:
        return self.spaces.setdefault(space.identity, {})


def _matches(record: MemoryRecord, namespace: str | None, kinds: list[str] | None) -> bool:
    return (namespace is None or record.namespace == namespace) and (
        kinds is None or record.kind in kinds
    )


def _positions(
    index: _OwnerIndex, vectors: AnnIndex, namespace: str | None, kinds: list[str] | None
) -> npt.NDArray[np.intp] | None:
    """The rows of `vectors` whose records match the filters (None: no filter)."""
    if namespace is None and kinds is None:
        return None
    ids = vectors.ids
    return np.flatnonzero(
        np.fromiter(
            (_matches(index.records[i], namespace, kinds) for i in ids),
            dtype=bool,
            count=len(ids),
        )
    )


class InMemoryMemoryStore:
    """`MemoryStore` in process. Safe under concurrent asyncio tasks: every
    operation runs without awaiting between its reads and writes.

    `index` sets the vector search (docs/scale.md): an owner with at most
    `exact_threshold` records (default 100,000) is searched exactly, a larger
    one through an HNSW graph (`hnsw_m`, `hnsw_ef_construction`,
    `hnsw_ef_search`; extra `ann`) whose candidates are re-scored exactly."""

    def __init__(
        self,
        space: EmbeddingSpace,
        backend: MemoryBackend | None = None,
        *,
        index: IndexOptions | None = None,
    ) -> None:
        self._space = space
        self._ann = AnnSettings.of(index)
        self._backend = backend if backend is not None else MemoryBackend()
        self._life = Lifecycle("memory store")

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def backend(self) -> MemoryBackend:
        return self._backend

    def _owners(self) -> dict[str, _OwnerIndex]:
        return self._backend.owners(self._space)

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        self._life.check()
        batch = check_records(records, self._space)
        owners = self._owners()
        seen: set[tuple[str, str]] = set()
        dupes: dict[str, list[str]] = {}
        for r in batch:
            key = (r.owner, r.id)
            index = owners.get(r.owner)
            if key in seen or (index is not None and r.id in index.records):
                dupes.setdefault(r.owner, []).append(r.id)
            seen.add(key)
        if dupes:
            owner, ids = next(iter(dupes.items()))
            raise DuplicateRecord(owner, tuple(ids))
        by_owner: dict[str, list[MemoryRecord]] = {}
        for r in batch:
            by_owner.setdefault(r.owner, []).append(r)
        for owner, group in by_owner.items():
            owners.setdefault(owner, _OwnerIndex()).put(group)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        self._life.check()
        require_scope(owner, "owner")
        require_id(id)
        index = self._owners().get(owner)
        return None if index is None else index.records.get(id)

    async def update(self, record: MemoryRecord) -> None:
        self._life.check()
        check_record(record, "record", self._space)
        index = self._owners().get(record.owner)
        if index is None or record.id not in index.records:
            raise NotFound(record.owner, record.id)
        index.put([record])

    async def delete(self, owner: str, id: str) -> bool:
        self._life.check()
        require_scope(owner, "owner")
        require_id(id)
        index = self._owners().get(owner)
        if index is None or id not in index.records:
            return False
        self._remove(owner, index, id)
        return True

    def _remove(self, owner: str, index: _OwnerIndex, id: str) -> None:
        index.remove([id])
        if not index.records:  # leave no trace of the owner (forgetting a user)
            self._owners().pop(owner, None)

    # VersionedWrites: each a check and a write with no await between them, so no
    # other write of this process's loop lands in between
    async def update_if_older(self, record: MemoryRecord) -> bool:
        self._life.check()
        check_record(record, "record", self._space)
        index = self._owners().get(record.owner)
        held = None if index is None else index.records.get(record.id)
        if index is None or held is None or held.updated_at >= record.updated_at:
            return False
        index.put([record])
        return True

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        self._life.check()
        require_scope(owner, "owner")
        require_id(id)
        version = require_utc(updated_at, "updated_at")
        index = self._owners().get(owner)
        held = None if index is None else index.records.get(id)
        if index is None or held is None or held.updated_at != version:
            return False
        self._remove(owner, index, id)
        return True

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        self._life.check()
        query, wanted = check_search_args(
            owner, vector, limit, namespace, kinds, min_score, self._space
        )
        index = self._owners().get(owner)
        if index is None:
            return []
        vectors = index.vectors(self._space.dimension, self._ann)
        positions = _positions(index, vectors, namespace, wanted)
        while vectors.needs_graph(query, positions):
            # Past the threshold with no graph yet: built off the event loop (again
            # if the owner was replaced or the graph dropped while it was built).
            await index.build_graph(vectors)
            index = self._owners().get(owner)
            if index is None:
                return []
            vectors = index.vectors(self._space.dimension, self._ann)
            positions = _positions(index, vectors, namespace, wanted)  # writes may have run
        hits = vectors.search(query, limit, min_score=min_score, positions=positions)
        ids = vectors.ids
        return [ScoredRecord(record=index.records[ids[i]], score=s) for i, s in hits]

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        """BM25 over content + indexing context of the owner's matching records."""
        self._life.check()
        query, wanted = check_search_text_args(owner, query, limit, namespace, kinds)
        index = self._owners().get(owner)
        terms = query_terms(query)
        if index is None or not terms:
            return []
        postings, lengths, total_length = index.postings()
        within: set[str] | None = None
        if namespace is None and wanted is None:
            total_docs = len(index.records)
            doc_freq = {t: len(postings.get(t, ())) for t in terms}
        else:  # statistics over the filtered records only
            records = index.records
            within = {i for i, r in records.items() if _matches(r, namespace, wanted)}
            total_docs = len(within)
            total_length = sum(lengths[i] for i in within)
            doc_freq = {t: len(postings.get(t, {}).keys() & within) for t in terms}
        scores = bm25_by_postings(
            terms,
            postings,
            lengths,
            total_docs=total_docs,
            avg_length=total_length / total_docs if total_docs else 0.0,
            doc_freq=doc_freq,
            within=within,
        )
        hits = heapq.nsmallest(
            limit,
            ((s, i) for i, s in scores.items() if s > 0.0),
            key=lambda pair: (-pair[0], pair[1]),
        )
        return [ScoredRecord(record=index.records[i], score=s) for s, i in hits]

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        self._life.check()
        wanted, after = check_list_args(owner, limit, namespace, kinds, cursor)
        index = self._owners().get(owner)
        rows = [] if index is None else list(index.records.values())
        rows = [r for r in rows if _matches(r, namespace, wanted)]
        if after is not None:
            rows = [r for r in rows if (r.created_at, r.id) < after]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        page = tuple(rows[:limit])
        more = len(rows) > limit
        next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if more else None
        return Page(records=page, next_cursor=next_cursor)

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        self._life.check()
        require_scope(owner, "owner")
        wanted = check_filters(namespace, kinds)
        index = self._owners().get(owner)
        if index is None:
            return 0
        doomed = [i for i, r in index.records.items() if _matches(r, namespace, wanted)]
        index.remove(doomed)
        if not index.records:  # leave no trace of the owner (forgetting a user)
            self._owners().pop(owner, None)
        return len(doomed)

    async def owners(self) -> builtins.list[str]:
        """Every owner with a record in this space, sorted (`OwnerListing`)."""
        self._life.check()
        return sorted(o for o, index in self._owners().items() if index.records)

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

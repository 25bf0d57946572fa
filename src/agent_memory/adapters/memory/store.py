"""In-process `MemoryStore`: dicts per owner, numpy matrix search.

The data lives in a `MemoryBackend` object, so several store handles can share
it (the way two clients share one server); closing one handle leaves the data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_filters,
    check_min_score,
    check_query,
    check_record,
    check_records,
)
from agent_memory.domain.errors import DuplicateRecord, NotFound
from agent_memory.domain.lexical import bm25_scores, query_terms, term_counts
from agent_memory.domain.ranking import (
    cosine_scores,
    decode_cursor,
    encode_cursor,
    normalise_rows,
    top_k,
)
from agent_memory.domain.records import (
    EmbeddingSpace,
    MemoryRecord,
    Page,
    ScoredRecord,
    require_dimension,
)
from agent_memory.domain.validation import (
    as_vector,
    require_id,
    require_limit,
    require_scope,
)

__all__ = ["InMemoryMemoryStore", "MemoryBackend"]


class _OwnerIndex:
    """One owner's records plus a lazily rebuilt, normalised matrix and lazily
    computed term counts (content + indexing context) for keyword search."""

    def __init__(self) -> None:
        self.records: dict[str, MemoryRecord] = {}
        self._ids: list[str] | None = None
        self._matrix: npt.NDArray[np.float32] | None = None
        self._terms: dict[str, tuple[Counter[str], int]] = {}

    def invalidate(self, record_id: str | None = None) -> None:
        self._ids = None
        self._matrix = None
        if record_id is None:
            self._terms.clear()
        else:
            self._terms.pop(record_id, None)

    def terms(self, record_id: str) -> tuple[Counter[str], int]:
        found = self._terms.get(record_id)
        if found is None:
            record = self.records[record_id]
            found = term_counts(f"{record.content}\n{record.context}")
            self._terms[record_id] = found
        return found

    def matrix(self) -> tuple[list[str], npt.NDArray[np.float32]]:
        if self._ids is None or self._matrix is None:
            self._ids = list(self.records)
            if self._ids:
                stacked = np.stack([self.records[i].vector for i in self._ids])
            else:
                stacked = np.zeros((0, 1), dtype=np.float32)
            self._matrix = normalise_rows(stacked)
        return self._ids, self._matrix


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


class InMemoryMemoryStore:
    """`MemoryStore` in process. Safe under concurrent asyncio tasks: every
    operation runs without awaiting between its reads and writes."""

    def __init__(self, space: EmbeddingSpace, backend: MemoryBackend | None = None) -> None:
        self._space = space
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
        for r in batch:
            index = owners.setdefault(r.owner, _OwnerIndex())
            index.records[r.id] = r
            index.invalidate(r.id)

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
        index.records[record.id] = record
        index.invalidate(record.id)

    async def delete(self, owner: str, id: str) -> bool:
        self._life.check()
        require_scope(owner, "owner")
        require_id(id)
        index = self._owners().get(owner)
        if index is None or index.records.pop(id, None) is None:
            return False
        index.invalidate(id)
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
        require_scope(owner, "owner")
        require_limit(limit)
        query = as_vector(vector, "query vector")
        require_dimension(self._space, query)
        check_min_score(min_score)
        wanted = check_filters(namespace, kinds)
        index = self._owners().get(owner)
        if index is None:
            return []
        ids, matrix = index.matrix()
        scores = cosine_scores(matrix, query)
        if namespace is not None or wanted is not None:
            keep = np.fromiter(
                (_matches(index.records[i], namespace, wanted) for i in ids),
                dtype=bool,
                count=len(ids),
            )
            scores = np.where(keep, scores, np.float32(-np.inf))
            floor = -2.0 if min_score is None else min_score
            hits = top_k(scores, ids, limit, floor)
        else:
            hits = top_k(scores, ids, limit, min_score)
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
        require_scope(owner, "owner")
        require_limit(limit)
        query = check_query(query)
        wanted = check_filters(namespace, kinds)
        index = self._owners().get(owner)
        terms = query_terms(query)
        if index is None or not terms:
            return []
        ids = [i for i, r in index.records.items() if _matches(r, namespace, wanted)]
        docs = [index.terms(i) for i in ids]
        total_length = sum(length for _, length in docs)
        doc_freq = {t: sum(1 for counts, _ in docs if t in counts) for t in terms}
        scores = bm25_scores(
            terms,
            docs,
            total_docs=len(docs),
            avg_length=total_length / len(docs) if docs else 0.0,
            doc_freq=doc_freq,
        )
        hits = sorted(
            ((s, i) for s, i in zip(scores, ids, strict=True) if s > 0.0),
            key=lambda pair: (-pair[0], pair[1]),
        )[:limit]
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
        require_scope(owner, "owner")
        require_limit(limit)
        wanted = check_filters(namespace, kinds)
        after = decode_cursor(cursor) if cursor is not None else None
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
        for i in doomed:
            del index.records[i]
            index.invalidate(i)
        if not index.records:  # leave no trace of the owner (forgetting a user)
            self._owners().pop(owner, None)
        return len(doomed)

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

"""Deliberately broken MemoryStores, each with one classic bug, built on the
in-memory adapter. The contract suite must fail on every one of them."""

from __future__ import annotations

import asyncio
import re
import string
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs
import numpy as np
import numpy.typing as npt

from agent_memory.adapters.memory import InMemoryMemoryStore, MemoryBackend
from agent_memory.domain.errors import StoreClosed
from agent_memory.domain.lexical import STOPWORDS, bm25_scores, query_terms, stem, term_counts
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, Page, ScoredRecord
from agent_memory.validation import require_limit

__all__ = [
    "AscendingList",
    "AsciiCaseKeyword",
    "CaseInsensitiveIds",
    "CaseSensitiveKeyword",
    "DeleteScopeLeavesSearchable",
    "DescendingKeywordTies",
    "DuplicateOverwrites",
    "EmptyScopeAccepted",
    "GlobalKeywordStats",
    "InclusiveCursorList",
    "MillisecondVersionDeletes",
    "MiscountedDeleteScope",
    "NamespacePrefixDeleteScope",
    "NfkcOwners",
    "OffsetContinuedList",
    "OverFoldingKeyword",
    "OverreadingSearch",
    "OwnerBlindSearch",
    "OwnerWideKeywordStats",
    "ReadThenWriteVersions",
    "ShiftedTimestamps",
    "TrimmedNamespaces",
    "TrimmedOwners",
    "UnconditionalVersionedWrites",
    "UndeclaredVersionedWrites",
    "UpdateKeepsCreatedAt",
    "WriteAfterClosePersists",
]


class OwnerBlindSearch(InMemoryMemoryStore):
    """search ranks every owner's records (a query that forgot the owner filter)."""

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
        hits: list[ScoredRecord] = []
        stored = self.backend.owners(self.space)
        owners = {owner, *(o for o, index in stored.items() if index.records)}
        for each in owners:
            hits += await super().search(
                each, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
            )
        hits.sort(key=lambda h: (-h.score, h.record.id))
        return hits[:limit]


class WriteAfterClosePersists(InMemoryMemoryStore):
    """add after close writes through another connection, then reports StoreClosed."""

    def __init__(self, space: EmbeddingSpace, backend: MemoryBackend | None = None) -> None:
        super().__init__(space, backend)
        self._pool = InMemoryMemoryStore(space, self.backend)
        self._closed = False

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        if self._closed:
            await self._pool.add(records)
            raise StoreClosed("memory store")
        await super().add(records)

    async def close(self) -> None:
        self._closed = True
        await super().close()


class DeleteScopeLeavesSearchable(InMemoryMemoryStore):
    """delete_scope forgets to remove records from the search index."""

    def __init__(self, space: EmbeddingSpace, backend: MemoryBackend | None = None) -> None:
        super().__init__(space, backend)
        self._index = InMemoryMemoryStore(space)

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await super().add(records)
        await self._index.add(records)

    async def update(self, record: MemoryRecord) -> None:
        await super().update(record)
        await self._index.update(record)

    async def delete(self, owner: str, id: str) -> bool:
        await self._index.delete(owner, id)
        return await super().delete(owner, id)

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
        await super().search(owner, vector, limit=limit)  # validation and closed check
        return await self._index.search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
        )


class EmptyScopeAccepted(InMemoryMemoryStore):
    """Reads and deletes treat a blank owner as just another (empty) owner."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        return None if not owner.strip() else await super().get(owner, id)

    async def delete(self, owner: str, id: str) -> bool:
        return False if not owner.strip() else await super().delete(owner, id)

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
        if not owner.strip():
            return []
        return await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
        )

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        if not owner.strip():
            return Page(records=(), next_cursor=None)
        return await super().list(
            owner, namespace=namespace, kinds=kinds, limit=limit, cursor=cursor
        )

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        if not owner.strip():
            return 0
        return await super().delete_scope(owner, namespace=namespace, kinds=kinds)


class MiscountedDeleteScope(InMemoryMemoryStore):
    """delete_scope deletes the right records but returns the count of every
    record the owner had (the row count of a wider statement)."""

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        before = len((await super().list(owner, limit=10_000)).records)
        await super().delete_scope(owner, namespace=namespace, kinds=kinds)
        return before


class ShiftedTimestamps(InMemoryMemoryStore):
    """get reads created_at back an hour late (local time stored as UTC)."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        got = await super().get(owner, id)
        if got is None:
            return None
        return attrs.evolve(got, created_at=got.created_at + timedelta(hours=1))


class InclusiveCursorList(InMemoryMemoryStore):
    """list's cursor is inclusive: each next page repeats the last record of the
    page before (`>=` instead of `>` on the keyset)."""

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        from agent_memory.domain.ranking import decode_cursor, encode_cursor

        require_limit(limit)
        everything = await super().list(owner, namespace=namespace, kinds=kinds, limit=10_000)
        rows = list(everything.records)
        if cursor is not None:
            after = decode_cursor(cursor)
            rows = [r for r in rows if (r.created_at, r.id) <= after]
        page = tuple(rows[:limit])
        more = len(rows) > limit
        return Page(
            records=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )


class OffsetContinuedList(InMemoryMemoryStore):
    """list reads the owner's records in two steps and continues the second at an
    offset, yielding in between (as a backend that pages its engine by offset
    within one call): a record written or deleted in between shifts the rest,
    so one is skipped or repeated. Alone, the keyset cursor is right."""

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        from agent_memory.domain.ranking import decode_cursor, encode_cursor

        require_limit(limit)
        after = decode_cursor(cursor) if cursor is not None else None

        async def ranked() -> list[MemoryRecord]:
            got = await InMemoryMemoryStore.list(
                self, owner, namespace=namespace, kinds=kinds, limit=10_000
            )
            return list(got.records)

        first = await ranked()
        # Read up to two records past the cursor, then continue at that offset.
        offset = 2 + sum(1 for r in first if after is not None and (r.created_at, r.id) >= after)
        await asyncio.sleep(0)  # another task writes here
        rows = first[:offset] + (await ranked())[offset:]
        if after is not None:
            rows = [r for r in rows if (r.created_at, r.id) < after]
        page = tuple(rows[:limit])
        more = len(rows) > limit
        return Page(
            records=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )


class OverreadingSearch(InMemoryMemoryStore):
    """search reads `limit` rows from the ranked result whether or not there are
    that many: an owner with fewer records than `limit` raises IndexError."""

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
        ranked = await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
        )
        return [ranked[i] for i in range(limit)] if ranked else ranked


class DuplicateOverwrites(InMemoryMemoryStore):
    """add is an upsert: an existing id is silently replaced."""

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        for record in records:
            if await self.get(record.owner, record.id) is not None:
                await self.update(record)
            else:
                await super().add([record])


class AscendingList(InMemoryMemoryStore):
    """list pages oldest first (created_at asc, id asc), with a matching cursor."""

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        from agent_memory.domain.ranking import decode_cursor, encode_cursor

        everything = await super().list(owner, namespace=namespace, kinds=kinds, limit=10_000)
        rows = sorted(everything.records, key=lambda r: (r.created_at, r.id))
        if cursor is not None:
            after = decode_cursor(cursor)
            rows = [r for r in rows if (r.created_at, r.id) > after]
        page = tuple(rows[:limit])
        more = len(rows) > limit
        return Page(
            records=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )


class CaseSensitiveKeyword(InMemoryMemoryStore):
    """search_text matches terms case-sensitively (like a plain LIKE '%term%')."""

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        hits = await super().search_text(
            owner, query, limit=limit, namespace=namespace, kinds=kinds
        )
        words = query.split()
        return [
            h for h in hits if any(w in f"{h.record.content} {h.record.context}" for w in words)
        ]


class _FoldingKeyword(InMemoryMemoryStore):
    """search_text keeps the hits whose terms, each word folded by `_fold` instead
    of the oracle's `str.lower`, share one with the query's."""

    @staticmethod
    def _fold(word: str) -> str:
        raise NotImplementedError

    def _terms(self, text: str) -> set[str]:
        words = (self._fold(w) for w in _WORD.findall(text))
        return {stem(w) for w in words if w not in STOPWORDS}

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        require_limit(limit)
        # Every record of the owner is a candidate: the oracle's own folding must
        # not decide what is found.
        records = await self.list(owner, limit=10_000, namespace=namespace, kinds=kinds)
        wanted = self._terms(query)
        hits = [
            ScoredRecord(record=r, score=1.0)
            for r in records.records
            if wanted & self._terms(f"{r.content} {r.context}")
        ]
        hits.sort(key=lambda h: h.record.id)
        return hits[:limit]


class AsciiCaseKeyword(_FoldingKeyword):
    """search_text folds case for ASCII letters only (`lower()` under the C locale,
    SQLite's NOCASE): "ÉCOLE" does not find "école"."""

    @staticmethod
    def _fold(word: str) -> str:
        return word.translate(_ASCII_LOWER)


class OverFoldingKeyword(_FoldingKeyword):
    """search_text case-folds (`str.casefold`) where the oracle lower-cases: "ß"
    becomes "ss", so "STRASSE" finds "straße"."""

    @staticmethod
    def _fold(word: str) -> str:
        return word.casefold()


_WORD = re.compile(r"[^\W_]+")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _rescored(
    hits: Sequence[ScoredRecord], query: str, corpus: Sequence[MemoryRecord], limit: int
) -> list[ScoredRecord]:
    """`hits` scored by BM25 with the statistics of `corpus` (the wrong corpus is
    each broken store's bug), best first, ties by id, the first `limit`."""
    counts = [term_counts(f"{r.content}\n{r.context}") for r in corpus]
    terms = query_terms(query)
    scores = bm25_scores(
        terms,
        [term_counts(f"{h.record.content}\n{h.record.context}") for h in hits],
        total_docs=len(counts),
        avg_length=sum(n for _, n in counts) / max(len(counts), 1),
        doc_freq={t: sum(1 for c, _ in counts if t in c) for t in terms},
    )
    ranked = sorted(
        (ScoredRecord(record=h.record, score=s) for h, s in zip(hits, scores, strict=True)),
        key=lambda h: (-h.score, h.record.id),
    )
    return ranked[:limit]


class GlobalKeywordStats(InMemoryMemoryStore):
    """search_text scores with index-wide BM25 statistics: every owner's records and
    every deleted one (a shared full-text index before its garbage collection)."""

    def __init__(self, space: EmbeddingSpace, backend: MemoryBackend | None = None) -> None:
        super().__init__(space, backend)
        self._tombstones: list[MemoryRecord] = []

    def _stored(self, owner: str) -> list[MemoryRecord]:
        index = self.backend.owners(self.space).get(owner)
        return [] if index is None else list(index.records.values())

    async def delete(self, owner: str, id: str) -> bool:
        before = {r.id: r for r in self._stored(owner)}
        deleted = await super().delete(owner, id)
        if deleted:
            self._tombstones.append(before[id])
        return deleted

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        before = self._stored(owner)
        count = await super().delete_scope(owner, namespace=namespace, kinds=kinds)
        kept = {r.id for r in self._stored(owner)}
        self._tombstones += [r for r in before if r.id not in kept]
        return count

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        require_limit(limit)
        hits = await super().search_text(
            owner, query, limit=10_000, namespace=namespace, kinds=kinds
        )
        everything = [
            r for index in self.backend.owners(self.space).values() for r in index.records.values()
        ]
        return _rescored(hits, query, everything + self._tombstones, limit)


class DescendingKeywordTies(InMemoryMemoryStore):
    """search_text orders equal scores by id descending (an engine's `ORDER BY
    score DESC, id DESC`), before the limit cut."""

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        require_limit(limit)
        hits = await super().search_text(
            owner, query, limit=10_000, namespace=namespace, kinds=kinds
        )
        hits.sort(key=lambda h: h.record.id, reverse=True)
        hits.sort(key=lambda h: -h.score)  # stable: ties keep the descending ids
        return hits[:limit]


class OwnerWideKeywordStats(InMemoryMemoryStore):
    """search_text filters by namespace/kinds but takes its BM25 statistics from
    all of the owner's live records (a per-owner index queried with a filter)."""

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        require_limit(limit)
        hits = await super().search_text(
            owner, query, limit=10_000, namespace=namespace, kinds=kinds
        )
        index = self.backend.owners(self.space).get(owner)
        stored = [] if index is None else list(index.records.values())
        return _rescored(hits, query, stored, limit)


class _NormalisingOwners(InMemoryMemoryStore):
    """Keys records by a normalised owner (the bug of the two subclasses)."""

    @staticmethod
    def norm(owner: str) -> str:
        raise NotImplementedError

    def _n(self, owner: str) -> str:
        return self.norm(owner) if owner.strip() else owner

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await super().add([attrs.evolve(r, owner=self._n(r.owner)) for r in records])

    async def update(self, record: MemoryRecord) -> None:
        await super().update(attrs.evolve(record, owner=self._n(record.owner)))

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        return await super().get(self._n(owner), id)

    async def delete(self, owner: str, id: str) -> bool:
        return await super().delete(self._n(owner), id)

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
        return await super().search(
            self._n(owner),
            vector,
            limit=limit,
            namespace=namespace,
            kinds=kinds,
            min_score=min_score,
        )

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        return await super().list(
            self._n(owner), namespace=namespace, kinds=kinds, limit=limit, cursor=cursor
        )

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        return await super().delete_scope(self._n(owner), namespace=namespace, kinds=kinds)


class TrimmedOwners(_NormalisingOwners):
    """Owners are trimmed before use ("ana " is "ana")."""

    @staticmethod
    def norm(owner: str) -> str:
        return owner.strip()


class NfkcOwners(_NormalisingOwners):
    """Owners are NFKC-normalised before use ("\ufb01nance" is "finance")."""

    @staticmethod
    def norm(owner: str) -> str:
        return unicodedata.normalize("NFKC", owner)


class CaseInsensitiveIds(InMemoryMemoryStore):
    """Ids are lower-cased in the key (a case-insensitive collation)."""

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await super().add([attrs.evolve(r, id=r.id.lower()) for r in records])

    async def update(self, record: MemoryRecord) -> None:
        await super().update(attrs.evolve(record, id=record.id.lower()))

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        return await super().get(owner, id.lower())

    async def delete(self, owner: str, id: str) -> bool:
        return await super().delete(owner, id.lower())


class UnconditionalVersionedWrites(InMemoryMemoryStore):
    """`update_if_older` replaces whatever version is stored, and
    `delete_if_unchanged` deletes whatever version is stored: a copy then
    overwrites or deletes a writer's newer record."""

    async def update_if_older(self, record: MemoryRecord) -> bool:
        if await self.get(record.owner, record.id) is None:
            return False
        await self.update(record)
        return True

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        return await self.delete(owner, id)


class ReadThenWriteVersions(InMemoryMemoryStore):
    """Checks the version, then writes, with an await in between (the way a
    client without a conditional statement would): right in one call at a time,
    wrong when calls race."""

    async def update_if_older(self, record: MemoryRecord) -> bool:
        held = await self.get(record.owner, record.id)
        await asyncio.sleep(0)
        if held is None or held.updated_at >= record.updated_at:
            return False
        await self.update(record)
        return True

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        held = await self.get(owner, id)
        await asyncio.sleep(0)
        if held is None or held.updated_at != updated_at:
            return False
        return await self.delete(owner, id)


class UndeclaredVersionedWrites(InMemoryMemoryStore):
    """Declares `versioned_writes` (the generated contract does) but has no
    conditional writes: a re-embed would read, then write, unseen."""

    update_if_older = None  # type: ignore[assignment]
    delete_if_unchanged = None  # type: ignore[assignment]


def _to_the_millisecond(at: datetime) -> datetime:
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


class MillisecondVersionDeletes(InMemoryMemoryStore):
    """`delete_if_unchanged` compares versions to the millisecond only (a column
    or a score of milliseconds): it deletes a version a microsecond away."""

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        held = await self.get(owner, id)
        if held is None:
            # the in-memory adapter's own checks (naive datetime, closed store...)
            return await super().delete_if_unchanged(owner, id, updated_at)
        if _to_the_millisecond(held.updated_at) != _to_the_millisecond(updated_at):
            return await super().delete_if_unchanged(owner, id, updated_at)
        return await super().delete_if_unchanged(owner, id, held.updated_at)


class UpdateKeepsCreatedAt(InMemoryMemoryStore):
    """update replaces every field but `created_at` (an `UPDATE ... SET` that
    leaves the insert-time column alone): the record keeps its list position."""

    async def update(self, record: MemoryRecord) -> None:
        held = await self.get(record.owner, record.id)
        if held is not None:
            record = attrs.evolve(record, created_at=held.created_at)
        await super().update(record)


class NamespacePrefixDeleteScope(InMemoryMemoryStore):
    """delete_scope matches the namespace as a prefix (`namespace LIKE ? || '%'`,
    a key-prefix scan): deleting namespace "n" also deletes "n*" and "n:x"."""

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        if namespace is None:
            return await super().delete_scope(owner, namespace=namespace, kinds=kinds)
        index = self._owners().get(owner)
        spaces = set() if index is None else {r.namespace for r in index.records.values()}
        matching = sorted(ns for ns in spaces if ns.startswith(namespace)) or [namespace]
        return sum(
            [await super().delete_scope(owner, namespace=ns, kinds=kinds) for ns in matching]
        )


class TrimmedNamespaces(InMemoryMemoryStore):
    """Namespaces and kinds are trimmed in filters and records ("notes " is "notes")."""

    @staticmethod
    def _n(value: str) -> str:
        return value.strip() if value.strip() else value

    def _kinds(self, kinds: Sequence[str] | None) -> list[str] | None:
        return None if kinds is None else [self._n(k) for k in kinds]

    def _ns(self, namespace: str | None) -> str | None:
        return None if namespace is None else self._n(namespace)

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await super().add(
            [attrs.evolve(r, namespace=self._n(r.namespace), kind=self._n(r.kind)) for r in records]
        )

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
        return await super().search(
            owner,
            vector,
            limit=limit,
            namespace=self._ns(namespace),
            kinds=self._kinds(kinds),
            min_score=min_score,
        )

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        return await super().list(
            owner,
            namespace=self._ns(namespace),
            kinds=self._kinds(kinds),
            limit=limit,
            cursor=cursor,
        )

    async def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        return await super().delete_scope(
            owner, namespace=self._ns(namespace), kinds=self._kinds(kinds)
        )

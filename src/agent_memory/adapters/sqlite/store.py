"""`MemoryStore` + `KeywordSearch` on SQLite: vectors as float32 blobs, cosine search
with numpy over the owner's rows, keyword search (BM25) over per-owner postings.

Filters (owner always, namespace, kinds) run in SQL. The owner's normalised
matrix is cached in process and keyed by the owner's change counter, a row
bumped by every transaction that writes that owner's records: a search reads the
counter in the same snapshot as the rows, so a write through any handle, in any
process, invalidates the cache before the next search uses it.
"""

from __future__ import annotations

import builtins
import logging
import os
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.ann import AnnIndex, AnnSettings
from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters._common.validation import (
    check_filters,
    check_list_args,
    check_record,
    check_records,
    check_search_args,
    check_search_text_args,
    check_space,
)
from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, SqliteHandle, Synchronous
from agent_memory.adapters.sqlite._tx import read_tx, write_tx
from agent_memory.adapters.sqlite.codec import (
    RECORD_COLUMNS,
    record_from_row,
    record_params,
    text_terms,
    to_micros,
)
from agent_memory.adapters.sqlite.schema import SpaceTables, bump_versions, ensure_space
from agent_memory.domain.errors import BackendUnavailable, DuplicateRecord, NotFound
from agent_memory.domain.lexical import bm25_scores, query_terms
from agent_memory.domain.ranking import encode_cursor, top_k
from agent_memory.domain.records import (
    EmbeddingSpace,
    MemoryRecord,
    Page,
    ScoredRecord,
)
from agent_memory.domain.validation import (
    require_id,
    require_positive,
    require_scope,
    require_utc,
)
from agent_memory.domain.vector_index import ExactIndex

__all__ = ["SqliteMemoryStore"]

_log = logging.getLogger(__name__)
_CHUNK = 500  # bound on SQL variables per statement
# A batch of at least this many records is added with the postings trigger off
# and its postings inserted by one statement, in key order (see `_add`).
_BULK_ROWS = 500
_Kinds = list[str] | None


def _filter_sql(
    namespace: str | None, kinds: list[str] | None, alias: str = ""
) -> tuple[str, list[Any]]:
    sql = ""
    params: list[Any] = []
    if namespace is not None:
        sql += f" AND {alias}namespace = ?"
        params.append(namespace)
    if kinds is not None:
        if not kinds:
            sql += " AND 0"
        else:
            sql += f" AND {alias}kind IN ({','.join('?' * len(kinds))})"
            params.extend(kinds)
    return sql, params


class _Cached:
    """One owner's vectors as an `ExactIndex` (tags: the rows' pks), valid for
    one value of the owner's version."""

    __slots__ = ("index", "version")

    def __init__(self, version: int, index: ExactIndex) -> None:
        self.version = version
        self.index = index


_Versions = dict[str, tuple[int, int]]  # owner -> (version before the write, after)


class SqliteMemoryStore(SqliteHandle):
    """`MemoryStore` with `search_text`, on one SQLite file shared by any number of
    handles and processes. Every blocking call runs on the handle's worker thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        space: EmbeddingSpace,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = "NORMAL",
        matrix_cache_owners: int = 64,
        index: IndexOptions | None = None,
    ) -> None:
        self._space = check_space(space)
        self._ann = AnnSettings.of(index)
        require_positive(matrix_cache_owners, "matrix_cache_owners")
        super().__init__(
            path, "sqlite memory store", busy_timeout=busy_timeout, synchronous=synchronous
        )
        self._tables: SpaceTables | None = None  # set on the worker thread
        self._cache: OrderedDict[str, _Cached] = OrderedDict()  # worker thread only
        self._cache_size = matrix_cache_owners
        self._bulk_rows = _BULK_ROWS

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    # -- worker-thread helpers -------------------------------------------------

    def _t(self, conn: sqlite3.Connection) -> SpaceTables:
        if self._tables is None:
            self._tables = ensure_space(conn, self._space)
            if not self._space.provable:
                _log.warning(
                    "embedding model %r cannot be proven by its endpoint: records are kept"
                    " under the configured name (table %s); changing the model behind the"
                    " same name would mix vectors of different models",
                    self._space.model,
                    self._tables.records,
                )
        return self._tables

    def _bump(self, conn: sqlite3.Connection, owners: Sequence[str]) -> _Versions:
        """Fresh versions for `owners` (in the write tx): owner -> (old, new)."""
        distinct = list(dict.fromkeys(owners))
        before = {o: self._version(conn, o) for o in distinct}
        after = bump_versions(conn, self._t(conn).identity, distinct)
        return {o: (before[o], after) for o in distinct}

    def _after_delete(self, conn: sqlite3.Connection, owner: str) -> _Versions:
        """Bookkeeping after deleting some of `owner`'s records (in the write tx):
        a fresh version, or no version row at all once the owner has no records,
        so that the owner's id does not outlive their data (then no versions are
        returned and the owner's cached index is dropped after the commit)."""
        t = self._t(conn)
        left = conn.execute(
            f"SELECT 1 FROM {t.q(t.records)} WHERE owner = ? LIMIT 1", (owner,)
        ).fetchone()
        if left is not None:
            return self._bump(conn, [owner])
        # The file-wide counter still moves, so a version never repeats when the
        # owner comes back.
        bump_versions(conn, t.identity, [])
        conn.execute(
            "DELETE FROM record_versions WHERE space = ? AND owner = ?", (t.identity, owner)
        )
        return {}

    def _patch(self, owner: str, versions: _Versions, apply: Callable[[ExactIndex], None]) -> None:
        """After this handle's write to `owner` committed: bring the owner's cached
        index along (`apply`) when it was current before the write, so a search
        right after a write needs no reload; otherwise drop it."""
        entry = self._cache.get(owner)
        if entry is None:
            return
        change = versions.get(owner)
        if change is None or entry.version != change[0]:
            del self._cache[owner]
            return
        apply(entry.index)
        entry.version = change[1]

    @staticmethod
    def _suspend_insert_trigger(conn: sqlite3.Connection, t: SpaceTables) -> str | None:
        """Drop the records' insert trigger inside the current write transaction and
        return its SQL, to be run again before the commit (None: no trigger found,
        leave things as they are). DDL is transactional: a rollback restores it,
        and no other connection can write, or see the schema without it, meanwhile."""
        name = t.records + "_ai"
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,)
        ).fetchone()
        if row is None:
            return None
        conn.execute(f"DROP TRIGGER {t.q(name)}")
        return str(row[0])

    def _version(self, conn: sqlite3.Connection, owner: str) -> int:
        row = conn.execute(
            "SELECT version FROM record_versions WHERE space = ? AND owner = ?",
            (self._t(conn).identity, owner),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _index(self, conn: sqlite3.Connection, owner: str) -> ExactIndex:
        """The owner's cached index, reloaded when its version moved (call in a read tx)."""
        version = self._version(conn, owner)
        entry = self._cache.get(owner)
        if entry is not None and entry.version == version:
            self._cache.move_to_end(owner)
            return entry.index
        t = self._t(conn)
        # In index order, not pk order: the rows' positions in the index do not
        # matter (ties go by id), and sorting would copy every vector through a
        # temporary b-tree (1.8x the time of the whole query at 100,000 rows).
        rows = conn.execute(
            f"SELECT pk, id, vector FROM {t.q(t.records)} WHERE owner = ?", (owner,)
        ).fetchall()
        dim = self._space.dimension
        index = AnnIndex(dim, self._ann)
        if rows:
            blob = b"".join(r[2] for r in rows)
            if len(blob) != len(rows) * dim * 4:
                raise BackendUnavailable(
                    "sqlite", f"{t.records}: stored vectors do not match dimension {dim}"
                )
            index.add(
                [r[1] for r in rows],
                np.frombuffer(blob, dtype="<f4").reshape(len(rows), dim),
                np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
            )
        if entry is not None and isinstance(entry.index, AnnIndex):
            # Another handle or process wrote: keep the approximate graph, brought
            # up to date row by row from the file (no rebuild, nothing stale).
            index.adopt(entry.index)
        self._cache[owner] = _Cached(version, index)
        self._cache.move_to_end(owner)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return index

    def _fetch(self, conn: sqlite3.Connection, owner: str, pks: Sequence[int]) -> dict[int, Any]:
        t = self._t(conn)
        out: dict[int, Any] = {}
        for start in range(0, len(pks), _CHUNK):
            chunk = list(pks[start : start + _CHUNK])
            rows = conn.execute(
                f"SELECT pk, {RECORD_COLUMNS} FROM {t.q(t.records)}"
                # `+owner`: look the rows up by primary key, never scan the owner's index
                f" WHERE +owner = ? AND pk IN ({','.join('?' * len(chunk))})",
                [owner, *chunk],
            ).fetchall()
            out.update({r[0]: r[1:] for r in rows})
        return out

    # -- MemoryStore -----------------------------------------------------------

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        async with self._life.op():
            batch = check_records(records, self._space)
            if not batch:
                return
            await self._db.run(lambda conn: self._add(conn, batch))

    def _add(self, conn: sqlite3.Connection, batch: list[MemoryRecord]) -> None:
        t = self._t(conn)
        by_owner: dict[str, list[int]] = {}
        for i, r in enumerate(batch):
            by_owner.setdefault(r.owner, []).append(i)
        with write_tx(conn):
            stored: set[tuple[str, str]] = set()
            for owner, positions in by_owner.items():
                ids = [batch[i].id for i in positions]
                for start in range(0, len(ids), _CHUNK):
                    chunk = ids[start : start + _CHUNK]
                    rows = conn.execute(
                        f"SELECT id FROM {t.q(t.records)} WHERE owner = ?"
                        f" AND id IN ({','.join('?' * len(chunk))})",
                        [owner, *chunk],
                    ).fetchall()
                    stored.update((owner, row[0]) for row in rows)
            seen: set[tuple[str, str]] = set()
            dupes: dict[str, list[str]] = {}
            for r in batch:
                key = (r.owner, r.id)
                if key in seen or key in stored:
                    dupes.setdefault(r.owner, []).append(r.id)
                seen.add(key)
            if dupes:
                owner, dup_ids = next(iter(dupes.items()))
                raise DuplicateRecord(owner, tuple(dup_ids))
            # Explicit keys (the write lock is held): the cached indexes learn
            # each new row's key without reading the rows back.
            first_pk = int(
                conn.execute(f"SELECT coalesce(max(pk), 0) + 1 FROM {t.q(t.records)}").fetchone()[0]
            )
            trigger = (
                self._suspend_insert_trigger(conn, t) if len(batch) >= self._bulk_rows else None
            )
            placeholders = ",".join("?" * 14)
            conn.executemany(
                f"INSERT INTO {t.q(t.records)} (pk, {RECORD_COLUMNS}, terms, n_terms)"
                f" VALUES ({placeholders})",
                [(first_pk + i, *record_params(r), *text_terms(r)) for i, r in enumerate(batch)],
            )
            if trigger is not None:
                # What the trigger inserts row by row, for the whole batch at once
                # and in the postings' key order (appends, not random inserts).
                conn.execute(
                    f"INSERT INTO {t.q(t.postings)} (owner, term, pk, tf)"
                    f" SELECT r.owner, j.value, r.pk, count(*)"
                    f" FROM {t.q(t.records)} AS r, json_each(r.terms) AS j"
                    " WHERE r.pk BETWEEN ? AND ?"
                    " GROUP BY r.owner, j.value, r.pk ORDER BY r.owner, j.value, r.pk",
                    (first_pk, first_pk + len(batch) - 1),
                )
                conn.execute(trigger)
            versions = self._bump(conn, list(by_owner))
        for owner, positions in by_owner.items():
            self._patch(
                owner,
                versions,
                lambda index, positions=positions: index.add(  # type: ignore[misc]
                    [batch[i].id for i in positions],
                    np.stack([batch[i].vector for i in positions]),
                    np.asarray([first_pk + i for i in positions], dtype=np.int64),
                ),
            )

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            return await self._db.run(lambda conn: self._get(conn, owner, id))

    def _get(self, conn: sqlite3.Connection, owner: str, id: str) -> MemoryRecord | None:
        t = self._t(conn)
        row = conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM {t.q(t.records)} WHERE owner = ? AND id = ?",
            (owner, id),
        ).fetchone()
        return None if row is None else record_from_row(row, self._space.dimension)

    async def update(self, record: MemoryRecord) -> None:
        async with self._life.op():
            check_record(record, "record", self._space)
            await self._db.run(lambda conn: self._update(conn, record))

    def _update(
        self, conn: sqlite3.Connection, record: MemoryRecord, *, if_older: bool = False
    ) -> bool:
        """Replace the stored record; with `if_older`, only one whose updated_at is
        earlier (the check and the write are one statement). Whether it did."""
        t = self._t(conn)
        params = record_params(record)
        condition = " AND updated_at < ?" if if_older else ""
        with write_tx(conn):
            cur = conn.execute(
                f"UPDATE {t.q(t.records)} SET namespace = ?, kind = ?, content = ?, context = ?,"
                " vector = ?, created_at = ?, updated_at = ?, importance = ?, attributes = ?,"
                f" terms = ?, n_terms = ? WHERE owner = ? AND id = ?{condition}",
                (
                    *params[2:],
                    *text_terms(record),
                    record.owner,
                    record.id,
                    *((to_micros(record.updated_at),) if if_older else ()),
                ),
            )
            if cur.rowcount == 0:
                if if_older:
                    return False
                raise NotFound(record.owner, record.id)
            versions = self._bump(conn, [record.owner])
        self._patch(record.owner, versions, lambda index: index.update(record.id, record.vector))
        return True

    async def update_if_older(self, record: MemoryRecord) -> bool:
        """`VersionedWrites`: replace the record only when the stored version is older."""
        async with self._life.op():
            check_record(record, "record", self._space)
            return await self._db.run(lambda conn: self._update(conn, record, if_older=True))

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        """`VersionedWrites`: delete the record only when it is that version."""
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            version = to_micros(require_utc(updated_at, "updated_at"))
            return await self._db.run(lambda conn: self._delete(conn, owner, id, version))

    async def delete(self, owner: str, id: str) -> bool:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            return await self._db.run(lambda conn: self._delete(conn, owner, id))

    def _delete(
        self, conn: sqlite3.Connection, owner: str, id: str, version: int | None = None
    ) -> bool:
        """Delete the record; with `version` (updated_at in microseconds), only
        that version (the check and the delete are one statement)."""
        t = self._t(conn)
        condition, extra = (" AND updated_at = ?", (version,)) if version is not None else ("", ())
        with write_tx(conn):
            cur = conn.execute(
                f"DELETE FROM {t.q(t.records)} WHERE owner = ? AND id = ?{condition}",
                (owner, id, *extra),
            )
            if cur.rowcount == 0:
                return False
            versions = self._after_delete(conn, owner)
        self._patch(owner, versions, lambda index: index.remove([id]))
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
        async with self._life.op():
            query, wanted = check_search_args(
                owner, vector, limit, namespace, kinds, min_score, self._space
            )
            return await self._db.run(
                lambda conn: self._search(conn, owner, query, limit, namespace, wanted, min_score)
            )

    def _search(
        self,
        conn: sqlite3.Connection,
        owner: str,
        query: npt.NDArray[np.float32],
        limit: int,
        namespace: str | None,
        kinds: _Kinds,
        min_score: float | None,
    ) -> list[ScoredRecord]:
        t = self._t(conn)
        with read_tx(conn):
            index = self._index(conn, owner)
            if not len(index):
                return []
            positions = None
            if namespace is not None or kinds is not None:
                where, params = _filter_sql(namespace, kinds)
                keep = conn.execute(
                    f"SELECT pk FROM {t.q(t.records)} WHERE owner = ?{where}", [owner, *params]
                ).fetchall()
                wanted = np.fromiter((r[0] for r in keep), dtype=np.int64, count=len(keep))
                positions = np.flatnonzero(np.isin(index.tags, wanted))
            hits = index.search(query, limit, min_score=min_score, positions=positions)
            if not hits:
                return []
            chosen = [int(index.tags[i]) for i, _ in hits]
            rows = self._fetch(conn, owner, chosen)
        dim = self._space.dimension
        return [
            ScoredRecord(record=record_from_row(rows[pk], dim), score=score)
            for pk, (_, score) in zip(chosen, hits, strict=True)
        ]

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        """BM25 over content and context; higher score is better, ties by id.

        The owner's postings give the records holding any query term and the term
        counts (filters in the same SQL); scores follow `domain.lexical.bm25_scores`
        with statistics over the owner's filtered records only, so they equal the
        in-memory adapter's and another owner's data never changes them.
        """
        async with self._life.op():
            query, wanted = check_search_text_args(owner, query, limit, namespace, kinds)
            terms = query_terms(query)
            if not terms:
                return []
            return await self._db.run(
                lambda conn: self._search_text(conn, owner, terms, limit, namespace, wanted)
            )

    def _search_text(
        self,
        conn: sqlite3.Connection,
        owner: str,
        terms: list[str],
        limit: int,
        namespace: str | None,
        kinds: _Kinds,
    ) -> list[ScoredRecord]:
        t = self._t(conn)
        postings, records = t.q(t.postings), t.q(t.records)
        where, params = _filter_sql(namespace, kinds, alias="r.")
        with read_tx(conn):
            total_docs, total_length = conn.execute(
                f"SELECT count(*), coalesce(sum(n_terms), 0) FROM {records} AS r"
                f" WHERE r.owner = ?{where}",
                [owner, *params],
            ).fetchone()
            if not total_docs:
                return []
            counts: dict[int, dict[str, int]] = {}
            found: dict[int, tuple[str, int]] = {}  # pk -> (id, length)
            for start in range(0, len(terms), _CHUNK):
                chunk = terms[start : start + _CHUNK]
                rows = conn.execute(
                    f"SELECT p.pk, p.term, p.tf, r.id, r.n_terms FROM {postings} AS p"
                    # CROSS JOIN: drive from the owner's postings of the query terms.
                    f" CROSS JOIN {records} AS r ON r.pk = p.pk"
                    f" WHERE p.owner = ? AND p.term IN ({','.join('?' * len(chunk))}){where}",
                    [owner, *chunk, *params],
                ).fetchall()
                for pk, term, tf, id_, n_terms in rows:
                    counts.setdefault(pk, {})[term] = int(tf)
                    found[pk] = (id_, int(n_terms))
            if not found:
                return []
            pks = list(found)
            doc_freq = {term: 0 for term in terms}
            for per_term in counts.values():
                for term in per_term:
                    doc_freq[term] += 1
            scores = bm25_scores(
                terms,
                [(counts[pk], found[pk][1]) for pk in pks],
                total_docs=int(total_docs),
                avg_length=int(total_length) / int(total_docs),
                doc_freq=doc_freq,
            )
            all_scores = np.asarray(scores, dtype=np.float64)
            positive = np.flatnonzero(all_scores > 0.0)
            ids = [found[pks[i]][0] for i in positive.tolist()]
            ranked = [
                (pks[int(positive[i])], score)
                for i, score in top_k(all_scores[positive], ids, limit)  # type: ignore[arg-type]
            ]
            rows_by_pk = self._fetch(conn, owner, [pk for pk, _ in ranked])
        dim = self._space.dimension
        return [
            ScoredRecord(record=record_from_row(rows_by_pk[pk], dim), score=score)
            for pk, score in ranked
        ]

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        async with self._life.op():
            wanted, after = check_list_args(owner, limit, namespace, kinds, cursor)
            return await self._db.run(
                lambda conn: self._list(conn, owner, namespace, wanted, limit, after)
            )

    def _list(
        self,
        conn: sqlite3.Connection,
        owner: str,
        namespace: str | None,
        kinds: _Kinds,
        limit: int,
        after: Any,
    ) -> Page:
        t = self._t(conn)
        where, params = _filter_sql(namespace, kinds)
        if after is not None:
            micros = to_micros(after[0])
            where += " AND (created_at, id) < (?, ?)"  # a row value: an index range seek
            params.extend([micros, after[1]])
        rows = conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM {t.q(t.records)} WHERE owner = ?{where}"
            " ORDER BY created_at DESC, id DESC LIMIT ?",
            [owner, *params, limit + 1],
        ).fetchall()
        dim = self._space.dimension
        page = tuple(record_from_row(r, dim) for r in rows[:limit])
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
        async with self._life.op():
            require_scope(owner, "owner")
            wanted = check_filters(namespace, kinds)
            return await self._db.run(
                lambda conn: self._delete_scope(conn, owner, namespace, wanted)
            )

    def _delete_scope(
        self,
        conn: sqlite3.Connection,
        owner: str,
        namespace: str | None,
        kinds: _Kinds,
    ) -> int:
        t = self._t(conn)
        where, params = _filter_sql(namespace, kinds)
        with write_tx(conn):
            doomed = [
                row[0]
                for row in conn.execute(
                    f"SELECT id FROM {t.q(t.records)} WHERE owner = ?{where}", [owner, *params]
                )
            ]
            if not doomed:
                return 0
            conn.execute(f"DELETE FROM {t.q(t.records)} WHERE owner = ?{where}", [owner, *params])
            versions = self._after_delete(conn, owner)
        self._patch(owner, versions, lambda index: index.remove(doomed))
        return len(doomed)

    async def owners(self) -> builtins.list[str]:
        """Every owner with a record in this space, sorted (`OwnerListing`)."""
        async with self._life.op():

            def job(conn: sqlite3.Connection) -> list[str]:
                t = self._t(conn)
                sql = f"SELECT DISTINCT owner FROM {t.q(t.records)} ORDER BY owner"
                return [row[0] for row in conn.execute(sql)]

            return await self._db.run(job)

    def _ping(self, conn: sqlite3.Connection) -> None:
        self._t(conn)
        conn.execute("SELECT 1").fetchone()

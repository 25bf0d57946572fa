"""`MemoryStore` + `KeywordSearch` on PostgreSQL with pgvector.

One table per embedding space (`mem_<identity>`), primary key `(owner, id)`,
a `vector(d)` column with an HNSW cosine index and a generated `tsvector`
(content weighted A, indexing context B) with a GIN index.

Vector search runs one statement. A scope (owner, namespace, kinds) that a
search read as small (at most the exact threshold) less than `SIZE_TTL` (1 s)
ago runs the exact statement alone: it sorts the scope's row addresses by
`(distance, id)` and reads the first rows by address. Exact is right at any
size, so a scope that grew meanwhile is only slower until its size is read
again. Any other scope runs the gated statement (the probe): it reads the
scope's size from the counts table in its own snapshot, then ranks small
scopes exactly (`ORDER BY distance, id`) and large ones through the HNSW index
with iterative scans (filters applied inside the index scan, the limit still
met; the index yields `limit + max(2 * limit, 100)` candidates, ranked exactly
in SQL), and returns the size it read. Either way the statement returns
`limit + 1` rows, re-scored with the in-process stores' arithmetic
(`domain.vector_index.exact_cosines`: float32 products summed in float64) and
ranked by `domain.ranking.top_k`, so scores and tie order agree with
memory://, SQLite, Qdrant and Milvus bit for bit; when a row left out could
still beat one of them (scores within twice pgvector's float32 error:
near-ties), the statement runs again for four times as many rows. The rows'
vectors come as bytes and are converted in one numpy call. The HNSW index
holds no zero vectors (pgvector skips them for cosine): the HNSW branch adds
the scope's first zero vectors by id (score 0), read through a partial index
of them (`zero_vectors_index`).

Keyword search is BM25 (k1, b) computed in SQL over the tsvector: the query's
lexemes are OR-ed (`to_tsvector` of the user text, so no query syntax can
fail), document frequencies come from the owner's filtered records.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.types.json import Json

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
from agent_memory.adapters.postgres._codec import row_decoder, rows_decoder, utc
from agent_memory.adapters.postgres._database import (
    HNSW_MAX_DIMENSION,
    PostgresDatabase,
    PostgresHandle,
    unbounded,
)
from agent_memory.adapters.postgres._vector import PgVector, vectors_from_bytes
from agent_memory.domain.errors import (
    ConfigurationError,
    DuplicateRecord,
    InvalidInput,
    NotFound,
)
from agent_memory.domain.ranking import encode_cursor, top_k
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
from agent_memory.domain.vector_index import exact_cosines

__all__ = [
    "COLUMNS",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_M",
    "PostgresMemoryStore",
    "hits_decoder",
    "records_decoder",
]

# HNSW defaults (docs/postgres.md, "Vector index": measured recall and latency).
# m and ef_construction shape the index when it is created (`rebuild_index` or
# `bulk_add` apply new ones); ef_search is a session setting of the database's
# connections (`PostgresDatabase(ef_search=...)`), read by every query. An owner
# with at most DEFAULT_EXACT_THRESHOLD records (after the namespace/kind filters)
# is ranked by an exact scan of its own rows.
DEFAULT_M = 16
DEFAULT_EF_CONSTRUCTION = 64
DEFAULT_EF_SEARCH = 400
DEFAULT_EXACT_THRESHOLD = 100_000

_COLUMNS = (
    "owner",
    "id",
    "namespace",
    "kind",
    "content",
    "context",
    "embedding",
    "created_at",
    "updated_at",
    "importance",
    "attributes",
)
# The columns' count: a probe row holds one more (the scope's size).
_WIDTH = len(_COLUMNS)
# MemoryRecord fields in `_COLUMNS` order (the vector lives in `embedding`).
_RECORD_FIELDS = tuple("vector" if c == "embedding" else c for c in _COLUMNS)
# Rows beyond `limit` the statement returns for the exact float32 re-rank. Every
# row is wider than its vector (content, attributes), so the statement returns
# one; `search` asks again for more when the rows could hide a hit (`_settled`).
_SLACK = 1
# Scopes remembered as small (see `PostgresMemoryStore.search`): the memory is
# emptied when it holds this many.
_SIZES = 4096
# A bound on |pgvector's cosine - `exact_cosines`| (pgvector sums in float32:
# about dimension * 2^-24 at worst, 1.2e-4 at 2,000 dimensions).
_COSINE_ERROR = 2e-4
_COLS = sql.SQL(", ").join(sql.Identifier(c) for c in _COLUMNS)
# COPY column types, in `_COLUMNS` order; the vector's oid (index 6) is only
# known once the database is open.
_COPY_TYPES: list[int | str] = [
    *("text",) * 6,
    0,
    "timestamptz",
    "timestamptz",
    "float8",
    "json",
]


def _filters(namespace: str | None, kinds: list[str] | None) -> sql.Composable:
    parts = [sql.SQL("owner = %(owner)s")]
    if namespace is not None:
        parts.append(sql.SQL("namespace = %(namespace)s"))
    if kinds is not None:
        parts.append(sql.SQL("kind = ANY(%(kinds)s::text[])"))
    return sql.SQL(" AND ").join(parts)


@functools.cache
def _record_decoder() -> Callable[[Sequence[Any]], MemoryRecord]:
    return row_decoder(MemoryRecord, _RECORD_FIELDS, {"created_at": utc, "updated_at": utc})


def _record(row: Sequence[Any]) -> MemoryRecord:
    """A row of `_COLUMNS` (binary) -> `MemoryRecord`, without re-validation."""
    return _record_decoder()(row)


@functools.cache
def _records_decoder() -> Callable[[Iterable[Sequence[Any]]], list[MemoryRecord]]:
    return rows_decoder(MemoryRecord, _RECORD_FIELDS, {"created_at": utc, "updated_at": utc})


@functools.cache
def _hits_decoder() -> Callable[[Iterable[tuple[MemoryRecord, float]]], list[ScoredRecord]]:
    """`(record, score)` pairs -> `ScoredRecord`s (a class without validators or
    converters), in one loop."""
    return rows_decoder(ScoredRecord, ("record", "score"))


@functools.cache
def _hit_records_decoder(
    probe: bool,
) -> Callable[[Iterable[Sequence[Any]]], list[MemoryRecord]]:
    """Search rows (`_COLUMNS`, the vector as bytes, then the scope's size for
    a probe) followed by the vector as an array -> `MemoryRecord`s."""
    fields = (*_RECORD_FIELDS[:6], None, *_RECORD_FIELDS[7:])
    extra = (None, "vector") if probe else ("vector",)
    return rows_decoder(MemoryRecord, (*fields, *extra), {"created_at": utc, "updated_at": utc})


def _hits(
    rows: Sequence[tuple[Any, ...]],
    vectors: npt.NDArray[np.float32],
    hits: Sequence[tuple[int, float]],
    probe: bool,
) -> list[ScoredRecord]:
    """The hits' rows (only those: not every candidate fetched), each with its
    vector from `vectors` (the rows hold its bytes), decoded in one loop, then
    paired with their scores in another (no call per hit)."""
    records = _hit_records_decoder(probe)([rows[i] + (vectors[i],) for i, _ in hits])
    return _hits_decoder()(zip(records, [score for _, score in hits], strict=True))


# The records table's columns and the row decoders `search` uses, for code that
# reads the table directly with the same decoding (benchmarks/postgres_overhead.py).
COLUMNS = _COLUMNS
records_decoder = _records_decoder
hits_decoder = _hits_decoder


def _settled(
    lowest: float,
    hits: Sequence[tuple[int, float]],
    limit: int,
    min_score: float | None,
) -> bool:
    """Whether rows the statement did not return (all ranked after these by
    pgvector) cannot be among the `limit` best by the exact score: each of
    them scores at most `lowest`, the lowest score here, plus twice the cosine
    error, so they cannot reach the `limit`-th best score here (nor
    `min_score`). `hits` is the `top_k` of these rows: with `limit` of them, the
    last one's score is the `limit`-th best here (with fewer, `min_score` cut
    the rest, so the `limit`-th best is below it)."""
    bar = -np.inf if min_score is None else float(min_score)
    if len(hits) == limit:
        bar = max(bar, hits[-1][1])
    return lowest + 2 * _COSINE_ERROR < bar


def _dump_attributes(attributes: dict[str, Any]) -> Json:
    return Json(attributes, dumps=lambda v: json.dumps(v, allow_nan=False))


class PostgresMemoryStore(PostgresHandle):
    """`MemoryStore` (and `KeywordSearch`) on one PostgreSQL schema."""

    # Seconds a scope read as small is searched by the exact statement alone
    # before its size is read again (`search`).
    SIZE_TTL = 1.0

    def __init__(
        self,
        database: PostgresDatabase,
        space: EmbeddingSpace,
        *,
        owns_database: bool = False,
        exact_threshold: int | None = None,
        hnsw_m: int | None = None,
        hnsw_ef_construction: int | None = None,
        index: IndexOptions | None = None,
        text_config: str = "english",
        bm25_k1: float = 1.2,
        bm25_b: float = 0.75,
        context_weight: float = 1.0,
    ) -> None:
        self._space = check_space(space)
        # The space's identity (a hash) names its statements: computed once, not per call.
        self._identity = self._space.identity
        if isinstance(exact_threshold, int) and exact_threshold < 0:
            raise InvalidInput("exact_threshold", f"a non-negative integer, got {exact_threshold}")
        options = IndexOptions(
            m=hnsw_m, ef_construction=hnsw_ef_construction, exact_threshold=exact_threshold
        ).merged(index)
        self._hnsw = (options.m or DEFAULT_M, options.ef_construction or DEFAULT_EF_CONSTRUCTION)
        if self._hnsw[1] < 2 * self._hnsw[0]:
            raise ConfigurationError(
                f"hnsw_ef_construction: pgvector needs at least 2 * hnsw_m = {2 * self._hnsw[0]},"
                f" got {self._hnsw[1]}"
            )
        super().__init__(database, "postgres memory store", owns_database=owns_database)
        self._exact_threshold = (
            DEFAULT_EXACT_THRESHOLD if options.exact_threshold is None else options.exact_threshold
        )
        self._text_config = text_config
        self._k1 = float(bm25_k1)
        self._b = float(bm25_b)
        self._context_weight = float(context_weight)
        self._table: sql.Identifier | None = None
        # (owner, namespace, kinds) -> when a search read it as small.
        self._small: dict[tuple[str, str | None, tuple[str, ...] | None], float] = {}
        self._probes = 0  # searches that ran the probe (tests read it)

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def index_options(self) -> IndexOptions:
        """The effective index parameters: m and ef_construction of an index this
        store builds, the exact threshold of its queries, and the database's
        `hnsw.ef_search`."""
        return IndexOptions(
            m=self._hnsw[0],
            ef_construction=self._hnsw[1],
            ef_search=self._db.ef_search,
            exact_threshold=self._exact_threshold,
        )

    async def _tbl(self) -> sql.Identifier:
        if self._table is None:
            self._table = await self._db.space_table(self._space, self._text_config, self._hnsw)
        return self._table

    # -- writes -------------------------------------------------------------

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        async with self._life.op():
            batch = check_records(records, self._space)
            seen: set[tuple[str, str]] = set()
            repeated: dict[str, list[str]] = {}
            for r in batch:
                if (r.owner, r.id) in seen:
                    repeated.setdefault(r.owner, []).append(r.id)
                seen.add((r.owner, r.id))
            if not batch:
                return
            if len(batch) > self._exact_threshold:
                # Every scope of an owner here may now be large: read the sizes
                # again (searches are right either way; this keeps them fast).
                self._small.clear()
            table = await self._tbl()
            copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(table, _COLS)
            types = [*_COPY_TYPES[:6], self._db_vector_oid(), *_COPY_TYPES[7:]]
            async with self._db.connection() as conn:
                if not repeated:
                    try:
                        async with (
                            conn.transaction(),
                            conn.cursor() as cur,
                            cur.copy(copy_sql) as copy,
                        ):
                            copy.set_types(types)
                            for r in batch:
                                await copy.write_row(
                                    (
                                        r.owner,
                                        r.id,
                                        r.namespace,
                                        r.kind,
                                        r.content,
                                        r.context,
                                        PgVector(r.vector),
                                        r.created_at,
                                        r.updated_at,
                                        r.importance,
                                        _dump_attributes(r.attributes),
                                    )
                                )
                        return
                    except psycopg.errors.UniqueViolation:
                        pass
                existing = await self._existing(conn, table, batch)
            dupes: dict[str, list[str]] = {}
            seen.clear()
            for r in batch:
                if (r.owner, r.id) in seen or (r.owner, r.id) in existing:
                    dupes.setdefault(r.owner, []).append(r.id)
                seen.add((r.owner, r.id))
            if not dupes:  # a concurrent writer's row went away again: report the race
                dupes = repeated or {batch[0].owner: [batch[0].id]}
            owner, ids = next(iter(dupes.items()))
            raise DuplicateRecord(owner, tuple(ids))

    async def bulk_add(
        self,
        batches: Iterable[Sequence[MemoryRecord]] | AsyncIterable[Sequence[MemoryRecord]],
        *,
        maintenance_work_mem: str = "1GB",
    ) -> int:
        """Add many records fast: drop the HNSW index, `add` each batch (binary COPY,
        each batch atomic as in `add`), then build the index once over every row.

        Building the graph once is far cheaper than inserting each row into it
        (docs/postgres.md, "Bulk load"). While the index is absent, vector searches
        still answer exactly, by scanning the owner's rows (slower on large owners).
        The index is re-created even when a batch fails (the error propagates; the
        batches before it stay). Returns the number of records added."""
        added = 0
        await self._drop_hnsw()
        try:
            if isinstance(batches, AsyncIterable):
                async for batch in batches:
                    await self.add(batch)
                    added += len(batch)
            else:
                for batch in batches:
                    await self.add(batch)
                    added += len(batch)
        finally:
            self._small.clear()
            await self._build_hnsw(maintenance_work_mem)
        return added

    @contextlib.asynccontextmanager
    async def bulk_load(
        self, expected: int, *, maintenance_work_mem: str = "1GB"
    ) -> AsyncIterator[bool]:
        """A bulk-load session for about `expected` new records (the optional
        `BulkLoad` capability the importer looks for, docs/portability.md): the
        caller `add`s batches as usual — each atomic, `DuplicateRecord` as always —
        and the HNSW index is built once, on exit, over every row.

        Yields whether the index was dropped: only when that pays, i.e. when
        `expected` (> 0) is at least the rows already stored (rebuilding a large
        index for a few rows would cost more than inserting them) — or when the
        index is already absent (a bulk load that was interrupted: this one
        rebuilds it, even with nothing left to add).
        On an error the index is rebuilt before the error propagates; on a
        cancellation or a kill it stays absent until the next bulk load (or
        `rebuild_index`) — searches still answer exactly meanwhile, by scanning."""
        if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
            raise InvalidInput("expected", f"a non-negative integer, got {expected!r}")
        dropped = False
        if self._space.dimension <= HNSW_MAX_DIMENSION:
            table = await self._tbl()
            async with self._life.op(), self._db.connection() as conn:
                dropped = not await self._hnsw_indexes(conn, table)
                if not dropped and expected > 0:
                    cur = await conn.execute(
                        sql.SQL("SELECT coalesce(sum(n), 0) FROM {}").format(
                            self._db.counts_table(self._space)
                        )
                    )
                    row = await cur.fetchone()
                    dropped = expected >= (int(row[0]) if row is not None else 0)
        if not dropped:
            yield False
            return
        await self._drop_hnsw()
        try:
            yield True
        except Exception:
            # The caller's error is the one to report; a failed build leaves the
            # index to the next bulk load or `rebuild_index`.
            self._small.clear()
            with contextlib.suppress(Exception):
                await self._build_hnsw(maintenance_work_mem)
            raise
        self._small.clear()
        await self._build_hnsw(maintenance_work_mem)

    async def rebuild_index(self, *, maintenance_work_mem: str = "1GB") -> None:
        """Drop the space's HNSW index and build it again with this store's
        `hnsw_m` and `hnsw_ef_construction` (an index keeps the parameters it was
        built with; `hnsw_ef_search` needs no rebuild)."""
        await self._drop_hnsw()
        await self._build_hnsw(maintenance_work_mem)

    @staticmethod
    async def _hnsw_indexes(
        conn: psycopg.AsyncConnection[Any], table: sql.Identifier
    ) -> builtins.list[str]:
        cur = await conn.execute(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(i.relname)"
            " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " JOIN pg_namespace n ON n.oid = i.relnamespace"
            " JOIN pg_am a ON a.oid = i.relam"
            " WHERE x.indrelid = %s::regclass AND a.amname = 'hnsw'",
            (table.as_string(conn),),
        )
        return [str(row[0]) for row in await cur.fetchall()]

    async def _drop_hnsw(self) -> None:
        table = await self._tbl()
        async with self._life.op(), self._db.connection() as conn, conn.transaction():
            for name in await self._hnsw_indexes(conn, table):
                await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.SQL(name)))

    async def _build_hnsw(self, maintenance_work_mem: str) -> None:
        if self._space.dimension > HNSW_MAX_DIMENSION:
            return
        table = await self._tbl()
        async with self._life.op(), self._db.connection() as conn, conn.transaction():
            if await self._hnsw_indexes(conn, table):
                return
            with unbounded(conn):  # a graph over many rows takes minutes
                await self._create_hnsw(conn, table, maintenance_work_mem)

    async def _create_hnsw(
        self, conn: psycopg.AsyncConnection[Any], table: sql.Identifier, maintenance_work_mem: str
    ) -> None:
        # The graph is built in memory when it fits: far faster than on disk.
        await conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,)
        )
        await conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)"
                " WITH (m = {}, ef_construction = {})"
            ).format(
                sql.Identifier(f"mem_{self._identity}_hnsw"[:63]),
                table,
                sql.Literal(self._hnsw[0]),
                sql.Literal(self._hnsw[1]),
            )
        )
        # Fresh statistics, or the planner may skip the new index (it sees
        # an empty or tiny table and prefers a scan plus sort).
        await conn.execute(sql.SQL("ANALYZE {}").format(table))

    async def _existing(
        self, conn: psycopg.AsyncConnection[Any], table: sql.Identifier, batch: list[MemoryRecord]
    ) -> set[tuple[str, str]]:
        cur = await conn.execute(
            sql.SQL(
                "SELECT t.owner, t.id FROM {} t"
                " JOIN unnest(%s::text[], %s::text[]) AS b(owner, id)"
                " ON t.owner = b.owner AND t.id = b.id"
            ).format(table),
            ([r.owner for r in batch], [r.id for r in batch]),
        )
        return {(str(o), str(i)) for o, i in await cur.fetchall()}

    def _db_vector_oid(self) -> int:
        oid = self._db.vector_oid
        assert oid is not None, "the database is opened before any statement"
        return oid

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            table = await self._tbl()
            statement = self._db.cached(
                ("get", self._identity),
                lambda: sql.SQL("SELECT {} FROM {} WHERE owner = %s AND id = %s").format(
                    _COLS, table
                ),
            )
            row = await self._db.fetch_one(statement, (owner, id), binary=True)
            return None if row is None else _record(row)

    async def update(self, record: MemoryRecord) -> None:
        async with self._life.op():
            check_record(record, "record", self._space)
            if not await self._update(record, if_older=False):
                raise NotFound(record.owner, record.id)

    async def update_if_older(self, record: MemoryRecord) -> bool:
        """`VersionedWrites`: replace the record only when the stored version is
        older (the check and the write are one statement)."""
        async with self._life.op():
            check_record(record, "record", self._space)
            return await self._update(record, if_older=True)

    async def _update(self, record: MemoryRecord, *, if_older: bool) -> bool:
        table = await self._tbl()
        condition = " AND updated_at < %s" if if_older else ""
        async with self._db.connection() as conn:
            cur = await conn.execute(
                sql.SQL(
                    "UPDATE {} SET namespace = %s, kind = %s, content = %s, context = %s,"
                    " embedding = %b, created_at = %s, updated_at = %s, importance = %s,"
                    " attributes = %s WHERE owner = %s AND id = %s" + condition
                ).format(table),
                (
                    record.namespace,
                    record.kind,
                    record.content,
                    record.context,
                    PgVector(record.vector),
                    record.created_at,
                    record.updated_at,
                    record.importance,
                    _dump_attributes(record.attributes),
                    record.owner,
                    record.id,
                    *((record.updated_at,) if if_older else ()),
                ),
            )
            return cur.rowcount > 0

    async def delete(self, owner: str, id: str) -> bool:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            return await self._delete(owner, id, None)

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        """`VersionedWrites`: delete the record only when it is that version."""
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            return await self._delete(owner, id, require_utc(updated_at, "updated_at"))

    async def _delete(self, owner: str, id: str, version: datetime | None) -> bool:
        table = await self._tbl()
        condition = " AND updated_at = %s" if version is not None else ""
        async with self._db.connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE owner = %s AND id = %s" + condition).format(table),
                (owner, id, *((version,) if version is not None else ())),
            )
            return cur.rowcount > 0

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
            table = await self._tbl()
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE {}").format(table, _filters(namespace, wanted)),
                    {"owner": owner, "namespace": namespace, "kinds": wanted},
                )
                return max(cur.rowcount, 0)

    # -- reads --------------------------------------------------------------

    def search_statement(
        self, table: sql.Identifier, namespace: str | None, kinds: list[str] | None
    ) -> sql.SQL:
        """The gated search statement (the probe): it reads the scope's size
        from the counts table in its own snapshot, then runs the exact branch
        (size <= threshold) or the HNSW one, and returns that size as an extra
        last column of every row. `search` runs it when it does not know the
        scope to be small (public, with `search_params`, for plan tests)."""
        key = ("search", self._identity, namespace is None, kinds is None)
        return self._db.cached(key, lambda: self._probe_sql(table, namespace, kinds))

    def exact_statement(
        self, table: sql.Identifier, namespace: str | None, kinds: list[str] | None
    ) -> sql.SQL:
        """The exact search statement alone: what `search` runs for a scope it
        read as small less than `SIZE_TTL` ago. It sorts the scope's row
        addresses (`ctid`) by `(distance, id)` and reads the `k` first rows by
        address (a TID scan, in the statement's one snapshot), in no particular
        order: the sort then moves a distance, an id and an address per row,
        not whole rows, and `search` orders the rows itself."""
        key = ("search-exact", self._identity, namespace is None, kinds is None)
        return self._db.cached(
            key,
            lambda: sql.SQL(
                "SELECT {c} FROM {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {t} WHERE {w}"
                " ORDER BY coalesce(nullif(embedding <=> %(q)b, 'NaN'), 1.0), id LIMIT %(k)s))"
            ).format(t=table, w=_filters(namespace, kinds), c=_COLS),
        )

    def _probe_sql(
        self, table: sql.Identifier, namespace: str | None, kinds: list[str] | None
    ) -> sql.Composed:
        where = _filters(namespace, kinds)
        return sql.SQL(
            "WITH n AS (SELECT coalesce(sum(n), 0) AS n FROM {n} WHERE {w})"
            " (SELECT {c}, (SELECT n FROM n) FROM (SELECT {c} FROM {t} WHERE {w}"
            "   ORDER BY coalesce(nullif(embedding <=> %(q)b, 'NaN'), 1.0), id LIMIT %(k)s) AS e"
            "  WHERE (SELECT n FROM n) <= %(threshold)s)"
            " UNION ALL"
            " (SELECT {c}, (SELECT n FROM n) FROM ("
            "   (SELECT {c} FROM (SELECT {c} FROM {t} WHERE {w}"
            "     ORDER BY embedding <=> %(q)b LIMIT %(candidates)s) AS graph"
            "    WHERE vector_norm(embedding) > 0)"
            "   UNION ALL"
            "   (SELECT {c} FROM {t} WHERE {w} AND vector_norm(embedding) = 0"
            "    ORDER BY id LIMIT %(k)s)) AS approx"
            "  WHERE (SELECT n FROM n) > %(threshold)s"
            "  ORDER BY coalesce(nullif(embedding <=> %(q)b, 'NaN'), 1.0), id LIMIT %(k)s)"
        ).format(
            t=table,
            w=where,
            c=_COLS,
            n=self._db.counts_table(self._space),
        )

    def search_params(
        self,
        owner: str,
        query: npt.NDArray[np.float32],
        limit: int,
        namespace: str | None,
        kinds: list[str] | None,
        fetch: int | None = None,
    ) -> dict[str, Any]:
        """The statements' parameters; `fetch` rows (default `limit + 1`)."""
        if fetch is None:
            fetch = limit + _SLACK
        return {
            "owner": owner,
            "namespace": namespace,
            "kinds": kinds,
            "q": PgVector(query),
            "k": fetch,
            "candidates": limit + max(2 * limit, 100),
            "threshold": self._exact_threshold,
        }

    def search_path(
        self, owner: str, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> str:
        """Which statement the next `search` of this scope runs: `"exact"` (the
        scope was read as small, at most the exact threshold, less than
        `SIZE_TTL` seconds ago) or `"probe"` (the gated statement, which decides
        between the exact scan and the HNSW index from the counts table in its
        own snapshot, and tells `search` the size it read)."""
        wanted = check_filters(namespace, kinds)
        key = (owner, namespace, None if wanted is None else tuple(wanted))
        return "probe" if self._needs_probe(key, time.monotonic()) else "exact"

    def _needs_probe(self, key: tuple[str, str | None, tuple[str, ...] | None], now: float) -> bool:
        """Whether a search of scope `key` at `now` runs the gated statement:
        the scope was not read as small less than `SIZE_TTL` seconds ago."""
        since = self._small.get(key)
        return since is None or now - since >= self.SIZE_TTL

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
            table = self._table if self._table is not None else await self._tbl()
            # One statement per call. A scope read as small (at most the exact
            # threshold) less than SIZE_TTL ago runs the exact statement alone:
            # exact is right at any size, so a scope that grew meanwhile is only
            # slower for that long. Any other scope runs the gated statement,
            # whose HNSW branch runs only when the counts, read in the
            # statement's own snapshot, say the scope is large.
            key = (owner, namespace, None if wanted is None else tuple(wanted))
            small = self._small
            now = time.monotonic()
            probe = self._needs_probe(key, now)
            if probe:
                self._probes += 1
                statement = self.search_statement(table, namespace, wanted)
            else:
                statement = self.exact_statement(table, namespace, wanted)
            params = self.search_params(owner, query, limit, namespace, wanted)
            fetch = params["k"]
            dimension = self._space.dimension
            while True:
                # The vectors come as bytes and are converted together
                # (`vectors_from_bytes`): the same float32 values as the
                # connection's row-by-row loader, in one numpy conversion.
                rows = await self._db.fetch_all(statement, params, binary=True, vector_bytes=True)
                if not rows:
                    small.pop(key, None)
                    return []
                if probe:
                    if rows[0][-1] <= self._exact_threshold:
                        if len(small) >= _SIZES:
                            small.clear()
                        small[key] = now
                    else:
                        small.pop(key, None)
                ids = [r[1] for r in rows]  # `id` is text: already a str
                vectors = vectors_from_bytes([r[6] for r in rows], dimension)
                # The in-process stores' arithmetic, bit for bit (`exact_cosines`):
                # cosines that tie exactly round (and so rank) as everywhere else.
                scores = exact_cosines(vectors, query)
                hits = top_k(scores, ids, limit, min_score)
                lowest = float(scores.min())
                if len(rows) < fetch or _settled(lowest, hits, limit, min_score):
                    break
                fetch *= 4
                params["k"] = fetch
            return _hits(rows, vectors, hits, probe)

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
            table = await self._tbl()
            where = _filters(namespace, wanted)
            if after is not None:
                where = sql.SQL("{} AND (created_at, id) < (%(after_at)s, %(after_id)s)").format(
                    where
                )
            params: dict[str, Any] = {
                "owner": owner,
                "namespace": namespace,
                "kinds": wanted,
                "limit": limit + 1,
                "after_at": None if after is None else after[0],
                "after_id": None if after is None else after[1],
            }
            statement = self._db.cached(
                ("list", self._identity, namespace is None, wanted is None, after is None),
                lambda: sql.SQL(
                    "SELECT {} FROM {} WHERE {} ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
                ).format(_COLS, table, where),
            )
            rows = await self._db.fetch_all(statement, params, binary=True)
            page = tuple(_record(r) for r in rows[:limit])
            more = len(rows) > limit
            next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if more else None
            return Page(records=page, next_cursor=next_cursor)

    async def owners(self) -> builtins.list[str]:
        """Every owner with a record in this space, sorted by code point (`OwnerListing`)."""
        async with self._life.op():
            table = await self._tbl()
            rows = await self._db.fetch_all(
                sql.SQL('SELECT DISTINCT owner COLLATE "C" AS o FROM {} ORDER BY o').format(table),
                (),
            )
            return [row[0] for row in rows]

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> builtins.list[ScoredRecord]:
        """BM25 over content (and, down-weighted, the indexing context)."""
        async with self._life.op():
            query, wanted = check_search_text_args(owner, query, limit, namespace, kinds)
            if not query.strip():
                return []
            table = await self._tbl()
            where = _filters(namespace, wanted)
            statement = self._db.cached(
                ("bm25", self._identity, namespace is None, wanted is None),
                lambda: sql.SQL(_BM25).format(
                    t=table,
                    w=where,
                    c=sql.SQL(", ").join(sql.Identifier("r", c) for c in _COLUMNS),
                ),
            )
            params = {
                "owner": owner,
                "namespace": namespace,
                "kinds": wanted,
                "query": query,
                "cfg": self._text_config,
                "k1": self._k1,
                "b": self._b,
                "ctx": self._context_weight,
                "limit": limit,
            }
            rows = await self._db.fetch_all(statement, params, binary=True)
            return [ScoredRecord(record=_record(r[:-1]), score=float(r[-1])) for r in rows]

    # -- lifecycle ----------------------------------------------------------


# BM25 in one statement. Query lexemes come from to_tsvector (never a syntax
# error), OR-ed into a tsquery built from quoted lexemes; the GIN index finds
# the hits, document frequencies and the average length come from the owner's
# filtered records; term frequency counts content positions as 1 and context
# positions as %(ctx)s (1 by default, as the other backends count them).
_BM25 = """
WITH terms AS (
    SELECT coalesce(array_agg(lex), '{{}}') AS lexemes
    FROM unnest(tsvector_to_array(to_tsvector(%(cfg)s::regconfig, %(query)s))) AS lex
), tq AS MATERIALIZED (
    SELECT lexemes, (
        SELECT string_agg(
            '''' || replace(replace(x, '\\', '\\\\'), '''', '''''') || '''', ' | ')
        FROM unnest(lexemes) AS x
    )::tsquery AS q
    FROM terms
), hits AS (
    SELECT r.id, r.tsv, r.doclen FROM {t} AS r, tq WHERE {w} AND r.tsv @@ tq.q
), corpus AS MATERIALIZED (
    -- The mean length as `domain.lexical` takes it: records without a term
    -- count (an owner of mostly empty records has a mean below 1).
    SELECT count(*)::float8 AS n, coalesce(avg(doclen), 1)::float8 AS avgdl
    FROM {t} WHERE {w}
), tf AS (
    -- Only the query's lexemes survive ts_filter(setweight(...)), once for the
    -- content positions (weight A) and once for the context ones (B).
    SELECT id, dl, lexeme, sum(f) AS f FROM (
        SELECT h.id, h.doclen::float8 AS dl, u.lexeme,
               cardinality(u.positions)::float8 AS f
        FROM hits AS h, tq,
             unnest(ts_filter(setweight(ts_filter(h.tsv, '{{a}}'), 'd', tq.lexemes), '{{d}}'))
                 AS u
        UNION ALL
        SELECT h.id, h.doclen::float8, u.lexeme,
               cardinality(u.positions) * %(ctx)s::float8
        FROM hits AS h, tq,
             unnest(ts_filter(setweight(ts_filter(h.tsv, '{{b}}'), 'd', tq.lexemes), '{{d}}'))
                 AS u
    ) AS parts
    GROUP BY id, dl, lexeme
), df AS MATERIALIZED (
    SELECT lexeme, count(*)::float8 AS df FROM tf GROUP BY lexeme
), scored AS (
    SELECT tf.id,
           sum(ln(1.0 + (c.n - df.df + 0.5) / (df.df + 0.5))
               * tf.f * (%(k1)s + 1.0)
               / (tf.f + %(k1)s * (1.0 - %(b)s + %(b)s * tf.dl / greatest(c.avgdl, 1e-9)))
           ) AS score
    FROM tf JOIN df USING (lexeme) CROSS JOIN corpus AS c
    GROUP BY tf.id
)
SELECT {c}, s.score
FROM scored AS s JOIN {t} AS r ON r.owner = %(owner)s AND r.id = s.id
ORDER BY s.score DESC, r.id ASC
LIMIT %(limit)s
"""

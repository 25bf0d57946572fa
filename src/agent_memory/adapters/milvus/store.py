"""`MemoryStore` (and `KeywordSearch`) on Milvus, through pymilvus's `MilvusClient`.

One collection per embedding space (`<prefix><space.identity>`: a float vector
of the space's dimension under COSINE, the owner/namespace/kind/id scalar
fields, a BM25 sparse field for keyword candidates) holds every owner's
records; the owner filter is part of every expression. Ranking agrees with
the in-process oracle: Milvus selects the candidates and the exact cosine
scores are recomputed from the stored vectors, so scores and ties (id
ascending) match. The same code serves Milvus Lite (`MilvusClient("x.db")`, in
process) and a Milvus server; collections are created with Strong consistency,
so a read sees every write acknowledged before it.

pymilvus's asyncio client waits for index builds through a call Milvus Lite
does not implement, so the blocking client runs in worker threads
(`asyncio.to_thread`); the event loop never blocks on Milvus.

Milvus inserts duplicate primary keys silently, so `add` reads the batch's
keys first and rejects duplicates before writing anything; the check and the
write are serialised per (client, collection) in this process, which is why
`concurrent_duplicate_rejection` is not declared (two processes may race).

Keyword terms are derived from the text by `domain.lexical`; the collection
records the `LEXICAL_VERSION` they follow (collection property
`agent_memory.lexical`), and a store opening a collection whose terms follow
another version (or none recorded) re-derives them (`_migrate_terms`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from pymilvus import DataType, Function, FunctionType, MilvusClient
from pymilvus.exceptions import MilvusException

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_filters,
    check_list_args,
    check_no_duplicates,
    check_record,
    check_records,
    check_search_args,
    check_search_text_args,
    check_space,
)
from agent_memory.adapters.milvus._codec import (
    ALL_FIELDS,
    FIELD_ATTRIBUTES,
    FIELD_CONTENT,
    FIELD_CONTEXT,
    FIELD_CREATED,
    FIELD_ID,
    FIELD_IMPORTANCE,
    FIELD_KIND,
    FIELD_NAMESPACE,
    FIELD_OWNER,
    FIELD_PK,
    FIELD_SPARSE,
    FIELD_TERMS,
    FIELD_TERMS_COMPLETE,
    FIELD_TOKENS,
    FIELD_UPDATED,
    FIELD_VECTOR,
    MAX_VARCHAR_BYTES,
    hashed_terms,
    primary_key,
    quote,
    record_from_row,
    rows,
)
from agent_memory.domain import lexical
from agent_memory.domain.errors import (
    BackendUnavailable,
    ConfigurationError,
    DimensionMismatch,
    NotFound,
)
from agent_memory.domain.lexical import bm25_scores, query_terms, term_counts
from agent_memory.domain.ranking import (
    encode_cursor,
    top_k,
)
from agent_memory.domain.records import (
    EmbeddingSpace,
    MemoryRecord,
    Page,
    ScoredRecord,
)
from agent_memory.domain.time import from_micros, to_micros
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.domain.vector_index import exact_cosines

__all__ = [
    "DEFAULT_COLLECTION_PREFIX",
    "LEXICAL_PROGRESS_PROPERTY",
    "LEXICAL_PROPERTY",
    "MilvusMemoryStore",
]

DEFAULT_COLLECTION_PREFIX = "agent_memory_"
_T = TypeVar("_T")
_BACKEND = "milvus"
# Candidates asked for beyond `limit`, so that ties at the cut resolve by id.
_SEARCH_SLACK = 8
# Largest gap between Milvus's float32 score and the exact recomputed one.
_SCORE_EPS = 1e-4
# Milvus answers at most this many rows per query or search (offset + limit).
_WINDOW = 16_384
_INSERT_BATCH = 1_024
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (MilvusException, OSError, TimeoutError)
_HEX = "0123456789abcdef"
_SCALAR_INDEXED = (FIELD_OWNER, FIELD_NAMESPACE, FIELD_KIND)
_Hits = list[ScoredRecord]
_Row = dict[str, Any]
#: Collection properties: the `domain.lexical.LEXICAL_VERSION` the stored terms
#: follow, and the progress of a re-derivation ("<version>:<last pk digit done>").
LEXICAL_PROPERTY = "agent_memory.lexical"
LEXICAL_PROGRESS_PROPERTY = "agent_memory.lexical_progress"

_WRITE_LOCKS: weakref.WeakKeyDictionary[MilvusClient, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _write_lock(client: MilvusClient, collection: str) -> asyncio.Lock:
    locks = _WRITE_LOCKS.setdefault(client, {})
    lock = locks.get(collection)
    if lock is None:
        lock = locks[collection] = asyncio.Lock()
    return lock


def scope_expression(owner: str, namespace: str | None, kinds: Sequence[str] | None) -> str:
    """The filter of an owner (always) plus the optional namespace and kinds."""
    parts = [f"{FIELD_OWNER} == {quote(owner)}"]
    if namespace is not None:
        parts.append(f"{FIELD_NAMESPACE} == {quote(namespace)}")
    if kinds is not None:
        parts.append(f"{FIELD_KIND} in [{', '.join(quote(k) for k in kinds)}]")
    return " and ".join(parts)


def _properties(info: dict[str, Any]) -> dict[str, str]:
    """A collection's properties (`describe_collection`) as strings."""
    found = info.get("properties") or {}
    return {str(k): str(v) for k, v in dict(found).items()}


def _pk_list(pks: Sequence[str]) -> str:
    return f"{FIELD_PK} in [{', '.join(quote(p) for p in pks)}]"


class MilvusMemoryStore:
    """`MemoryStore` (and `KeywordSearch`) on a Milvus collection.

    `client` may be shared by several store handles; the store closes it only
    when `owns_client`. `index_type` is the vector index built when this store
    creates the collection (`FLAT`: exact, the default; `HNSW`, `AUTOINDEX` ... on
    a server for large collections). `flush_rows`: after that many rows written
    through this handle, seal them (`flush`). Milvus Lite keeps unsealed rows in a
    memtable that every filtered query scans row by row (its scalar indexes cover
    sealed segments only), so the Lite factory sets 1024; 0 (the default) leaves
    sealing to a server.
    """

    def __init__(
        self,
        client: MilvusClient,
        space: EmbeddingSpace,
        *,
        collection_prefix: str = DEFAULT_COLLECTION_PREFIX,
        owns_client: bool = False,
        index_type: str = "FLAT",
        flush_rows: int = 0,
    ) -> None:
        self._client = client
        self._space = check_space(space)
        self._collection_name = f"{collection_prefix}{space.identity}"
        self._owns_client = owns_client
        self._index_type = index_type
        self._flush_rows = flush_rows
        self._unflushed = 0
        self._life = Lifecycle("milvus memory store")
        self._ready = False
        self._init_lock = asyncio.Lock()

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def collection_name(self) -> str:
        """The collection this store reads and writes."""
        return self._collection_name

    @property
    def client(self) -> MilvusClient:
        return self._client

    # -- plumbing -------------------------------------------------------------

    async def _call(self, what: str, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Run one blocking client call in a worker thread; transport and server
        failures -> `BackendUnavailable`."""
        try:
            return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
        except _TRANSPORT_ERRORS as exc:
            raise BackendUnavailable(_BACKEND, f"{what}: {type(exc).__name__}: {exc}") from exc

    async def _collection(self) -> str:
        """The collection name, once it exists with this space's dimension and is loaded."""
        if not self._ready:
            async with self._init_lock:
                if not self._ready:
                    await self._prepare()
                    self._ready = True
        return self._collection_name

    def _schema(self) -> Any:
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(FIELD_PK, DataType.VARCHAR, is_primary=True, max_length=64)
        for name in (FIELD_OWNER, FIELD_ID, FIELD_NAMESPACE, FIELD_KIND):
            schema.add_field(name, DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES)
        for name in (FIELD_CONTENT, FIELD_CONTEXT, FIELD_ATTRIBUTES):
            schema.add_field(name, DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES)
        schema.add_field(FIELD_CREATED, DataType.INT64)
        schema.add_field(FIELD_UPDATED, DataType.INT64)
        schema.add_field(FIELD_IMPORTANCE, DataType.DOUBLE)
        schema.add_field(FIELD_TOKENS, DataType.INT64)
        schema.add_field(
            FIELD_TERMS,
            DataType.VARCHAR,
            max_length=MAX_VARCHAR_BYTES,
            enable_analyzer=True,
            analyzer_params={"tokenizer": "standard"},
        )
        schema.add_field(FIELD_TERMS_COMPLETE, DataType.BOOL)
        schema.add_field(FIELD_SPARSE, DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field(FIELD_VECTOR, DataType.FLOAT_VECTOR, dim=self._space.dimension)
        schema.add_function(
            Function(
                name="terms_bm25",
                function_type=FunctionType.BM25,
                input_field_names=[FIELD_TERMS],
                output_field_names=[FIELD_SPARSE],
            )
        )
        return schema

    def _index_params(self) -> Any:
        params = MilvusClient.prepare_index_params()
        params.add_index(field_name=FIELD_VECTOR, index_type=self._index_type, metric_type="COSINE")
        params.add_index(
            field_name=FIELD_SPARSE, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
        )
        # Scalar indexes: every query filters by owner (Milvus Lite scans rows without).
        for name in _SCALAR_INDEXED:
            params.add_index(field_name=name, index_type="INVERTED", index_name=name)
        return params

    async def _prepare(self) -> None:
        name = self._collection_name
        client = self._client
        if not await self._call("has_collection", client.has_collection, name):
            try:
                await self._call(
                    "create_collection",
                    client.create_collection,
                    name,
                    schema=self._schema(),
                    consistency_level="Strong",
                    properties={LEXICAL_PROPERTY: lexical.LEXICAL_VERSION},
                )
            except BackendUnavailable:
                # Another handle may have created it first; anything else is an error.
                if not await self._call("has_collection", client.has_collection, name):
                    raise
        indexed = await self._call("list_indexes", client.list_indexes, name)
        if len(indexed) < 2 + len(_SCALAR_INDEXED):
            # Without waiting (pymilvus would poll every 0.5 s): loading waits for the
            # build. Another handle may be creating them too; loading tells.
            with contextlib.suppress(BackendUnavailable):
                await self._call(
                    "create_index", client.create_index, name, self._index_params(), sync=False
                )
        info = await self._call("describe_collection", client.describe_collection, name)
        fields = {f["name"]: f for f in info.get("fields", [])}
        missing = sorted({FIELD_PK, *ALL_FIELDS, FIELD_TERMS, FIELD_SPARSE} - set(fields))
        if missing:
            raise ConfigurationError(
                f"milvus collection {name!r} lacks the fields {missing}: it was not created "
                "by this store; use another collection prefix"
            )
        dim = int(fields[FIELD_VECTOR].get("params", {}).get("dim", -1))
        if dim != self._space.dimension:
            raise DimensionMismatch(self._space.dimension, dim, where=f"milvus collection {name!r}")
        await self._call("load_collection", client.load_collection, name)
        await self._migrate_terms(name, _properties(info))

    async def _migrate_terms(self, name: str, properties: dict[str, str]) -> int:
        """Re-derive every row's keyword fields (`terms`, `terms_complete`,
        `token_count`) when the collection's terms follow another
        `domain.lexical.LEXICAL_VERSION` than this release's (or none is
        recorded: collections from before the marker); returns the rows rewritten.

        Rows are rewritten whole (Milvus has no partial update) through `upsert`,
        one primary-key digit range at a time (keys are uniform hex digests), each
        range read just before it is written, in batches of `_INSERT_BATCH`. The
        finished range is recorded (`LEXICAL_PROGRESS_PROPERTY`), so a migration
        cut short resumes at the next range; the version property is set last.
        """
        version = lexical.LEXICAL_VERSION
        if properties.get(LEXICAL_PROPERTY) == version:
            return 0
        client = self._client
        done = 0
        async with _write_lock(client, name):
            info = await self._call("describe_collection", client.describe_collection, name)
            properties = _properties(info)
            if properties.get(LEXICAL_PROPERTY) == version:
                return 0  # another handle of this process finished it meanwhile
            progress = properties.get(LEXICAL_PROGRESS_PROPERTY, "")
            after = progress.partition(":")[2] if progress.startswith(f"{version}:") else ""
            every = f"{FIELD_PK} != {quote('')}"
            for digit in _HEX:
                if after and digit <= after:
                    continue
                keys = await self._scan(name, every, [FIELD_PK], digit)
                pks = [str(row[FIELD_PK]) for row in keys]
                for start in range(0, len(pks), _INSERT_BATCH):
                    found = await self._fetch(name, pks[start : start + _INSERT_BATCH], ALL_FIELDS)
                    records = [record_from_row(row) for row in found.values()]
                    if records:
                        await self._write(name, records, replace=True)
                    done += len(records)
                await self._set_properties(name, {LEXICAL_PROGRESS_PROPERTY: f"{version}:{digit}"})
            await self._set_properties(name, {LEXICAL_PROPERTY: version})
        return done

    async def _set_properties(self, name: str, properties: dict[str, str]) -> None:
        await self._call(
            "alter_collection_properties",
            self._client.alter_collection_properties,
            name,
            properties=properties,
        )

    async def _query(self, name: str, expr: str, fields: list[str], limit: int) -> list[_Row]:
        out: list[_Row] = await self._call(
            "query",
            self._client.query,
            name,
            filter=expr,
            output_fields=fields,
            limit=limit,
            consistency_level="Strong",
        )
        return out

    async def _count(self, name: str, expr: str) -> int:
        found = await self._call(
            "count",
            self._client.query,
            name,
            filter=expr,
            output_fields=["count(*)"],
            consistency_level="Strong",
        )
        return int(found[0]["count(*)"]) if found else 0

    async def _scan(self, name: str, expr: str, fields: list[str], prefix: str = "") -> list[_Row]:
        """Every row matching `expr` (`fields` only). Milvus answers at most
        `_WINDOW` rows a query, so a query that comes back full is read again split
        by primary-key prefix (keys are uniform hex digests), each range the same
        way. Only the query's own length decides: a count taken before it would
        not, since rows written between the two would cut the answer silently."""
        scoped = expr
        if prefix:
            upper = prefix[:-1] + ("g" if prefix[-1] == "f" else _HEX[_HEX.index(prefix[-1]) + 1])
            scoped = f"({expr}) and {FIELD_PK} >= {quote(prefix)} and {FIELD_PK} < {quote(upper)}"
        found = await self._query(name, scoped, fields, _WINDOW)
        if len(found) < _WINDOW:
            return found
        out: list[_Row] = []
        for digit in _HEX:
            out.extend(await self._scan(name, expr, fields, prefix + digit))
        return out

    async def _fetch(self, name: str, pks: Sequence[str], fields: list[str]) -> dict[str, _Row]:
        """Rows by primary key (missing keys are absent)."""
        out: dict[str, _Row] = {}
        for start in range(0, len(pks), _WINDOW // 4):
            chunk = pks[start : start + _WINDOW // 4]
            found = await self._query(name, _pk_list(chunk), [FIELD_PK, *fields], len(chunk))
            out.update((str(row[FIELD_PK]), row) for row in found)
        return out

    async def _write(
        self, name: str, records: Sequence[MemoryRecord], *, replace: bool = False
    ) -> None:
        op = self._client.upsert if replace else self._client.insert
        for start in range(0, len(records), _INSERT_BATCH):
            chunk = records[start : start + _INSERT_BATCH]
            data = rows(chunk, np.stack([r.vector for r in chunk]))
            await self._call("upsert" if replace else "insert", op, name, data)
        await self._written(name, len(records))

    async def _written(self, name: str, count: int) -> None:
        self._unflushed += count
        if self._flush_rows and self._unflushed >= self._flush_rows:
            self._unflushed = 0
            await self._call("flush", self._client.flush, name)

    # -- MemoryStore ----------------------------------------------------------

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        async with self._life.op():
            batch = check_records(records, self._space)
            if not batch:
                return
            pks = [primary_key(r.owner, r.id) for r in batch]
            # Bounds are checked before any I/O: a batch that cannot be stored writes nothing.
            rows(batch, np.stack([r.vector for r in batch]))
            name = await self._collection()
            async with _write_lock(self._client, name):
                stored = set(await self._fetch(name, pks, []))
                if stored or len(set(pks)) != len(pks):
                    check_no_duplicates(batch, pks, stored)
                await self._write(name, batch)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            name = await self._collection()
            pk = primary_key(owner, id)
            row = (await self._fetch(name, [pk], ALL_FIELDS)).get(pk)
            if row is None or row.get(FIELD_OWNER) != owner or row.get(FIELD_ID) != id:
                return None
            return record_from_row(row)

    async def update(self, record: MemoryRecord) -> None:
        async with self._life.op():
            check_record(record, "record", self._space)
            rows([record], np.stack([record.vector]))
            name = await self._collection()
            pk = primary_key(record.owner, record.id)
            async with _write_lock(self._client, name):
                if not await self._fetch(name, [pk], []):
                    raise NotFound(record.owner, record.id)
                await self._write(name, [record], replace=True)

    async def delete(self, owner: str, id: str) -> bool:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            name = await self._collection()
            pk = primary_key(owner, id)
            async with _write_lock(self._client, name):
                if not await self._fetch(name, [pk], []):
                    return False
                await self._call("delete", self._client.delete, name, filter=_pk_list([pk]))
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
    ) -> _Hits:
        async with self._life.op():
            query, wanted = check_search_args(
                owner, vector, limit, namespace, kinds, min_score, self._space
            )
            if wanted == []:
                return []
            name = await self._collection()
            expr = scope_expression(owner, namespace, wanted)
            if not np.any(query):
                # Every score is 0 (the engine cannot rank by a zero vector): rank by id.
                found = await self._scan(name, expr, ALL_FIELDS)
                return self._rank(found, query, limit, min_score)
            as_list = query.tolist()
            fetch = min(limit + _SEARCH_SLACK, _WINDOW)
            while True:
                result = await self._call(
                    "search",
                    self._client.search,
                    name,
                    data=[as_list],
                    anns_field=FIELD_VECTOR,
                    filter=expr,
                    limit=fetch,
                    output_fields=ALL_FIELDS,
                    search_params={"metric_type": "COSINE"},
                    consistency_level="Strong",
                )
                found_hits = list(result[0]) if result else []
                if not found_hits:
                    return []
                found = [dict(h["entity"]) for h in found_hits]
                hits = self._rank(found, query, limit, min_score)
                if len(found_hits) < fetch or fetch >= _WINDOW:
                    return hits  # every match was seen (or the engine's window is full)
                # Anything not fetched scored at most the lowest engine score; stop
                # once that is clearly below the score at the cut.
                if len(hits) == limit:
                    cut = hits[-1].score
                else:
                    cut = -1.0 if min_score is None else float(min_score)
                if min(float(h["distance"]) for h in found_hits) + _SCORE_EPS < cut:
                    return hits
                fetch = min(fetch * 2, _WINDOW)

    @staticmethod
    def _rank(
        found: list[_Row], query: npt.NDArray[np.float32], limit: int, min_score: float | None
    ) -> _Hits:
        if not found:
            return []
        ids = [str(row[FIELD_ID]) for row in found]
        # the in-process stores' arithmetic, bit for bit (`exact_cosines`)
        scores = exact_cosines(np.asarray([row[FIELD_VECTOR] for row in found], np.float32), query)
        return [
            ScoredRecord(record=record_from_row(found[i]), score=s)
            for i, s in top_k(scores, ids, limit, min_score)
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
        """Keys `(created_us, id)` of the owner's matching rows at or before the
        cursor are read (light fields) and ordered here: Milvus queries have no
        ORDER BY; then the page's rows are read whole."""
        async with self._life.op():
            wanted, after = check_list_args(owner, limit, namespace, kinds, cursor)
            if wanted == []:
                return Page(records=(), next_cursor=None)
            name = await self._collection()
            expr = scope_expression(owner, namespace, wanted)
            if after is not None:
                expr = f"{expr} and {FIELD_CREATED} <= {to_micros(after[0])}"
            light = await self._scan(name, expr, [FIELD_ID, FIELD_CREATED])
            keys = sorted(
                ((int(row[FIELD_CREATED]), str(row[FIELD_ID])) for row in light), reverse=True
            )
            if after is not None:
                bound = (to_micros(after[0]), after[1])
                keys = [k for k in keys if k < bound]
            page_keys = keys[:limit]
            pks = [primary_key(owner, rid) for _, rid in page_keys]
            found = await self._fetch(name, pks, ALL_FIELDS)
            records = tuple(record_from_row(found[pk]) for pk in pks if pk in found)
            next_cursor = None
            if len(keys) > limit:
                last_us, last_id = page_keys[-1]
                next_cursor = encode_cursor(from_micros(last_us), last_id)
            return Page(records=records, next_cursor=next_cursor)

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
            if wanted == []:
                return 0
            name = await self._collection()
            expr = scope_expression(owner, namespace, wanted)
            async with _write_lock(self._client, name):
                count = await self._count(name, expr)
                if count == 0:
                    return 0
                await self._call("delete", self._client.delete, name, filter=expr)
                return count

    async def owners(self) -> builtins.list[str]:
        """Every owner with a record in this space, sorted (`OwnerListing`)."""
        async with self._life.op():
            name = await self._collection()
            found = await self._scan(name, f"{FIELD_PK} != {quote('')}", [FIELD_OWNER])
            return sorted({str(row[FIELD_OWNER]) for row in found})

    async def ping(self) -> None:
        async with self._life.op():
            await self._call("list_collections", self._client.list_collections)

    async def close(self) -> None:
        if await self._life.begin_close() and self._owns_client:
            # Closing a client whose server is gone: nothing is left to release.
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await asyncio.to_thread(self._client.close)

    # -- KeywordSearch --------------------------------------------------------

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> _Hits:
        """BM25 over content + context with statistics over the owner's filtered
        records only (`domain.lexical`, as the in-process store computes it).
        Milvus's BM25 index selects the candidates (rows holding a query term,
        owner and filters inside the search); its own scores use collection-wide
        statistics, so they only select and never rank."""
        async with self._life.op():
            query, wanted = check_search_text_args(owner, query, limit, namespace, kinds)
            terms = query_terms(query)
            if not terms or wanted == []:
                return []
            name = await self._collection()
            expr = scope_expression(owner, namespace, wanted)
            corpus = await self._scan(name, expr, [FIELD_TOKENS])
            if not corpus:
                return []
            text_fields = [FIELD_ID, FIELD_CONTENT, FIELD_CONTEXT]
            if len(corpus) < _WINDOW:
                result = await self._call(
                    "search",
                    self._client.search,
                    name,
                    data=[" ".join(hashed_terms(terms))],
                    anns_field=FIELD_SPARSE,
                    filter=expr,
                    limit=len(corpus),
                    output_fields=text_fields,
                    search_params={"metric_type": "BM25"},
                    consistency_level="Strong",
                )
                candidates = {
                    str(h["entity"][FIELD_ID]): dict(h["entity"]) for h in (result[0] or [])
                }
                # Rows whose terms did not fit their field are always candidates.
                partial = f"{expr} and {FIELD_TERMS_COMPLETE} == false"
                for row in await self._scan(name, partial, text_fields):
                    candidates[str(row[FIELD_ID])] = row
            else:
                rows_all = await self._scan(name, expr, text_fields)
                candidates = {str(row[FIELD_ID]): row for row in rows_all}
            if not candidates:
                return []
            ids = sorted(candidates)
            docs = [
                term_counts(f"{candidates[i][FIELD_CONTENT]}\n{candidates[i][FIELD_CONTEXT]}")
                for i in ids
            ]
            doc_freq = {t: sum(1 for counts, _ in docs if t in counts) for t in terms}
            total = len(corpus)
            scores = bm25_scores(
                terms,
                docs,
                total_docs=total,
                avg_length=sum(int(r[FIELD_TOKENS]) for r in corpus) / total,
                doc_freq=doc_freq,
            )
            ranked = sorted(
                ((-s, i) for s, i in zip(scores, ids, strict=True) if s > 0.0),
            )[:limit]
            pks = [primary_key(owner, i) for _, i in ranked]
            found = await self._fetch(name, pks, ALL_FIELDS)
            return [
                ScoredRecord(record=record_from_row(found[pk]), score=-neg)
                for (neg, _), pk in zip(ranked, pks, strict=True)
                if pk in found
            ]

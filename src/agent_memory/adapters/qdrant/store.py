"""`MemoryStore` on Qdrant (qdrant-client's `AsyncQdrantClient`).

One collection per embedding space (`<prefix><space.identity>`, cosine
distance, the space's dimension) holds every owner's records; the owner filter
is part of every query. Ranking agrees with the in-process oracle: Qdrant
selects the candidates, and the exact cosine scores are recomputed from the
stored vector so that scores and ties (id ascending) match. Works the same on
a Qdrant server and on qdrant-client's local mode (`location=":memory:"` or a
path).

Qdrant upserts silently, so `add` reads the batch's point ids first and
rejects duplicates before writing anything. The check and the write are
serialised per (client, collection) inside this process; two processes adding
the same id at the same moment can both succeed (the later write wins), which
is why the adapter declares `concurrent_duplicate_rejection=False`.

Keyword search uses the `domain.lexical` terms each point stores (`_lexical`).
Points whose terms were derived with other lexical rules, or not stored at all
(collections written before terms were stored, points added by a store opened
with `keyword=False`), are re-derived when a store first opens the collection
(`_migrate_terms`, skipped by a `keyword=False` store) and before a keyword
search over them (`_fill_terms`), so keyword results never depend on which
handle wrote a record.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import importlib
import itertools
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

import httpx
import numpy as np
import numpy.typing as npt
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ApiException

from agent_memory.adapters._common.index_options import IndexOptions
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
from agent_memory.adapters.qdrant._codec import (
    FIELD_CONTENT,
    FIELD_CONTEXT,
    FIELD_CREATED,
    FIELD_ID,
    FIELD_KIND,
    FIELD_LEXICAL,
    FIELD_NAMESPACE,
    FIELD_OWNER,
    FIELD_TERM_COUNTS,
    FIELD_TERMS,
    FIELD_TOKENS,
    batch_payloads,
    from_micros,
    lexical_fields,
    make_point,
    point_id,
    point_ids,
    record_from_payload,
    to_micros,
    vector_from_payload,
)
from agent_memory.adapters.qdrant._lexical import bm25_scores, current_version, query_terms
from agent_memory.domain.errors import (
    BackendUnavailable,
    ConfigurationError,
    DimensionMismatch,
    NotFound,
)
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
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.domain.vector_index import exact_cosines

__all__ = [
    "DEFAULT_COLLECTION_PREFIX",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_M",
    "QdrantMemoryStore",
]

DEFAULT_COLLECTION_PREFIX = "agent_memory_"
# HNSW defaults (docs/qdrant.md, "Vector index"). m and ef_construct shape the
# graph Qdrant builds (`rebuild_index` applies new ones to an existing
# collection); hnsw_ef applies to every query. An owner filter matching at most
# DEFAULT_EXACT_THRESHOLD points is answered exactly (Qdrant's full scan).
DEFAULT_M = 16
DEFAULT_EF_CONSTRUCTION = 200
DEFAULT_EF_SEARCH = 200
DEFAULT_EXACT_THRESHOLD = 100_000
_T = TypeVar("_T")
_BACKEND = "qdrant"
# Candidates asked for beyond `limit`, so that ties at the cut resolve by id.
_SEARCH_SLACK = 8
# Largest gap between Qdrant's float32 score and the exact recomputed one.
_SCORE_EPS = 1e-4
_SCROLL_BATCH = 1024
_UPSERT_BATCH = 1024
# grpc ships no type stubs; qdrant-client imports it anyway.
_GRPC_ERROR: type[BaseException] = importlib.import_module("grpc").RpcError
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    ApiException,
    httpx.HTTPError,
    _GRPC_ERROR,
    OSError,
    TimeoutError,
)

# Writes (check-then-upsert) are serialised per client and collection, so that
# every store handle sharing a client in this process sees one order.
_Keys = list[tuple[int, str]]
_Conditions = list[qm.Condition]
_Hits = list[ScoredRecord]

_WRITE_LOCKS: weakref.WeakKeyDictionary[AsyncQdrantClient, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _write_lock(client: AsyncQdrantClient, collection: str) -> asyncio.Lock:
    locks = _WRITE_LOCKS.setdefault(client, {})
    lock = locks.get(collection)
    if lock is None:
        lock = locks[collection] = asyncio.Lock()
    return lock


def _match(key: str, value: str) -> qm.FieldCondition:
    return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))


def _scope_conditions(
    owner: str, namespace: str | None, kinds: list[str] | None
) -> list[qm.Condition]:
    """The owner (always) plus the optional namespace and kinds, as `must` conditions."""
    must: list[qm.Condition] = [_match(FIELD_OWNER, owner)]
    if namespace is not None:
        must.append(_match(FIELD_NAMESPACE, namespace))
    if kinds is not None:
        must.append(qm.FieldCondition(key=FIELD_KIND, match=qm.MatchAny(any=list(kinds))))
    return must


def _created(condition: qm.Range) -> qm.FieldCondition:
    return qm.FieldCondition(key=FIELD_CREATED, range=condition)


def _payload(point: qm.Record | qm.ScoredPoint) -> dict[str, Any]:
    return point.payload or {}


_TEXT = [FIELD_CONTENT, FIELD_CONTEXT]
# Rounds of `_fill_terms` one keyword search runs at most (`search_text`).
_FILL_ROUNDS = 4


def _text_is(key: str, text: str) -> qm.Condition:
    """The condition that a point's `key` holds `text` as `_text_of` reads it (an
    absent field reads as "")."""
    if text:
        return _match(key, text)
    return qm.Filter(
        should=[_match(key, ""), qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))]
    )


def _text_of(payload: dict[str, Any]) -> tuple[str, str]:
    """(content, context) of a payload, empty where absent."""
    return str(payload.get(FIELD_CONTENT, "")), str(payload.get(FIELD_CONTEXT, ""))


class QdrantMemoryStore:
    """`MemoryStore` (and `KeywordSearch`) on a Qdrant collection.

    `client` may be shared by several store handles (the way several
    processes share a server); the store closes it only when `owns_client`.
    """

    def __init__(
        self,
        client: AsyncQdrantClient,
        space: EmbeddingSpace,
        *,
        collection_prefix: str = DEFAULT_COLLECTION_PREFIX,
        owns_client: bool = False,
        index: IndexOptions | None = None,
        keyword: bool = True,
    ) -> None:
        if not isinstance(keyword, bool):
            raise ConfigurationError(f"qdrant store option keyword must be a bool, got {keyword!r}")
        self._client = client
        self._space = check_space(space)
        # Whether `add` / `update` derive and store keyword terms (else the next
        # keyword search derives them) and opening migrates stale points.
        self._keyword = keyword
        options = index or IndexOptions()
        self._m = options.m or DEFAULT_M
        self._ef_construct = options.ef_construction or DEFAULT_EF_CONSTRUCTION
        self._ef = options.ef_search or DEFAULT_EF_SEARCH
        self._exact_threshold = (
            DEFAULT_EXACT_THRESHOLD if options.exact_threshold is None else options.exact_threshold
        )
        self._collection_name = f"{collection_prefix}{space.identity}"
        self._owns_client = owns_client
        self._life = Lifecycle("qdrant memory store")
        self._ready = False
        self._init_lock = asyncio.Lock()

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def index_options(self) -> IndexOptions:
        """The effective index parameters (m and ef_construct of a collection this
        store creates, hnsw_ef and the exact threshold of its queries)."""
        return IndexOptions(
            m=self._m,
            ef_construction=self._ef_construct,
            ef_search=self._ef,
            exact_threshold=self._exact_threshold,
        )

    @property
    def keyword(self) -> bool:
        """Whether `add` and `update` derive and store the keyword terms (False:
        the URL's `keyword=false`; the first keyword search over those records
        derives and stores them, on any handle)."""
        return self._keyword

    @property
    def collection_name(self) -> str:
        """The collection this store reads and writes."""
        return self._collection_name

    @property
    def client(self) -> AsyncQdrantClient:
        return self._client

    # -- plumbing -------------------------------------------------------------

    async def _call(self, what: str, awaitable: Awaitable[_T]) -> _T:
        """Await one client call; transport and server failures -> `BackendUnavailable`."""
        try:
            return await awaitable
        except _TRANSPORT_ERRORS as exc:
            raise BackendUnavailable(_BACKEND, f"{what}: {type(exc).__name__}: {exc}") from exc

    async def _collection(self) -> str:
        """The collection name, once it exists with this space's dimension and indexes."""
        if not self._ready:
            async with self._init_lock:
                if not self._ready:
                    await self._prepare()
                    self._ready = True
        return self._collection_name

    async def _prepare(self) -> None:
        name = self._collection_name
        client = self._client
        if not await self._call("collection_exists", client.collection_exists(name)):
            try:
                await self._call(
                    "create_collection",
                    client.create_collection(
                        name,
                        vectors_config=qm.VectorParams(
                            size=self._space.dimension, distance=qm.Distance.COSINE
                        ),
                        hnsw_config=self._hnsw_config(),
                    ),
                )
            except (BackendUnavailable, ValueError) as exc:
                # Another handle may have created it first (a server answers 409,
                # local mode raises ValueError); anything else is an error.
                if not await self._call("collection_exists", client.collection_exists(name)):
                    if isinstance(exc, BackendUnavailable):
                        raise
                    raise ConfigurationError(
                        f"cannot create qdrant collection {name!r}: {exc}"
                    ) from exc
        info = await self._call("get_collection", client.get_collection(name))
        vectors = info.config.params.vectors
        if not isinstance(vectors, qm.VectorParams):
            names = sorted(vectors or {})
            raise ConfigurationError(
                f"qdrant collection {name!r} has named vectors {names}; this store needs one "
                f"unnamed vector of dimension {self._space.dimension}"
            )
        if vectors.size != self._space.dimension:
            raise DimensionMismatch(
                self._space.dimension, vectors.size, where=f"qdrant collection {name!r}"
            )
        if vectors.distance != qm.Distance.COSINE:
            raise ConfigurationError(
                f"qdrant collection {name!r} uses {vectors.distance} distance; "
                "this store needs Cosine"
            )
        await self._ensure_indexes(name, info.payload_schema or {})
        if self._keyword:
            await self._migrate_terms(name)

    def _hnsw_config(self) -> qm.HnswConfigDiff:
        """M, ef_construct, and the exact threshold as Qdrant's `full_scan_threshold`
        (in kilobytes of vectors): a filter matching fewer points than that is
        answered by scoring each of them (exact) instead of walking the graph."""
        kilobytes = -(-self._exact_threshold * self._space.dimension * 4 // 1024)
        return qm.HnswConfigDiff(
            m=self._m, ef_construct=self._ef_construct, full_scan_threshold=kilobytes
        )

    async def rebuild_index(self) -> None:
        """Apply this store's M, ef_construct and exact threshold to an existing
        collection (created with other ones): Qdrant rebuilds its graph in the
        background, answering queries meanwhile. `hnsw_ef` needs no rebuild."""
        async with self._life.op():
            name = await self._collection()
            await self._call(
                "update_collection",
                self._client.update_collection(name, hnsw_config=self._hnsw_config()),
            )

    async def _ensure_indexes(self, name: str, existing: dict[str, Any]) -> None:
        wanted: list[tuple[str, qm.PayloadSchemaType | qm.PayloadSchemaParams]] = [
            (FIELD_OWNER, qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)),
            (FIELD_NAMESPACE, qm.PayloadSchemaType.KEYWORD),
            (FIELD_KIND, qm.PayloadSchemaType.KEYWORD),
            (FIELD_CREATED, qm.PayloadSchemaType.INTEGER),
            (FIELD_TERMS, qm.PayloadSchemaType.KEYWORD),
            (FIELD_LEXICAL, qm.PayloadSchemaType.KEYWORD),
        ]
        for field_name, schema in wanted:
            if field_name in existing:
                continue
            with warnings.catch_warnings():
                # Local mode warns that it builds no payload indexes (it scans).
                warnings.filterwarnings("ignore", message="Payload indexes have no effect")
                await self._call(
                    f"create_payload_index {field_name}",
                    self._client.create_payload_index(name, field_name, field_schema=schema),
                )

    async def _migrate_terms(self, name: str) -> int:
        """Re-derive the keyword fields of every point whose `lexical` marker is not
        the current `domain.lexical.LEXICAL_VERSION` (points written before terms
        were stored have none); returns how many points were rewritten.

        Batches of `_SCROLL_BATCH` points: read content and context, set the new
        fields on each point (`set_payload`, the rest of the payload untouched),
        then read the batch again and redo any point whose text changed meanwhile
        (a writer in another process), so no point keeps terms of a text it no
        longer holds. Rewritten points leave the stale filter, so an interrupted
        migration resumes where it stopped the next time a store opens.
        """
        version = current_version()
        current: _Conditions = [
            qm.FieldCondition(key=FIELD_LEXICAL, match=qm.MatchValue(value=version))
        ]
        stale = qm.Filter(must_not=current)
        found = await self._call("count", self._client.count(name, count_filter=stale, exact=True))
        if found.count == 0:
            return 0
        done = 0
        async with _write_lock(self._client, name):
            async for points in self._batches(name, stale, _TEXT):
                pending = {str(p.id): _text_of(_payload(p)) for p in points}
                done += len(pending)
                await self._derive_terms(name, pending, version)
        return done

    async def _derive_terms(
        self, name: str, pending: dict[str, tuple[str, str]], version: str
    ) -> None:
        """Set the keyword fields of each point of `pending` (point id -> the
        (content, context) they are derived from), then read the points again and
        redo any whose text another writer changed meanwhile. The caller holds
        the write lock."""
        while pending:
            # Each point selected by a filter on its id and the text the terms
            # come from, not by its id alone: a point another process deleted
            # since it was read matches nothing (by id, the whole batch would
            # fail on the missing point), nor does one whose text it replaced
            # (the read below derives the new text's terms; a search stopped
            # before that read leaves no terms of another text behind).
            ops: builtins.list[qm.UpdateOperation] = [
                qm.SetPayloadOperation(
                    set_payload=qm.SetPayload(
                        payload=lexical_fields(content, context, version),
                        filter=qm.Filter(
                            must=[
                                qm.HasIdCondition(has_id=[pid]),
                                _text_is(FIELD_CONTENT, content),
                                _text_is(FIELD_CONTEXT, context),
                            ]
                        ),
                    )
                )
                for pid, (content, context) in pending.items()
            ]
            await self._call(
                "batch_update_points",
                self._client.batch_update_points(name, update_operations=ops, wait=True),
            )
            again = await self._call(
                "retrieve",
                self._client.retrieve(
                    name, ids=list(pending), with_payload=_TEXT, with_vectors=False
                ),
            )
            pending = {
                str(p.id): _text_of(_payload(p))
                for p in again
                if _text_of(_payload(p)) != pending[str(p.id)]
            }

    async def _fill_terms(self, name: str, ids: builtins.list[str]) -> None:
        """Derive the keyword fields of the points `ids` that still lack current
        ones (added by a `keyword=False` store, or by a writer around this
        adapter), in batches of `_SCROLL_BATCH`; points deleted meanwhile are
        skipped."""
        version = current_version()
        fields = [*_TEXT, FIELD_LEXICAL]
        async with _write_lock(self._client, name):
            for start in range(0, len(ids), _SCROLL_BATCH):
                points = await self._call(
                    "retrieve",
                    self._client.retrieve(
                        name,
                        ids=ids[start : start + _SCROLL_BATCH],
                        with_payload=fields,
                        with_vectors=False,
                    ),
                )
                pending = {
                    str(p.id): _text_of(_payload(p))
                    for p in points
                    if _payload(p).get(FIELD_LEXICAL) != version
                }
                await self._derive_terms(name, pending, version)

    async def _batches(
        self, name: str, flt: qm.Filter, fields: list[str]
    ) -> AsyncIterator[builtins.list[qm.Record]]:
        """The points matching `flt` (payload `fields` only, no vectors), one
        scroll page of `_SCROLL_BATCH` at a time."""
        offset: qm.ExtendedPointId | None = None
        while True:
            points, offset = await self._call(
                "scroll",
                self._client.scroll(
                    name,
                    scroll_filter=flt,
                    limit=_SCROLL_BATCH,
                    offset=offset,
                    with_payload=fields,
                    with_vectors=False,
                ),
            )
            yield points
            if offset is None:
                return

    async def _scan(self, name: str, flt: qm.Filter, fields: list[str]) -> list[dict[str, Any]]:
        """Every point matching `flt` (payload `fields` only), in bounded batches."""
        return [_payload(p) async for points in self._batches(name, flt, fields) for p in points]

    async def _retrieve(self, name: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Full payloads by point id (missing points are absent)."""
        if not ids:
            return {}
        points = await self._call(
            "retrieve",
            self._client.retrieve(name, ids=ids, with_payload=True, with_vectors=False),
        )
        return {str(p.id): _payload(p) for p in points}

    async def _existing(self, name: str, ids: list[str]) -> set[str]:
        points = await self._call(
            "retrieve",
            self._client.retrieve(name, ids=ids, with_payload=False, with_vectors=False),
        )
        return {str(p.id) for p in points}

    async def _upsert(self, name: str, records: Sequence[MemoryRecord], ids: list[str]) -> None:
        for start in range(0, len(records), _UPSERT_BATCH):
            chunk = records[start : start + _UPSERT_BATCH]
            chunk_ids = ids[start : start + _UPSERT_BATCH]
            matrix = np.stack([r.vector for r in chunk])
            # Points, not a `Batch`: qdrant-client turns a Batch into points itself
            # (slower in local mode). Built without pydantic's validation
            # (`make_point`): every value is already checked (ids from
            # `point_ids`, finite float32 vectors as lists of floats, payloads of
            # str/int/float/list values).
            points = list(
                map(
                    make_point,
                    chunk_ids,
                    matrix.tolist(),
                    batch_payloads(chunk, matrix, keyword=self._keyword),
                )
            )
            await self._call("upsert", self._client.upsert(name, points=points, wait=True))

    # -- MemoryStore ----------------------------------------------------------

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        async with self._life.op():
            batch = check_records(records, self._space)
            if not batch:
                return
            # Point ids are injective in (owner, id): a repeated id shows as a repeated point id.
            ids = point_ids([(r.owner, r.id) for r in batch])
            name = await self._collection()
            async with _write_lock(self._client, name):
                stored = await self._existing(name, ids)
                if stored or len(set(ids)) != len(ids):
                    check_no_duplicates(batch, ids, stored)
                await self._upsert(name, batch, ids)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            name = await self._collection()
            payload = (await self._retrieve(name, [point_id(owner, id)])).get(point_id(owner, id))
            if payload is None or payload.get(FIELD_OWNER) != owner or payload.get(FIELD_ID) != id:
                return None
            return record_from_payload(payload)

    async def update(self, record: MemoryRecord) -> None:
        async with self._life.op():
            check_record(record, "record", self._space)
            name = await self._collection()
            pid = point_id(record.owner, record.id)
            async with _write_lock(self._client, name):
                if not await self._existing(name, [pid]):
                    raise NotFound(record.owner, record.id)
                await self._upsert(name, [record], [pid])

    async def delete(self, owner: str, id: str) -> bool:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            name = await self._collection()
            pid = point_id(owner, id)
            async with _write_lock(self._client, name):
                if not await self._existing(name, [pid]):
                    return False
                await self._call(
                    "delete",
                    self._client.delete(
                        name, points_selector=qm.PointIdsList(points=[pid]), wait=True
                    ),
                )
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
            flt = qm.Filter(must=_scope_conditions(owner, namespace, wanted))
            threshold = None if min_score is None else float(min_score) - _SCORE_EPS
            as_list = query.tolist()
            fetch = limit + _SEARCH_SLACK
            while True:
                with warnings.catch_warnings():
                    # Local mode searches exactly and warns that search_params go unused.
                    warnings.filterwarnings("ignore", message="Local mode performs exact")
                    response = await self._call(
                        "query_points",
                        self._client.query_points(
                            name,
                            query=as_list,
                            query_filter=flt,
                            limit=fetch,
                            with_payload=True,
                            with_vectors=False,
                            score_threshold=threshold,
                            search_params=qm.SearchParams(hnsw_ef=max(self._ef, fetch)),
                        ),
                    )
                points = response.points
                if not points:
                    return []
                payloads = [_payload(p) for p in points]
                ids = [str(p[FIELD_ID]) for p in payloads]
                # the in-process stores' arithmetic, bit for bit (`exact_cosines`)
                scores = exact_cosines(np.stack([vector_from_payload(p) for p in payloads]), query)
                hits = top_k(scores, ids, limit, min_score)
                if len(points) < fetch:
                    break  # every match was seen
                # Anything not fetched scored at most the lowest engine score; stop
                # once that is clearly below the score at the cut.
                if len(hits) == limit:
                    cut = hits[-1][1]
                else:
                    cut = -1.0 if min_score is None else float(min_score)
                if min(p.score for p in points) + _SCORE_EPS < cut:
                    break
                fetch *= 2
            return [ScoredRecord(record=record_from_payload(payloads[i]), score=s) for i, s in hits]

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
            if wanted == []:
                return Page(records=(), next_cursor=None)
            name = await self._collection()
            scope = _scope_conditions(owner, namespace, wanted)
            keys = await self._list_keys(name, scope, limit, after)
            page_keys = keys[:limit]
            ids = [point_id(owner, rid) for _, rid in page_keys]
            found = await self._retrieve(name, ids)
            records = tuple(record_from_payload(found[pid]) for pid in ids if pid in found)
            next_cursor = None
            if len(keys) > limit:
                last_us, last_id = page_keys[-1]
                next_cursor = encode_cursor(from_micros(last_us), last_id)
            return Page(records=records, next_cursor=next_cursor)

    async def _list_keys(
        self,
        name: str,
        scope: _Conditions,
        limit: int,
        after: tuple[Any, str] | None,
    ) -> _Keys:
        """At least `limit + 1` (created_us, id) keys after the cursor, in list order,
        or all of them when fewer remain.

        Qdrant orders by `created_us` (order_by) but not by id within equal
        timestamps, so a timestamp group that a page boundary may cut is read
        whole (light payload, bounded batches) and sorted here.
        """
        light = [FIELD_ID, FIELD_CREATED]
        keys: _Keys = []
        upper: _Conditions = []
        if after is not None:
            c_us, c_id = to_micros(after[0]), after[1]
            same = qm.Filter(must=[*scope, _created(qm.Range(gte=c_us, lte=c_us))])
            group = await self._scan(name, same, light)
            keys.extend((c_us, str(p[FIELD_ID])) for p in group if str(p[FIELD_ID]) < c_id)
            upper = [_created(qm.Range(lt=c_us))]
        need = limit + 1 - len(keys)
        if need > 0:
            points, _ = await self._call(
                "scroll",
                self._client.scroll(
                    name,
                    scroll_filter=qm.Filter(must=[*scope, *upper]),
                    limit=need,
                    order_by=qm.OrderBy(key=FIELD_CREATED, direction=qm.Direction.DESC),
                    with_payload=light,
                    with_vectors=False,
                ),
            )
            batch = [(int(_payload(p)[FIELD_CREATED]), str(_payload(p)[FIELD_ID])) for p in points]
            if len(batch) == need:
                # The last timestamp group may be cut: read it whole.
                v_last = batch[-1][0]
                batch = [k for k in batch if k[0] != v_last]
                same = qm.Filter(must=[*scope, _created(qm.Range(gte=v_last, lte=v_last))])
                group = await self._scan(name, same, light)
                batch.extend((v_last, str(p[FIELD_ID])) for p in group)
            keys.extend(batch)
        keys.sort(reverse=True)
        return keys

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
            flt = qm.Filter(must=_scope_conditions(owner, namespace, wanted))
            async with _write_lock(self._client, name):
                result = await self._call(
                    "count", self._client.count(name, count_filter=flt, exact=True)
                )
                if result.count == 0:
                    return 0
                await self._call(
                    "delete",
                    self._client.delete(
                        name, points_selector=qm.FilterSelector(filter=flt), wait=True
                    ),
                )
                return int(result.count)

    async def owners(self) -> builtins.list[str]:
        """Every owner with a record in this space, sorted (`OwnerListing`): a scroll
        over the collection's owner payloads, in bounded batches."""
        async with self._life.op():
            name = await self._collection()
            payloads = await self._scan(name, qm.Filter(), [FIELD_OWNER])
            return sorted({str(p[FIELD_OWNER]) for p in payloads if FIELD_OWNER in p})

    async def ping(self) -> None:
        async with self._life.op():
            await self._call("get_collections", self._client.get_collections())

    async def close(self) -> None:
        if await self._life.begin_close() and self._owns_client:
            # Closing a client whose server is gone: nothing is left to release.
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await self._client.close()

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
        """BM25 over content + context by `domain.lexical`. The `terms` keyword
        index selects the owner's candidates holding any query term (`MatchAny`,
        owner and filters inside the query); the scores use statistics over the
        owner's filtered records only, exactly as the in-process store computes
        them. Records in that scope without current terms (added by a
        `keyword=False` store, or around this adapter) get them first
        (`_fill_terms`), so every record counts, whichever handle wrote it."""
        async with self._life.op():
            query, wanted = check_search_text_args(owner, query, limit, namespace, kinds)
            terms = query_terms(query)
            if not terms or wanted == []:
                return []
            name = await self._collection()
            scope = _scope_conditions(owner, namespace, wanted)
            version = current_version()
            holds = qm.FieldCondition(key=FIELD_TERMS, match=qm.MatchAny(any=terms))
            current = qm.FieldCondition(key=FIELD_LEXICAL, match=qm.MatchValue(value=version))
            # The candidates, and any point of the scope without current terms:
            # another process's keyword=False write can drop a point's terms at
            # any moment (even rewriting the same text), and such a point would
            # be neither a candidate nor counted. Any seen (in the scope or among
            # the candidates) gets its terms and both are read again, so every
            # record is read with its terms, whichever writer came in between
            # (up to `_FILL_ROUNDS` times: then points still without them are
            # left out, as points added without them after the reads are).
            wanted_points = qm.Filter(must=scope, should=[holds, qm.Filter(must_not=[current])])
            fields = [FIELD_ID, FIELD_TERMS, FIELD_TERM_COUNTS, FIELD_TOKENS, FIELD_LEXICAL]
            corpus = await self._corpus(name, scope)
            for rounds in itertools.count(1):
                last = rounds > _FILL_ROUNDS
                stale = [pid for pid, p in corpus.items() if p.get(FIELD_LEXICAL) != version]
                if not stale or last:
                    found_points = [
                        p
                        async for points in self._batches(name, wanted_points, fields)
                        for p in points
                        if _payload(p).get(FIELD_LEXICAL) == version or not last
                    ]
                    stale = [
                        str(p.id) for p in found_points if _payload(p).get(FIELD_LEXICAL) != version
                    ]
                    if not stale:
                        break
                await self._fill_terms(name, stale)
                corpus = await self._corpus(name, scope)
            # Statistics over the scope as read (points with current terms) plus
            # any candidate another writer added since.
            lengths = {
                pid: int(p[FIELD_TOKENS])
                for pid, p in corpus.items()
                if p.get(FIELD_LEXICAL) == version
            }
            candidates = [_payload(p) for p in found_points]
            for point, payload in zip(found_points, candidates, strict=True):
                lengths.setdefault(str(point.id), int(payload[FIELD_TOKENS]))
            if not candidates:
                return []
            wanted_terms = set(terms)
            docs = [
                (
                    {
                        t: int(c)
                        for t, c in zip(p[FIELD_TERMS], p[FIELD_TERM_COUNTS], strict=True)
                        if t in wanted_terms
                    },
                    int(p[FIELD_TOKENS]),
                )
                for p in candidates
            ]
            scores = bm25_scores(
                terms,
                docs,
                total_docs=len(lengths),
                total_length=sum(lengths.values()),
            )
            ranked = sorted(
                (
                    (-score, str(p[FIELD_ID]))
                    for p, score in zip(candidates, scores, strict=True)
                    if score > 0.0
                ),
            )[:limit]
            ids = [point_id(owner, rid) for _, rid in ranked]
            found = await self._retrieve(name, ids)
            return [
                ScoredRecord(record=record_from_payload(found[pid]), score=-neg)
                for (neg, _), pid in zip(ranked, ids, strict=True)
                if pid in found
            ]

    async def _corpus(self, name: str, scope: _Conditions) -> dict[str, dict[str, Any]]:
        """Point id -> (token count, lexical marker) of every point in `scope`."""
        return {
            str(p.id): _payload(p)
            async for points in self._batches(
                name, qm.Filter(must=scope), [FIELD_TOKENS, FIELD_LEXICAL]
            )
            for p in points
        }

"""`MemoryStore` (+ `KeywordSearch`) on Redis: a hash per record and one Search index.

The index (named after the embedding space identity) holds TAG fields with
hex digests of owner, namespace and kind (digests: a TAG value would otherwise
be split on its separator, folded to lower case, and need escaping), NUMERIC
created_at, a sortable list key, TEXT content + context for BM25, and a
VECTOR HNSW COSINE FLOAT32 field. Every query carries the owner filter inside
it (`(@oh:{...} ...)=>[KNN k @vec $v AS score]`), so no other owner's record
can ever be a candidate.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.validation import (
    check_filters,
    check_min_score,
    check_query,
    check_record,
    check_records,
)
from agent_memory.adapters.redis._client import Client, connect
from agent_memory.adapters.redis._codec import (
    RECORD_FIELDS,
    decode_record,
    decode_record_values,
    encode_record,
    scored,
    sort_key,
    to_micros,
)
from agent_memory.adapters.redis._errors import (
    BACKEND,
    SEARCH_HINT,
    is_missing_index,
    is_unknown_command,
    translate,
)
from agent_memory.adapters.redis._handle import RedisHandle, SharedClient
from agent_memory.adapters.redis._keys import digest
from agent_memory.domain.errors import (
    DuplicateRecord,
    NotFound,
    SearchModuleMissing,
)
from agent_memory.domain.lexical import query_terms
from agent_memory.domain.ranking import decode_cursor, encode_cursor
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
    require_positive,
    require_scope,
)

__all__ = ["RedisMemoryStore"]

_ADD = """
local dupes = {}
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then dupes[#dupes + 1] = i end
end
if #dupes > 0 then return dupes end
local pos = 1
for _, key in ipairs(KEYS) do
  local n = tonumber(ARGV[pos])
  redis.call('HSET', key, unpack(ARGV, pos + 1, pos + n))
  pos = pos + n + 1
end
return {}
"""

_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

_Hits = list[ScoredRecord]
# Fields a reply needs to rebuild a record (not the index-only tags), led by the
# sort field where there is one: the module returns the sort field first, then the
# RETURN fields in order, so a row's names usually equal these lists exactly.
_RECORD = [name.encode() for name in RECORD_FIELDS]
_SCORED = [b"__d", *_RECORD]
_LISTED = [b"sk", *_RECORD]
_RETURN = ("RETURN", str(len(_RECORD)), *RECORD_FIELDS)
_RETURN_SCORED = ("RETURN", str(len(_SCORED)), "__d", *RECORD_FIELDS)
_RETURN_LIST = ("RETURN", str(len(_LISTED)), "sk", *RECORD_FIELDS)
_F32 = np.dtype(np.float32)
_ZERO_FLOAT_BYTES = 3  # of the 4 bytes of a float32 zero (+0.0 or -0.0), at least 3 are 0
_PAGE = 500


def _escape_term(term: str) -> str:
    return "".join(c if c.isalnum() else "\\" + c for c in term)


@functools.lru_cache(maxsize=1024)
def _filter(owner: str, namespace: str | None, kinds: tuple[str, ...] | None) -> str:
    """The owner (+ namespace, kinds) filter of a query, on the digest tags."""
    parts = [f"@oh:{{{digest(owner)}}}"]
    if namespace is not None:
        parts.append(f"@nh:{{{digest(namespace)}}}")
    if kinds is not None:
        parts.append("@kh:{" + " | ".join(digest(k) for k in kinds) + "}")
    return " ".join(parts)


def _values(row: list[bytes], names: list[bytes]) -> list[bytes]:
    """The values of `names` in a reply row `[name, value, ...]`, in that order."""
    if row[0::2] == names:
        return row[1::2]
    fields = {row[i]: row[i + 1] for i in range(0, len(row), 2)}
    return [fields[name] for name in names]


def _is_zero(blob: bytes) -> bool:
    """Whether a float32 vector blob is all zeros (a byte count rules most out)."""
    if blob.count(0) * 4 < len(blob) * _ZERO_FLOAT_BYTES:
        return False
    return not np.frombuffer(blob, dtype=np.float32).any()


class RedisMemoryStore(RedisHandle):
    """`MemoryStore` and `KeywordSearch` over redis.asyncio and the Search module.

    Build with `RedisMemoryStore.from_url(url, space)` (owns its client) or pass a
    `redis.asyncio.Redis` speaking RESP2 with bytes replies (then the caller closes it).
    """

    def __init__(
        self,
        client: Client | SharedClient,
        space: EmbeddingSpace,
        *,
        prefix: str = "agent_memory",
        deployment: str = "default",
        owns_client: bool = False,
        ef_runtime: int = 64,
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 200,
    ) -> None:
        super().__init__(
            client,
            "redis memory store",
            prefix=prefix,
            deployment=deployment,
            owns_client=owns_client,
        )
        self._space = space
        self._ef = require_positive(ef_runtime, "ef_runtime")
        self._hnsw = (
            require_positive(hnsw_m, "hnsw_m"),
            require_positive(hnsw_ef_construction, "hnsw_ef_construction"),
        )
        self._sid = space.identity
        self._index = self._keys.ms_index(self._sid)
        self._index_ready = False
        self._add = self._r.register_script(_ADD)
        self._update = self._r.register_script(_UPDATE)

    @classmethod
    def from_url(
        cls,
        url: str,
        space: EmbeddingSpace,
        *,
        client_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> RedisMemoryStore:
        """A store owning a client built from `url` (`client_options` go to the client)."""
        return cls(connect(url, **(client_options or {})), space, owns_client=True, **kwargs)

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def index_name(self) -> str:
        return self._index

    # -- index ----------------------------------------------------------------
    async def ensure_index(self) -> None:
        """Create the Search index for this space (idempotent)."""
        if self._index_ready:
            return
        with translate("create index"):
            try:
                await self._cmd(
                    "FT.CREATE", self._index, "ON", "HASH",
                    "PREFIX", "1", self._keys.ms_record_prefix(self._sid),
                    "STOPWORDS", "0",
                    "SCHEMA",
                    "oh", "TAG", "nh", "TAG", "kh", "TAG", "z", "TAG",
                    "ca", "NUMERIC",
                    "sk", "TAG", "SORTABLE", "UNF", "NOINDEX",
                    "terms", "TEXT", "NOSTEM",
                    "vec", "VECTOR", "HNSW", "10",
                    "TYPE", "FLOAT32", "DIM", str(self._space.dimension),
                    "DISTANCE_METRIC", "COSINE",
                    "M", str(self._hnsw[0]), "EF_CONSTRUCTION", str(self._hnsw[1]),
                )  # fmt: skip
            except Exception as exc:
                if is_unknown_command(exc):
                    raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
                if "already exists" not in str(exc).lower():
                    raise
            else:
                # Records may already exist (an index lost with a restarted server):
                # the index scans them in the background; wait for it to finish.
                await self._wait_indexed()
        self._index_ready = True

    async def _wait_indexed(self, timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            info = await self._cmd("FT.INFO", self._index)
            fields = {info[i]: info[i + 1] for i in range(0, len(info) - 1, 2)}
            if int(fields.get(b"indexing", 0)) == 0:
                return
            await asyncio.sleep(0.01)

    async def drop_index(self, *, delete_records: bool = True) -> None:
        """Drop this space's index (and, by default, its records)."""
        async with self._life.op():
            with translate("drop index"):
                args = ["FT.DROPINDEX", self._index] + (["DD"] if delete_records else [])
                try:
                    await self._cmd(*args)
                except Exception as exc:
                    if not is_missing_index(exc):
                        raise
            self._index_ready = False

    async def _cmd(self, *args: Any) -> Any:
        return await cast(Any, self._r).execute_command(*args)

    async def _ft(self, *args: Any) -> Any:
        """FT.SEARCH on our index, recreating the index once if it vanished (a
        restarted server without persistence). `TIMEOUT 0`: the module's default
        query timeout (500 ms, policy "return") would silently cut results; the
        client's socket timeout bounds the call instead."""
        args = (*args, "TIMEOUT", "0")
        if not self._index_ready:
            await self.ensure_index()
        try:
            return await self._cmd(*args)
        except Exception as exc:
            if is_unknown_command(exc):
                raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
            if not is_missing_index(exc):
                raise
        self._index_ready = False
        await self.ensure_index()
        return await self._cmd(*args)

    # -- helpers ----------------------------------------------------------------
    def _key(self, owner: str, id: str) -> str:
        return self._keys.ms_record(self._sid, owner, id)

    @staticmethod
    def _tags(r: MemoryRecord) -> dict[str, str]:
        return {"oh": digest(r.owner), "nh": digest(r.namespace), "kh": digest(r.kind)}

    @staticmethod
    def _filter(owner: str, namespace: str | None, kinds: list[str] | None) -> str:
        return _filter(owner, namespace, None if kinds is None else tuple(kinds))

    def _query_blob(self, vector: object) -> tuple[bytes, bool]:
        """The query vector as float32 bytes, and whether any component is nonzero.

        A 1-D float32 array of the space's dimension is checked on its bytes (a
        float sum is finite only when every component is, and cannot overflow);
        anything else, or a failed check, goes through `as_vector` and
        `require_dimension` for their typed errors."""
        if (
            type(vector) is np.ndarray
            and vector.dtype is _F32
            and vector.ndim == 1
            and vector.shape[0] == self._space.dimension
        ):
            blob = vector.tobytes()
            values = memoryview(blob).cast("f")
            if math.isfinite(sum(values)):
                return blob, any(values)
        query = as_vector(vector, "query vector")
        require_dimension(self._space, query)
        return query.tobytes(), bool(query.any())

    @staticmethod
    def _check_vectors(batch: Sequence[MemoryRecord]) -> None:
        """Beyond `check_record`: every stored vector finite (a record built without
        its validators could carry NaN or infinity into the HNSW index)."""
        for r in batch:
            as_vector(r.vector, "record.vector")

    # -- writes -----------------------------------------------------------------
    async def add(self, records: Sequence[MemoryRecord]) -> None:
        async with self._life.op():
            batch = check_records(records, self._space)
            self._check_vectors(batch)
            if not batch:
                return
            seen: set[tuple[str, str]] = set()
            dupes: dict[str, list[str]] = {}
            for r in batch:
                if (r.owner, r.id) in seen:
                    dupes.setdefault(r.owner, []).append(r.id)
                seen.add((r.owner, r.id))
            if dupes:
                owner, ids = next(iter(dupes.items()))
                raise DuplicateRecord(owner, tuple(ids))
            keys: list[str] = []
            args: list[Any] = []
            for r in batch:
                keys.append(self._key(r.owner, r.id))
                flat: list[Any] = []
                for name, value in encode_record(r, self._tags(r)).items():
                    flat += [name, value]
                args.append(len(flat))
                args += flat
            with translate("add"):
                await self.ensure_index()
                found = await self._add(keys=keys, args=args)
            if found:
                for i in found:
                    r = batch[int(i) - 1]
                    dupes.setdefault(r.owner, []).append(r.id)
                owner, ids = next(iter(dupes.items()))
                raise DuplicateRecord(owner, tuple(ids))

    async def update(self, record: MemoryRecord) -> None:
        async with self._life.op():
            r = check_record(record, "record", self._space)
            self._check_vectors([r])
            flat: list[Any] = []
            for name, value in encode_record(r, self._tags(r)).items():
                flat += [name, value]
            with translate("update"):
                await self.ensure_index()
                ok = await self._update(keys=[self._key(r.owner, r.id)], args=flat)
            if not ok:
                raise NotFound(r.owner, r.id)

    async def delete(self, owner: str, id: str) -> bool:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            with translate("delete"):
                return bool(await self._r.delete(self._key(owner, id)))

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
            if wanted is not None and not wanted:
                return 0
            query = self._filter(owner, namespace, wanted)
            total = 0
            with translate("delete_scope"):
                while True:
                    res = await self._ft(
                        "FT.SEARCH", self._index, query, "NOCONTENT",
                        "LIMIT", "0", str(_PAGE), "DIALECT", "2",
                    )  # fmt: skip
                    doomed = res[1:]
                    if not doomed:
                        return total
                    # Same owner -> same hash tag: one multi-key DEL in one slot.
                    total += int(await self._r.delete(*doomed))

    # -- reads ------------------------------------------------------------------
    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            with translate("get"):
                raw: Any = await self._r.hgetall(self._key(owner, id))
            if not raw:
                return None
            record = decode_record(raw)
            return record if (record.owner, record.id) == (owner, id) else None

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
            require_scope(owner, "owner")
            require_limit(limit)
            blob, nonzero = self._query_blob(vector)
            wanted = check_filters(namespace, kinds)
            check_min_score(min_score)
            if wanted is not None and not wanted:
                return []
            filt = self._filter(owner, namespace, wanted)
            with translate("search"):
                if not nonzero:
                    hits = await self._zero_scored(filt, limit)
                else:
                    hits = await self._knn(filt, blob, limit)
                    if len(hits) < limit or hits[-1].score <= 0.0:
                        # Zero vectors have no cosine in the index; their similarity is 0.
                        hits += await self._zero_scored(filt + " @z:{1}", limit)
                        hits.sort(key=lambda h: (-h.score, h.record.id))
            if min_score is not None:
                hits = [h for h in hits if h.score >= min_score]
            return hits[:limit]

    async def _knn(self, filt: str, blob: bytes, limit: int) -> list[ScoredRecord]:
        k = limit + 1
        while True:
            ef = max(self._ef, k)
            res = await self._ft(
                "FT.SEARCH", self._index,
                f"({filt})=>[KNN {k} @vec $v EF_RUNTIME {ef} AS __d]",
                "PARAMS", "2", "v", blob, *_RETURN_SCORED,
                "SORTBY", "__d", "ASC", "LIMIT", "0", str(k), "DIALECT", "2",
            )  # fmt: skip
            rows: list[tuple[float, str, list[bytes]]] = []
            for row in res[2::2]:
                v = _values(row, _SCORED)
                if _is_zero(v[11]):
                    continue  # zero vectors are scored by _zero_scored
                score = 1.0 - float(v[0])
                if score > 1.0:
                    score = 1.0
                elif score < -1.0:
                    score = -1.0
                rows.append((-score, v[1].decode("utf-8", "surrogatepass"), v))
            # (score, id) is unique within an owner: the lists are never compared.
            rows.sort()
            # All candidates seen, or no tie across the cut hiding equal-scored
            # records with smaller ids: done.
            if len(res) < 2 * k + 1 or (len(rows) > limit and rows[limit - 1][0] != rows[limit][0]):
                # Only the returned rows become records.
                return [scored(decode_record_values(v[1:]), -neg) for neg, _, v in rows[:limit]]
            k *= 2

    async def _zero_scored(self, filt: str, limit: int) -> list[ScoredRecord]:
        """Records scoring exactly 0 (zero query or zero stored vectors), by id."""
        found: list[MemoryRecord] = []
        offset = 0
        while True:
            res = await self._ft(
                "FT.SEARCH", self._index, filt, *_RETURN,
                "LIMIT", str(offset), str(_PAGE), "DIALECT", "2",
            )  # fmt: skip
            found += [decode_record_values(_values(row, _RECORD)) for row in res[2::2]]
            offset += _PAGE
            if offset >= int(res[0]):
                break
        found.sort(key=lambda r: r.id)
        return [scored(r, 0.0) for r in found[:limit]]

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
            require_scope(owner, "owner")
            require_limit(limit)
            wanted = check_filters(namespace, kinds)
            after = decode_cursor(cursor) if cursor is not None else None
            if wanted is not None and not wanted:
                return Page(records=(), next_cursor=None)
            query = self._filter(owner, namespace, wanted)
            after_sk = None
            if after is not None:
                query += f" @ca:[-inf {to_micros(after[0])}]"
                after_sk = sort_key(*after)
            rows: list[MemoryRecord] = []
            offset, size = 0, limit + 1 + 16
            with translate("list"):
                while len(rows) <= limit:
                    res = await self._ft(
                        "FT.SEARCH", self._index, query, *_RETURN_LIST, "SORTBY", "sk", "DESC",
                        "LIMIT", str(offset), str(size), "DIALECT", "2",
                    )  # fmt: skip
                    for row in res[2::2]:
                        v = _values(row, _LISTED)
                        if after_sk is None or v[0].decode() < after_sk:
                            rows.append(decode_record_values(v[1:]))
                    offset += size
                    if offset >= int(res[0]):
                        break
                    size *= 2
            rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
            page = tuple(rows[:limit])
            more = len(rows) > limit
            next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if more else None
            return Page(records=page, next_cursor=next_cursor)

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> _Hits:
        """BM25 over content and context, owner and filters inside the query."""
        async with self._life.op():
            require_scope(owner, "owner")
            require_limit(limit)
            query = check_query(query)
            wanted = check_filters(namespace, kinds)
            terms = query_terms(query)
            if not terms or (wanted is not None and not wanted):
                return []
            # A top-level union of (filter AND term): a union nested in an intersection
            # scores only its first matching term per record. The filter carries no
            # weight, so only the terms score (BM25 over the domain's tokens).
            scope = f"({self._filter(owner, namespace, wanted)})=>{{$weight: 0.0}}"
            q = " | ".join(f"({scope} @terms:{_escape_term(t)})" for t in terms)
            k = limit + 1
            with translate("search_text"):
                while True:
                    res = await self._ft(
                        "FT.SEARCH", self._index, q, *_RETURN, "VERBATIM",
                        "WITHSCORES", "SCORER", "BM25STD", "LIMIT", "0", str(k), "DIALECT", "2",
                    )  # fmt: skip
                    hits = [
                        scored(decode_record_values(_values(row, _RECORD)), float(score))
                        for score, row in zip(res[2::3], res[3::3], strict=True)
                    ]
                    hits.sort(key=lambda h: (-h.score, h.record.id))
                    if len(hits) < k or hits[limit - 1].score != hits[limit].score:
                        return hits[:limit]
                    k *= 2

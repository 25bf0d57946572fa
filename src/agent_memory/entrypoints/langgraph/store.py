"""`AgentMemoryStore`: LangGraph's `BaseStore` on any agent-memory backend.

    async with agent_memory.connect("sqlite:memory.db") as memory:
        store = AgentMemoryStore(memory, index={"fields": ["text"]})
        graph = builder.compile(store=store)

Mapping (reversible and injective, any characters in labels, `.` included):
- the first label of a LangGraph namespace is the record owner (escaped as
  `langgraph:"<json>"` when it is blank or starts with `langgraph`), so a host
  that puts its user id first (`(user_id, "memories")`) keeps each user's items
  under that user's owner, where `memory.users.forget(user_id)` erases them;
- the remaining labels become the record namespace `langgraph:<json list>`;
  an owner, record namespace or registry shard too long for the stores
  (MAX_ID_BYTES) is hashed instead (`domain.langgraph_layout.bounded_name`), so
  labels of any length work;
- an item is one record (kind `langgraph.item`, id hashed from namespace and
  key; the value, key and namespace live in its attributes), plus one record
  per embedded text (kind `langgraph.vector`) when an `index` is configured;
- a registry under the reserved owner `langgraph` (LangGraph forbids it as a
  root label) lists the namespaces, for `list_namespaces` and prefix searches.

Semantics (docs/integrations.md compares them with `InMemoryStore`): reads in a
batch see the state before the batch's puts; puts to one item in a batch keep the
last; `created_at` survives updates; search without a query orders by
`updated_at` desc, then namespace, key; with a query by score desc (max over an
item's texts), then namespace, key, and items without vectors follow in the
no-query order. TTL is not supported (`supports_ttl = False`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import random
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
import numpy as np
import numpy.typing as npt
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from agent_memory.bootstrap import Memory
from agent_memory.bootstrap.services import other_spaces
from agent_memory.domain.errors import (
    AgentMemoryError,
    BackendUnavailable,
    ConfigurationError,
    DuplicateRecord,
    InvalidInput,
    LeaseNotHeld,
    NotFound,
)
from agent_memory.domain.langgraph_layout import (
    EMBEDS_CONTENT,
    LANGGRAPH_PREFIX,
    REGISTRY_KIND,
    REGISTRY_OWNER,
    VECTOR_KIND,
    bounded_name,
    compact_json,
    holds_path_only,
    owner_of,
    registry_shard,
)
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.validation import (
    MAX_LIMIT,
    require_json_mapping,
    require_no_nul,
    require_storable,
    require_text,
)
from agent_memory.ports.models import Embedder
from agent_memory.ports.storage import LeaseStore, MemoryStore, VersionedWrites

__all__ = [
    "AgentMemoryStore",
    "InvalidNamespace",
    "NoLoopForSyncCall",
    "owner_of",
    "record_namespace_of",
]

ITEM_KIND = "langgraph.item"
_PAGE = 500
_T = TypeVar("_T")
_UPSERT_ATTEMPTS = 16
# the lease that serialises the writers of one item across processes (`_WriterLease`):
# its scope in the lease store; its TTL, i.e. how long a writer that died holding
# it blocks the others (the holder renews it every third of it while its write
# runs); the longest pause between two tries to take it; how many times a writer
# that lost it redoes its write before giving up
_WRITER_SCOPE = "langgraph.writers"
_WRITER_TTL = timedelta(seconds=5)
_WRITER_POLL = 0.05
_WRITER_ATTEMPTS = 8
_INDEX_KEYS = frozenset({"dims", "embed", "fields", "distance_type"})

Namespace = tuple[str, ...]


class InvalidNamespace(InvalidInput, InvalidNamespaceError):
    """A namespace LangGraph or this store refuses (an `InvalidInput` and a
    LangGraph `InvalidNamespaceError` at once)."""


class NoLoopForSyncCall(ConfigurationError, asyncio.InvalidStateError):
    """The sync API called where it would deadlock (on its own loop's thread) or
    with no loop to run on: a `ConfigurationError` and, as LangGraph's async
    stores raise there, an `asyncio.InvalidStateError`."""


def record_namespace_of(namespace: Namespace) -> str:
    """The record namespace of a LangGraph namespace: its other labels, as JSON
    (hashed when too long for a record namespace: `bounded_name`)."""
    return bounded_name(LANGGRAPH_PREFIX + compact_json(list(namespace[1:])))


def _digest(*parts: object) -> str:
    digest = hashlib.sha256(compact_json(list(parts)).encode("utf-8")).hexdigest()
    return LANGGRAPH_PREFIX + digest[:40]


def _item_id(namespace: Namespace, key: str) -> str:
    return _digest("item", list(namespace), key)


def _vector_id(namespace: Namespace, key: str, index: int) -> str:
    return _digest("vector", list(namespace), key, index)


def _registry_id(namespace: Namespace) -> str:
    return _digest("namespace", list(namespace))


def _unit(dimension: int) -> npt.NDArray[np.float32]:
    """The placeholder vector of records searched by no vector (items, registry)."""
    unit = np.zeros(dimension, dtype=np.float32)
    unit[0] = 1.0
    return unit


def _indexed_text(value: Mapping[str, Any], path: str) -> str | None:
    """The text a vector record's `path` names in an item's `value`, as `_texts`
    wrote it: the one text at `path`, or the i-th of several at `base` for a
    path `base.i`. None when it names no such text."""
    found = re.fullmatch(r"(.*)\.(\d+)", path)
    tries: list[tuple[str, int | None]] = [(path, None)]
    if found:
        tries.append((found[1], int(found[2])))
    for base, index in tries:
        try:
            texts = get_text_at_path(value, base if base == "$" else tokenize_path(base))
        except Exception:  # LangGraph's parser refuses the path: not this form
            continue
        if index is None and len(texts) == 1:
            return str(texts[0])
        if index is not None and len(texts) > 1 and index < len(texts):
            return str(texts[index])
    return None


def _labels(labels: object, field: str, *, allow_empty: bool) -> Namespace:
    if not isinstance(labels, tuple | list):
        raise InvalidNamespace(field, f"a tuple of strings is required, got {labels!r}")
    out = tuple(labels)
    if not out and not allow_empty:
        raise InvalidNamespace(field, "a namespace needs at least one label")
    for i, label in enumerate(out):
        if not isinstance(label, str) or not label:
            raise InvalidNamespace(
                f"{field}[{i}]", f"a non-empty string is required, got {label!r}"
            )
        require_no_nul(label, f"{field}[{i}]")
        require_text(label, f"{field}[{i}]")
    return out


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidInput("key", f"a string is required, got {type(key).__name__}")
    require_no_nul(key, "key")
    return require_text(key, "key")


def _window(limit: object, offset: object) -> tuple[int, int]:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_LIMIT:
        raise InvalidInput("limit", f"an integer in [0, {MAX_LIMIT}] is required, got {limit!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidInput("offset", f"a non-negative integer is required, got {offset!r}")
    return limit, offset


def _require_filter(filter_: object) -> None:
    """A JSON mapping, where (unlike in values) `inf`, `-inf` and `nan` may be
    compared against, as in `InMemoryStore`: `$lt inf` matches every number."""
    if not isinstance(filter_, Mapping):
        raise InvalidInput("filter", f"a mapping is required, got {type(filter_).__name__}")
    for key in filter_:
        if not isinstance(key, str):
            raise InvalidInput("filter", f"keys must be strings, got {key!r}")
    try:
        json.dumps(filter_, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInput("filter", f"values must be JSON-serialisable: {exc}") from None


def _validate(op: Op) -> None:
    """Check one op before any I/O: a bad op fails the whole batch untouched."""
    if isinstance(op, GetOp):
        _labels(op.namespace, "namespace", allow_empty=False)
        _key(op.key)
    elif isinstance(op, PutOp):
        ns = _labels(op.namespace, "namespace", allow_empty=False)
        _key(op.key)
        if ns[0] == REGISTRY_OWNER:
            raise InvalidNamespace("namespace", 'the root label "langgraph" is reserved')
        if op.ttl is not None:
            raise InvalidInput("ttl", "AgentMemoryStore does not support TTL; pass ttl=None")
        if op.value is not None:
            require_json_mapping(op.value, "value")
            # no NUL and no lone surrogate anywhere (keys too): what every backend
            # refuses is refused here, before the batch writes anything
            require_storable(op.value, "value")
        if op.index not in (None, False) and (
            not isinstance(op.index, list) or not all(isinstance(p, str) for p in op.index)
        ):
            raise InvalidInput("index", f"False, None or a list of paths, got {op.index!r}")
    elif isinstance(op, SearchOp):
        _labels(op.namespace_prefix, "namespace_prefix", allow_empty=True)
        _window(op.limit, op.offset)
        if op.filter is not None:
            _require_filter(op.filter)
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidInput("query", f"a string is required, got {type(op.query).__name__}")
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            if not isinstance(condition, MatchCondition) or condition.match_type not in (
                "prefix",
                "suffix",
            ):
                raise InvalidInput("match_conditions", f"unsupported condition {condition!r}")
            _labels(condition.path, "match_conditions.path", allow_empty=True)
        _window(op.limit, op.offset)
        depth = op.max_depth
        if depth is not None and (
            not isinstance(depth, int) or isinstance(depth, bool) or depth < 1
        ):
            raise InvalidInput("max_depth", f"None or an integer >= 1 is required, got {depth!r}")
    else:
        raise InvalidInput("op", f"unknown operation type {type(op).__name__}")


def _matches(condition: MatchCondition, namespace: Namespace) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(p == "*" or n == p for n, p in pairs)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    a, b = _number(value), _number(operand)
    if a is None or b is None:
        return False  # an ordering needs two numbers: anything else does not match
    if operator == "$gt":
        return a > b
    if operator == "$gte":
        return a >= b
    if operator == "$lt":
        return a < b
    if operator == "$lte":
        return a <= b
    raise InvalidInput("filter", f"unsupported operator {operator!r}")


def _matches_filter(value: Any, wanted: Any) -> bool:
    """LangGraph's filter rules: nested mappings match field by field, lists
    exactly, `$eq $ne $gt $gte $lt $lte` compare (orderings: numbers only)."""
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(value, str(k), v) for k, v in wanted.items())
        if not isinstance(value, Mapping):
            return False
        return all(_matches_filter(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches_filter(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _check_operators(filter_: Mapping[str, Any]) -> None:
    stack: list[object] = [filter_]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for k, v in item.items():
                if str(k).startswith("$") and k not in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
                    raise InvalidInput("filter", f"unsupported operator {k!r}")
                stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(item)


class _LeaseLost(Exception):
    """A writer's lease on the item it writes ran out or passed to another writer
    (internal: the write stops, and is redone under a new lease)."""


def _unfenced() -> None:
    """The fence of a store without a lease store (one process): nothing to check."""


class _WriterLease:
    """One writer's hold on an item's writer lease, for one attempt at a write.

    Renewed every third of the TTL while the write runs (a live writer, however
    slow, keeps it; a dead one loses it within one TTL). `check`, called before
    each record write (no I/O), raises `_LeaseLost` once the lease may have run
    out (90% of the TTL after the start of the last successful acquire or renew,
    by this process's monotonic clock) or a renewal found it taken. `release`
    is the confirmation: it succeeds only for a lease still held, and a lease
    that once expired is never held again by the same acquisition (renew refuses
    it), so True proves that no other writer held it since it was taken."""

    def __init__(
        self, leases: LeaseStore, key: str, owner: str, ttl: timedelta, started: float
    ) -> None:
        self._leases, self._key, self._owner, self._ttl = leases, key, owner, ttl
        self._deadline = started + 0.9 * ttl.total_seconds()
        self._lost = False
        self._beat = asyncio.get_running_loop().create_task(self._renew_while_held())

    def check(self) -> None:
        if self._lost or time.monotonic() >= self._deadline:
            raise _LeaseLost

    async def _renew_while_held(self) -> None:
        while not self._lost:
            await asyncio.sleep(self._ttl.total_seconds() / 3)
            started = time.monotonic()
            try:
                await self._leases.renew(_WRITER_SCOPE, self._key, self._owner, self._ttl)
            except LeaseNotHeld:
                self._lost = True
            except AgentMemoryError:
                continue  # the lease store unreachable for now: the deadline decides
            else:
                self._deadline = started + 0.9 * self._ttl.total_seconds()

    async def release(self) -> bool:
        """Stop renewing and release; True when the lease was held all along."""
        self._beat.cancel()
        return await self._leases.release(_WRITER_SCOPE, self._key, self._owner)


class AgentMemoryStore(BaseStore):
    """LangGraph's store on an agent-memory `Memory` (any backend).

    `index` follows LangGraph's `IndexConfig`: `fields` (default `["$"]`, the
    whole value) and an optional `embed` (a LangChain `Embeddings`, or a sync or
    async function of texts); without `embed` the memory's own embedder is
    used. `dims`, when given, must equal the store's embedding dimension;
    `distance_type`, when given, must be "cosine" (scores are cosine
    similarities); any other key is refused (`ConfigurationError`).
    Without `index`, search ignores `query` (no scores), like `InMemoryStore`.

    `memory` is a `Memory`, or the `SyncMemory` of `agent_memory.sync.connect`
    (a plain synchronous program: `graph.invoke`). The API runs on the loop the
    memory was opened on: the sync API (`get`, `put`, ...) from any other
    thread while that loop runs (sync nodes under `ainvoke`; any thread for a
    `SyncMemory`, whose loop runs on its helper thread); the async API (`aget`,
    `aput`, ...) on the caller's loop, or scheduled onto the memory's loop when
    that one runs in another thread (a `SyncMemory`, or `loop=`).
    """

    supports_ttl = False

    def __init__(
        self,
        memory: Memory | Any,
        *,
        index: IndexConfig | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self._sync: Any = None
        inner = getattr(memory, "memory", None)
        if isinstance(inner, Memory) and loop is None:  # agent_memory.sync's SyncMemory
            # its run/arun submit to its loop, and refuse (rather than wait on a
            # stopped loop) once it is closed or in a forked process
            self._sync = memory
            loop, memory = getattr(memory, "loop", None), inner
        if not isinstance(memory, Memory):
            raise ConfigurationError(
                "AgentMemoryStore needs a Memory (agent_memory.connect) or a SyncMemory "
                f"(agent_memory.sync.connect), got {type(memory).__name__}"
            )
        self._store: MemoryStore = memory.store
        self._embedder: Embedder = memory.embedder
        self._other_spaces = other_spaces(memory)
        self._now = now or (lambda: datetime.now(UTC))
        dimension = self._store.space.dimension
        self._unit = _unit(dimension)
        # one writer at a time per item (see `_item_lock`): [lock, users]
        self._writers: dict[str, list[Any]] = {}
        # and one across processes, where the backend serves leases (see `_item_lock`)
        self._leases: LeaseStore | None = None
        with contextlib.suppress(ConfigurationError):
            self._leases = memory.leases
        self._loop = loop
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None
        self.index_config: IndexConfig | None = None
        self._fields: list[tuple[str, str | list[str]]] = []
        self._embeddings: Any = None
        if index is not None:
            if not isinstance(index, Mapping):
                raise ConfigurationError(f"index must be a mapping (IndexConfig), got {index!r}")
            unknown = sorted(set(index) - _INDEX_KEYS)
            if unknown:
                raise ConfigurationError(
                    f"index keys {unknown} are not supported (known: {sorted(_INDEX_KEYS)})"
                )
            distance = index.get("distance_type", "cosine")
            if distance != "cosine":
                raise ConfigurationError(
                    f"index distance_type={distance!r} is not supported: AgentMemoryStore "
                    "scores by cosine similarity only (distance_type='cosine')"
                )
            dims = index.get("dims", dimension)
            if dims != dimension:
                raise ConfigurationError(
                    f"index dims={dims!r} differ from the store's embedding dimension "
                    f"{dimension}: open the memory with the index's embeddings, "
                    "agent_memory.connect(url, embedder=embeddings), so both share them"
                )
            fields = index.get("fields") or ["$"]
            if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
                raise ConfigurationError(f"index fields must be a list of paths, got {fields!r}")
            self.index_config = IndexConfig(dims=dimension, fields=list(fields))
            self._fields = [(f, f if f == "$" else tokenize_path(f)) for f in fields]
            embed = index.get("embed")
            if embed is not None:
                self._embeddings = ensure_embeddings(embed)
                self.index_config["embed"] = embed

    # -- the two entry points LangGraph calls -------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The sync API: runs `abatch` on the store's loop from another thread."""
        ops = list(ops)
        return self._run_sync(lambda: self.abatch(ops))

    def reindex(self) -> int:
        """`areindex` from synchronous code (as `batch` runs `abatch`)."""
        return self._run_sync(self.areindex)

    def _run_sync(self, work: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        loop = self._sync_loop()
        if self._sync is not None:  # a SyncMemory: its closed and fork checks apply
            result: _T = self._sync.run(work())
            return result
        assert loop is not None
        return asyncio.run_coroutine_threadsafe(work(), loop).result()

    def _sync_loop(self) -> asyncio.AbstractEventLoop | None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self._loop
        if self._sync is not None and loop is not running:
            return loop  # the SyncMemory refuses a closed or forked connection itself
        if loop is None or not loop.is_running() or loop is running:
            raise NoLoopForSyncCall(
                "AgentMemoryStore's sync API needs its event loop running in another thread: "
                "inside async code use the async API (aget/aput/asearch, graph.ainvoke); a "
                "synchronous program (graph.invoke) opens the memory with "
                "agent_memory.sync.connect(url) and passes that"
            )
        return loop

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Get/Search/ListNamespaces see the state before the batch; then the puts
        run, the last put to an item winning. A bad op fails the batch before any I/O."""
        ops = list(ops)
        return await self._on_memory_loop(lambda: self._abatch(ops))

    async def _on_memory_loop(self, work: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Await `work()` on the loop the memory lives on: this one, or, when the
        memory lives on another thread's running loop (a SyncMemory), that one."""
        running = asyncio.get_running_loop()
        if self._sync is not None and self._loop is not running:
            result: _T = await self._sync.arun(work())
            return result
        if self._loop is None:
            self._loop = running
        elif self._loop is not running and self._loop.is_running():
            done = asyncio.run_coroutine_threadsafe(work(), self._loop)
            return await asyncio.wrap_future(done)
        return await work()

    async def _abatch(self, ops: list[Op]) -> list[Result]:
        for op in ops:
            _validate(op)
            if isinstance(op, SearchOp) and op.filter:
                _check_operators(op.filter)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[Namespace, str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[i] = await self._get(tuple(op.namespace), op.key)
            elif isinstance(op, SearchOp):
                results[i] = await self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = await self._list_namespaces(op)
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
        if puts:
            await self._put_all(list(puts.values()))
        return results

    async def areindex(self) -> int:
        """Rewrite the vector records written before vector records held their
        text (`domain.langgraph_layout.holds_path_only`): each gets the text its
        path names in its item's value, so a re-embed, which embeds stored
        content, rebuilds its vector. Vectors are kept; idempotent. The number
        of records rewritten. A record whose path names no single text of the
        value any more is left as it is (a put of the item rewrites it). Each
        rewrite is conditional on the version listed where the store has
        `VersionedWrites`, so a put landing meanwhile is kept; on a store
        without them, run it while no other writer puts to the store. Runs on
        the memory's loop, as `abatch` does."""
        return await self._on_memory_loop(self._areindex)

    async def _areindex(self) -> int:
        done = 0
        versioned = self._store if isinstance(self._store, VersionedWrites) else None
        for namespace in await self._registered(None):
            values = {
                item.attributes["langgraph"]["key"]: item.attributes["langgraph"]["value"]
                for item in await self._items_in(namespace)
            }
            for record in await self._records_in(namespace, VECTOR_KIND):
                meta = record.attributes["langgraph"]
                value = values.get(meta.get("key"))
                if value is None or not holds_path_only(record):
                    continue
                text = _indexed_text(value, str(meta.get("path", record.content)))
                if text is None:
                    continue
                rewritten = attrs.evolve(
                    record,
                    content=text,
                    attributes={"langgraph": {**meta, "embeds": EMBEDS_CONTENT}},
                    # one microsecond later, so a conditional write replaces
                    # exactly the version read (a put since then is later still)
                    updated_at=record.updated_at + timedelta(microseconds=1),
                )
                if versioned is not None:
                    done += int(await versioned.update_if_older(rewritten))
                    continue
                with contextlib.suppress(NotFound):
                    await self._store.update(rewritten)
                    done += 1
        return done

    # -- reads -------------------------------------------------------------------
    @staticmethod
    def _item(record: MemoryRecord) -> Item:
        meta = record.attributes["langgraph"]
        return Item(
            value=meta["value"],
            key=meta["key"],
            namespace=tuple(meta["namespace"]),
            created_at=record.created_at,
            updated_at=record.updated_at,
        )

    async def _get(self, namespace: Namespace, key: str) -> Item | None:
        record = await self._store.get(owner_of(namespace), _item_id(namespace, key))
        if record is None or record.kind != ITEM_KIND:
            return None
        return self._item(record)

    async def _registered(self, first: str | None) -> list[Namespace]:
        """Every registered namespace (of one first label, when given)."""
        out: list[Namespace] = []
        cursor = None
        shard = None if first is None else registry_shard(first)
        while True:
            page = await self._store.list(
                REGISTRY_OWNER, namespace=shard, kinds=[REGISTRY_KIND], limit=_PAGE, cursor=cursor
            )
            out.extend(tuple(r.attributes["namespace"]) for r in page.records)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    async def _items_in(self, namespace: Namespace) -> list[MemoryRecord]:
        return await self._records_in(namespace, ITEM_KIND)

    async def _records_in(self, namespace: Namespace, kind: str) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        cursor = None
        owner, rec_ns = owner_of(namespace), record_namespace_of(namespace)
        while True:
            page = await self._store.list(
                owner, namespace=rec_ns, kinds=[kind], limit=_PAGE, cursor=cursor
            )
            out.extend(page.records)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    async def _holds_items(self, namespace: Namespace, store: MemoryStore | None = None) -> bool:
        page = await (store or self._store).list(
            owner_of(namespace),
            namespace=record_namespace_of(namespace),
            kinds=[ITEM_KIND],
            limit=1,
        )
        return bool(page.records)

    async def _namespaces_under(self, prefix: Namespace) -> list[Namespace]:
        registered = await self._registered(prefix[0] if prefix else None)
        return sorted({ns for ns in registered if ns[: len(prefix)] == prefix})

    @staticmethod
    def _plain_order(record: MemoryRecord) -> tuple[float, Namespace, str]:
        meta = record.attributes["langgraph"]
        return (-record.updated_at.timestamp(), tuple(meta["namespace"]), meta["key"])

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        limit, offset = op.limit, op.offset
        candidates: list[MemoryRecord] = []
        for namespace in await self._namespaces_under(tuple(op.namespace_prefix)):
            records = await self._items_in(namespace)
            if op.filter:
                records = [
                    r
                    for r in records
                    if _matches_filter(r.attributes["langgraph"]["value"], op.filter)
                ]
            candidates.extend(records)
        candidates.sort(key=self._plain_order)
        if not (op.query and self.index_config is not None):
            return [self._hit(r, None) for r in candidates[offset : offset + limit]]
        wanted = offset + limit
        query = await self._embed_query(op.query)
        by_ns: dict[Namespace, dict[str, MemoryRecord]] = {}
        for r in candidates:
            meta = r.attributes["langgraph"]
            by_ns.setdefault(tuple(meta["namespace"]), {})[meta["key"]] = r
        scored: dict[tuple[Namespace, str], float] = {}
        for namespace, items in by_ns.items():
            scored.update(await self._scores(namespace, items, query, wanted))
        ranked = sorted(scored.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
        out: list[tuple[MemoryRecord, float | None]] = [
            (by_ns[ns][key], score) for (ns, key), score in ranked
        ]
        if len(out) < wanted:
            out.extend(
                (r, None) for r in candidates if not r.attributes["langgraph"].get("vectors", 0)
            )
        return [self._hit(r, s) for r, s in out[offset:wanted]]

    async def _scores(
        self,
        namespace: Namespace,
        items: Mapping[str, MemoryRecord],
        query: npt.NDArray[np.float32],
        wanted: int,
    ) -> dict[tuple[Namespace, str], float]:
        """The best score of each item of one namespace among the top `wanted`
        (vector hits of items the filter dropped do not count)."""
        vectors = sum(int(r.attributes["langgraph"].get("vectors", 0)) for r in items.values())
        if not vectors or not wanted:
            return {}
        limit = min(MAX_LIMIT, max(16, wanted * 2))
        while True:
            hits = await self._store.search(
                owner_of(namespace),
                query,
                limit=limit,
                namespace=record_namespace_of(namespace),
                kinds=[VECTOR_KIND],
            )
            best: dict[tuple[Namespace, str], float] = {}
            for hit in hits:
                key = hit.record.attributes["langgraph"]["key"]
                if key in items and math.isfinite(hit.score):
                    best.setdefault((namespace, key), float(hit.score))
            if len(hits) < limit or len(best) >= wanted or limit >= MAX_LIMIT:
                return best
            limit = min(MAX_LIMIT, limit * 4)

    def _hit(self, record: MemoryRecord, score: float | None) -> SearchItem:
        item = self._item(record)
        return SearchItem(
            namespace=item.namespace,
            key=item.key,
            value=item.value,
            created_at=item.created_at,
            updated_at=item.updated_at,
            score=score,
        )

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[Namespace]:
        conditions = tuple(op.match_conditions or ())
        firsts = {
            c.path[0]
            for c in conditions
            if c.match_type == "prefix" and c.path and c.path[0] != "*"
        }
        registered = await self._registered(next(iter(firsts)) if len(firsts) == 1 else None)
        matching = [ns for ns in set(registered) if all(_matches(c, ns) for c in conditions)]
        live = [ns for ns in sorted(matching) if await self._holds_items(ns)]
        if op.max_depth is not None:
            live = sorted({ns[: op.max_depth] for ns in live})
        return live[op.offset : op.offset + op.limit]

    # -- writes ------------------------------------------------------------------
    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(path, text) pairs to embed, as LangGraph extracts them."""
        if self.index_config is None or op.value is None or op.index is False:
            return []
        paths = (
            self._fields
            if op.index is None
            else [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
        )
        out: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                out.extend((f"{path}.{i}", t) for i, t in enumerate(texts))
            elif texts:
                out.append((path, texts[0]))
        return out

    async def _embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        dimension = self._store.space.dimension
        if not texts:
            return np.zeros((0, dimension), dtype=np.float32)
        if self._embeddings is not None:
            rows = await self._embeddings.aembed_documents(list(texts))
            return np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        return np.asarray(await self._embedder.embed(list(texts)), dtype=np.float32)

    async def _embed_query(self, query: str) -> npt.NDArray[np.float32]:
        if self._embeddings is not None:
            return np.asarray(await self._embeddings.aembed_query(query), dtype=np.float32)
        return np.asarray((await self._embedder.embed([query]))[0], dtype=np.float32)

    async def _put_all(self, puts: Sequence[PutOp]) -> None:
        texts = [self._texts(op) for op in puts]
        flat = [text for pairs in texts for _, text in pairs]
        matrix = await self._embed(flat)
        row = 0
        deleted: list[tuple[Namespace, str, int]] = []
        for op, pairs in zip(puts, texts, strict=True):
            vectors = matrix[row : row + len(pairs)]
            row += len(pairs)
            item_id = _item_id(tuple(op.namespace), op.key)
            async with self._item_lock(item_id) as leases:
                stale = await self._write(leases, item_id, op, pairs, vectors)
            if op.value is None:
                deleted.append((tuple(op.namespace), op.key, stale))
        if deleted:
            await self._delete_elsewhere(deleted)

    @contextlib.asynccontextmanager
    async def _item_lock(self, item_id: str) -> AsyncIterator[LeaseStore | None]:
        """Serialise the writes of one item through this store. A put writes
        several records (the item, then its vectors) and a delete removes them:
        interleaved with another put or delete of the same item, the vectors of
        one write would outlive it beside the item of the other (a search then
        scores the item by a text it does not hold, or lists it twice). Every
        call runs on the memory's loop (`_on_memory_loop`, the sync API too), so
        an asyncio lock per item serialises them within this process; it is
        dropped once unused. Writers in other processes (workers on one server
        backend) are serialised by a lease on the item in the deployment's
        lease store, taken under that lock (`_write`): it yields that lease
        store (None without one: no lease to take)."""
        entry = self._writers.get(item_id)
        if entry is None:
            entry = self._writers[item_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield self._leases
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._writers[item_id]

    async def _write(
        self,
        leases: LeaseStore | None,
        item_id: str,
        op: PutOp,
        pairs: Sequence[tuple[str, str]],
        vectors: npt.NDArray[np.float32],
    ) -> int:
        """`_put` under the item's writer lease in `leases` (without: as is).

        The lease is short and renewed while the write runs (`_WriterLease`), so
        a writer that dies holding it blocks the item's other writers for one TTL
        at most, and a live one is never overtaken. No port makes a record write
        conditional on a lease (`VersionedWrites` conditions one record on its
        own `updated_at`; a put spans several records), so a writer checks its
        lease before each record write and confirms it after the last (by
        releasing it): a writer stalled past its TTL after a check (paused, its
        loop blocked) may land one late write over a newer writer's, finds
        its lease lost, and redoes the whole write under a new lease, deleting
        every vector record of the item it does not write (`sweep`), so the
        item ends as one write's value and vectors. `_WRITER_ATTEMPTS` lost
        leases in a row raise `BackendUnavailable`."""
        if leases is None:
            return await self._put(op, pairs, vectors, _unfenced, sweep=False)
        sweep = False
        for _ in range(_WRITER_ATTEMPTS):
            lease = await self._writer_lease(leases, item_id)
            done = False
            try:
                stale = await self._put(op, pairs, vectors, lease.check, sweep=sweep)
                done = True
            except _LeaseLost:
                pass
            finally:
                held = await lease.release()
            if done and held:
                return stale
            sweep = True
        raise BackendUnavailable(
            "langgraph store",
            f"lost the writer lease of item {op.key!r} of {tuple(op.namespace)!r} "
            f"{_WRITER_ATTEMPTS} times in a row (its lease TTL is {_WRITER_TTL}: is the "
            "event loop blocked that long, or the lease store's clock skewed?)",
        )

    @staticmethod
    async def _writer_lease(leases: LeaseStore, item_id: str) -> _WriterLease:
        """Take the item's writer lease: wait, polling with jittered backoff,
        while another writer (another process, or another store) holds it."""
        owner = f"{os.getpid()}:{uuid.uuid4().hex}"
        ttl = _WRITER_TTL
        pause = 0.002
        while True:
            started = time.monotonic()
            if await leases.acquire(_WRITER_SCOPE, item_id, owner, ttl) is not None:
                return _WriterLease(leases, item_id, owner, ttl, started)
            await asyncio.sleep(random.uniform(pause / 2, pause))
            pause = min(_WRITER_POLL, pause * 2)

    async def _delete_elsewhere(self, deleted: Sequence[tuple[Namespace, str, int]]) -> None:
        """A delete reaches every other embedding space the deployment holds
        records in, as a forget does (the old space a re-embed keeps until
        `--drop-old`, a new one it is building): the item there, its vectors
        (as many as either space's version had) and, once the namespace holds no
        item there, its registry entry. A space that cannot be reached fails the
        call after the delete in the space reads use; the delete is idempotent,
        so a retry finishes it."""
        async with self._other_spaces() as stores:
            for store in stores:
                for namespace, key, stale in deleted:
                    owner, item_id = owner_of(namespace), _item_id(namespace, key)
                    there = await store.get(owner, item_id)
                    if there is not None:
                        stale = max(stale, int(there.attributes["langgraph"].get("vectors", 0)))
                    await store.delete(owner, item_id)
                    for i in range(stale):
                        await store.delete(owner, _vector_id(namespace, key, i))
                for namespace in dict.fromkeys(ns for ns, _, _ in deleted):
                    await self._unregister_if_empty(namespace, store)

    async def _put(
        self,
        op: PutOp,
        pairs: Sequence[tuple[str, str]],
        vectors: npt.NDArray[np.float32],
        check: Callable[[], None],
        *,
        sweep: bool,
    ) -> int:
        """An upsert (last write wins, `created_at` kept when the item existed) or
        an idempotent delete; race-free against concurrent puts and deletes of
        the same item (no read-then-write that a concurrent delete can fail). The
        number of vectors the item had before. `check` runs before each record
        write (the writer lease's fence: `_write`); `sweep` first deletes every
        vector record of the item this write does not write, whatever the item
        record says (a redo after a lost lease: another writer's vectors may sit
        beside a late write's item record).

        Each (path, text) of `pairs` is one vector record whose content is the
        text it embeds (so a re-embed, which embeds stored content, rebuilds it)."""
        namespace, key = tuple(op.namespace), op.key
        owner, rec_ns = owner_of(namespace), record_namespace_of(namespace)
        item_id = _item_id(namespace, key)
        old = await self._store.get(owner, item_id)
        stale = int(old.attributes["langgraph"].get("vectors", 0)) if old is not None else 0
        if sweep:
            keep = 0 if op.value is None else len(pairs)
            stale = max(stale, await self._sweep(namespace, key, keep, check))
        if op.value is None:
            check()
            await self._store.delete(owner, item_id)
            for i in range(stale):
                check()
                await self._store.delete(owner, _vector_id(namespace, key, i))
            check()
            await self._unregister_if_empty(namespace)
            return stale
        for i in range(len(pairs), stale):  # vectors of paths this put no longer has
            check()
            await self._store.delete(owner, _vector_id(namespace, key, i))
        value = dict(op.value)
        now = self._now()
        check()
        meta = {"namespace": list(namespace), "key": key, "value": value, "vectors": len(pairs)}
        await self._upsert(
            MemoryRecord(
                id=item_id,
                owner=owner,
                namespace=rec_ns,
                kind=ITEM_KIND,
                content=compact_json(value),
                vector=self._unit,
                created_at=now,
                updated_at=now,
                attributes={"langgraph": meta},
            ),
            keep_created=True,
        )
        for i, (path, text) in enumerate(pairs):
            check()
            await self._upsert(
                MemoryRecord(
                    id=_vector_id(namespace, key, i),
                    owner=owner,
                    namespace=rec_ns,
                    kind=VECTOR_KIND,
                    content=text,
                    vector=vectors[i],
                    created_at=now,
                    updated_at=now,
                    attributes={"langgraph": {"key": key, "path": path, "embeds": EMBEDS_CONTENT}},
                ),
                keep_created=False,
            )
        check()
        await self._register(namespace, now)
        return stale

    async def _sweep(
        self, namespace: Namespace, key: str, keep: int, check: Callable[[], None]
    ) -> int:
        """Delete every vector record of the item but its first `keep`; the
        number of its vector records found."""
        wanted = {_vector_id(namespace, key, i) for i in range(keep)}
        found = [
            r
            for r in await self._records_in(namespace, VECTOR_KIND)
            if r.attributes.get("langgraph", {}).get("key") == key
        ]
        for record in found:
            if record.id not in wanted:
                check()
                await self._store.delete(record.owner, record.id)
        return len(found)

    async def _upsert(self, record: MemoryRecord, *, keep_created: bool) -> None:
        """Add `record`, or replace the stored one (keeping its `created_at` when
        `keep_created`): add; on `DuplicateRecord` update; on `NotFound` (a
        concurrent delete in between) add again. Each retry means another writer
        won a race on this very record, so a few suffice."""
        for _ in range(_UPSERT_ATTEMPTS):
            try:
                await self._store.add([record])
                return
            except DuplicateRecord:
                pass
            if keep_created:
                current = await self._store.get(record.owner, record.id)
                if current is None:
                    continue  # deleted since the add: add again
                created = min(current.created_at, record.updated_at)
                record = attrs.evolve(record, created_at=created)
            try:
                await self._store.update(record)
                return
            except NotFound:
                continue  # deleted since the add: add again
        raise BackendUnavailable(
            "langgraph store",
            f"record {record.id!r} kept changing under {_UPSERT_ATTEMPTS} put attempts",
        )

    async def _unregister_if_empty(
        self, namespace: Namespace, store: MemoryStore | None = None
    ) -> None:
        """Drop the namespace from the registry (of `store`, default the one reads
        use) once it holds no item; re-register it when a concurrent put added one
        meanwhile (that put may have seen the registry entry before this delete
        removed it)."""
        store = store or self._store
        if await self._holds_items(namespace, store):
            return
        await store.delete(REGISTRY_OWNER, _registry_id(namespace))
        if await self._holds_items(namespace, store):
            await self._register(namespace, self._now(), store)

    async def _register(
        self, namespace: Namespace, now: datetime, store: MemoryStore | None = None
    ) -> None:
        store = store or self._store
        rid = _registry_id(namespace)
        if await store.get(REGISTRY_OWNER, rid) is not None:
            return
        unit = self._unit if store is self._store else _unit(store.space.dimension)
        with contextlib.suppress(DuplicateRecord):
            await store.add(
                [
                    MemoryRecord(
                        id=rid,
                        owner=REGISTRY_OWNER,
                        namespace=registry_shard(namespace[0]),
                        kind=REGISTRY_KIND,
                        content=compact_json(list(namespace)),
                        vector=unit,
                        created_at=now,
                        updated_at=now,
                        attributes={"namespace": list(namespace)},
                    )
                ]
            )

"""Argument checks every storage adapter makes the same way, in one place.

Records and leases are validated when built, but a store must not rely on
that: a record built with validators disabled could otherwise reach storage
with a blank owner or a vector of another dimension. The checks raise the
domain's typed errors (`InvalidInput`, `ScopeRequired`, `DimensionMismatch`)
naming the field, before any I/O, so every backend rejects the same input the
same way: NUL (U+0000) in any stored or queried text (PostgreSQL cannot hold
it), scopes and ids over MAX_ID_BYTES, limits outside [1, MAX_LIMIT], ttls
outside (0, MAX_TTL], keyword queries over MAX_QUERY_BYTES (see `agent_memory.domain.validation`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar, overload

import numpy as np
import numpy.typing as npt

from agent_memory.domain.errors import DuplicateRecord, InvalidInput
from agent_memory.domain.ranking import decode_cursor
from agent_memory.domain.records import (
    EmbeddingSpace,
    Entity,
    Event,
    MemoryRecord,
    require_dimension,
)
from agent_memory.domain.validation import (
    MAX_QUERY_BYTES,
    MAX_QUERY_WORD_BYTES,
    MAX_VALUE_BYTES,
    as_vector,
    require_id,
    require_limit,
    require_no_nul,
    require_scope,
    require_storable,
    require_text,
    require_ttl,
    require_utc,
    require_vector_norm,
)

__all__ = [
    "check_cache_ttl",
    "check_cache_value",
    "check_events",
    "check_filters",
    "check_lease_args",
    "check_lease_payload",
    "check_list_args",
    "check_min_score",
    "check_no_duplicates",
    "check_prefix",
    "check_query",
    "check_query_vector",
    "check_record",
    "check_records",
    "check_retention",
    "check_search_args",
    "check_search_text_args",
    "check_space",
    "check_window_args",
]


def check_space(space: object) -> EmbeddingSpace:
    """The `space` a store is bound to."""
    if not isinstance(space, EmbeddingSpace):
        raise InvalidInput("space", f"an EmbeddingSpace is required, got {space!r}")
    return space


def check_record(record: object, field: str, space: EmbeddingSpace) -> MemoryRecord:
    """What a store relies on in a record (`field` names the argument): a
    `MemoryRecord` with non-blank owner, namespace, id and kind, text content and
    context, and a vector of the store's dimension."""
    if not isinstance(record, MemoryRecord):
        raise InvalidInput(field, f"MemoryRecord required, got {type(record).__name__}")
    require_scope(record.owner, "record.owner")
    require_scope(record.namespace, "record.namespace")
    require_id(record.id, "record.id")
    require_id(record.kind, "record.kind")
    for name in ("content", "context"):
        value = getattr(record, name)
        if not isinstance(value, str):
            raise InvalidInput(f"record.{name}", "a string is required")
        require_no_nul(value, f"record.{name}")
    require_storable(record.attributes, "record.attributes")
    if not isinstance(record.vector, np.ndarray):
        raise InvalidInput("record.vector", "a numpy vector is required (build records normally)")
    require_dimension(space, record.vector)
    require_vector_norm(record.vector, "record.vector")
    return record


def check_records(records: Sequence[MemoryRecord], space: EmbeddingSpace) -> list[MemoryRecord]:
    """The batch given to `add`, as a list of checked records (`check_record`)."""
    if isinstance(records, MemoryRecord):
        raise InvalidInput("records", "a sequence of MemoryRecord is required")
    batch = list(records)
    for r in batch:
        check_record(r, "records", space)
    return batch


def check_no_duplicates(
    batch: Sequence[MemoryRecord], keys: Sequence[str], stored: set[str]
) -> None:
    """For stores that check a batch's ids against what they hold (Qdrant,
    Milvus): `keys` are the records' storage keys in batch order, `stored` those
    already stored. Raise `DuplicateRecord` for the first owner with ids repeated
    in the batch or already stored (repeats first, then stored ones, each in
    batch order)."""
    seen: set[str] = set()
    dupes: dict[str, list[str]] = {}
    for r, key in zip(batch, keys, strict=True):
        if key in seen:
            dupes.setdefault(r.owner, []).append(r.id)
        seen.add(key)
    for r, key in zip(batch, keys, strict=True):
        if key in stored and r.id not in dupes.get(r.owner, ()):
            dupes.setdefault(r.owner, []).append(r.id)
    if dupes:
        owner, dupe_ids = next(iter(dupes.items()))
        raise DuplicateRecord(owner, tuple(dupe_ids))


def check_filters(namespace: str | None, kinds: Sequence[str] | None) -> list[str] | None:
    """Check the optional namespace and kinds filters; the distinct kinds, sorted
    (an empty list matches nothing), or None for any kind."""
    if namespace is not None:
        require_scope(namespace, "namespace")
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise InvalidInput("kinds", "a sequence of kinds is required, not a single string")
    return sorted({require_id(k, "kinds") for k in kinds})


def check_min_score(min_score: object) -> None:
    """`min_score` is None or a finite number (not a bool): NaN or infinity would
    compare differently in each engine."""
    if min_score is not None and (
        isinstance(min_score, bool)
        or not isinstance(min_score, int | float)
        or not math.isfinite(min_score)
    ):
        raise InvalidInput("min_score", f"a finite number is required, got {min_score!r}")


V = TypeVar("V")


_FLOAT32 = np.dtype(np.float32)


def check_query_vector(space: EmbeddingSpace, vector: object) -> npt.NDArray[np.float32]:
    """A search's query vector: finite float32 (`as_vector`, field "query vector")
    of the space's dimension."""
    # The usual query, a native float32 vector of the right dimension, is copied
    # and its finiteness checked without `as_vector`'s conversion (and the
    # `np.errstate` that guards it): about a third of its cost on every search.
    # Anything else, or a vector that is not finite, takes `as_vector`, which
    # builds the same read-only copy or raises the error naming what is wrong.
    if (
        type(vector) is np.ndarray
        and vector.dtype is _FLOAT32
        and vector.ndim == 1
        and vector.shape[0] == space.dimension
    ):
        query: npt.NDArray[np.float32] = vector.copy()
        if np.count_nonzero(np.isfinite(query)) == query.shape[0]:
            require_vector_norm(query, "query vector")
            query.flags.writeable = False
            return query
    query = as_vector(vector, "query vector")
    require_dimension(space, query)
    require_vector_norm(query, "query vector")
    return query


@overload
def check_search_args(
    owner: str,
    vector: object,
    limit: int,
    namespace: str | None,
    kinds: Sequence[str] | None,
    min_score: object,
    space: EmbeddingSpace,
) -> tuple[npt.NDArray[np.float32], list[str] | None]: ...


@overload
def check_search_args(
    owner: str,
    vector: object,
    limit: int,
    namespace: str | None,
    kinds: Sequence[str] | None,
    min_score: object,
    space: Callable[[object], V],
) -> tuple[V, list[str] | None]: ...


def check_search_args(
    owner: str,
    vector: object,
    limit: int,
    namespace: str | None,
    kinds: Sequence[str] | None,
    min_score: object,
    space: EmbeddingSpace | Callable[[object], object],
) -> tuple[object, list[str] | None]:
    """The arguments of `search`, checked in this order: owner, limit, the query
    vector (`check_query_vector` in `space`, or `space` itself when it is a
    check of the store's own, returning what it returns), then the namespace/kinds
    filters and `min_score` — the same order on every backend, so two bad
    arguments name the same one everywhere.
    Returns the checked vector and the kinds wanted (`check_filters`)."""
    require_scope(owner, "owner")
    require_limit(limit)
    if isinstance(space, EmbeddingSpace):
        query: object = check_query_vector(space, vector)
    else:
        query = space(vector)
    wanted = check_filters(namespace, kinds)
    check_min_score(min_score)
    return query, wanted


def check_search_text_args(
    owner: str, query: object, limit: int, namespace: str | None, kinds: Sequence[str] | None
) -> tuple[str, list[str] | None]:
    """The arguments of `search_text`, checked in this order: owner, limit, query
    (`check_query`), filters. Returns the query to search and the kinds wanted."""
    require_scope(owner, "owner")
    require_limit(limit)
    text = check_query(query)
    return text, check_filters(namespace, kinds)


def check_list_args(
    owner: str,
    limit: int,
    namespace: str | None,
    kinds: Sequence[str] | None,
    cursor: object,
) -> tuple[list[str] | None, tuple[datetime, str] | None]:
    """The arguments of `list`, checked in this order: owner, limit, filters,
    cursor. Returns the kinds wanted and the decoded cursor (None for the first
    page)."""
    require_scope(owner, "owner")
    require_limit(limit)
    wanted = check_filters(namespace, kinds)
    after = decode_cursor(cursor) if cursor is not None else None
    return wanted, after


def check_cache_value(value: object) -> bytes:
    """A cache value: bytes-like, returned as `bytes`."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInput("value", f"bytes are required, got {type(value).__name__}")
    if memoryview(value).nbytes > MAX_VALUE_BYTES:
        raise InvalidInput("value", f"at most {MAX_VALUE_BYTES} bytes (MAX_VALUE_BYTES)")
    return bytes(value)


def check_cache_ttl(ttl: object) -> None:
    """A cache entry's ttl: a timedelta in (0, MAX_TTL], or None for no expiry."""
    if ttl is not None:
        require_ttl(ttl, "ttl")


def check_lease_args(scope: str, key: str, owner: str, ttl: object) -> None:
    """The arguments of `acquire` and `renew`: scope, key, owner and a ttl in
    (0, MAX_TTL]."""
    require_scope(scope, "scope")
    require_id(key, "key")
    require_id(owner, "owner")
    require_ttl(ttl, "ttl")


def check_prefix(prefix: object) -> str:
    """A key prefix (`scan`, `delete_prefix`): a string without NUL, possibly empty."""
    return require_no_nul(require_text(prefix, "prefix"), "prefix")


# A word as every backend's tokenizer sees at least: a run of letters and digits.
_WORD = re.compile(r"[^\W_]+")


def _keep_word(match: re.Match[str]) -> str:
    word = match.group()
    return word if len(word.encode("utf-8")) <= MAX_QUERY_WORD_BYTES else " "


def check_query(query: object) -> str:
    """A keyword query: a string without NUL of at most MAX_QUERY_BYTES of UTF-8.
    Returns the query every backend searches: words longer than
    MAX_QUERY_WORD_BYTES replaced by a space (no engine indexes them alike)."""
    text = require_no_nul(require_text(query, "query"), "query")
    size = len(text.encode("utf-8"))
    if size > MAX_QUERY_BYTES:
        raise InvalidInput(
            "query", f"at most {MAX_QUERY_BYTES} bytes of UTF-8 are allowed, got {size}"
        )
    return _WORD.sub(_keep_word, text)


def check_lease_payload(payload: object) -> bytes:
    """A lease payload: bytes-like, returned as `bytes` (field `lease.payload`, as
    the `Lease` record names it)."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise InvalidInput("lease.payload", f"bytes are required, got {type(payload).__name__}")
    if memoryview(payload).nbytes > MAX_VALUE_BYTES:
        raise InvalidInput("lease.payload", f"at most {MAX_VALUE_BYTES} bytes (MAX_VALUE_BYTES)")
    return bytes(payload)


def check_retention(retention: object) -> timedelta:
    """An event log's retention: a positive timedelta."""
    if not isinstance(retention, timedelta) or retention <= timedelta(0):
        raise InvalidInput("retention", f"must be a positive timedelta, got {retention!r}")
    return retention


def check_events(events: Sequence[Event]) -> list[Event]:
    """The batch given to `append`, as a list of `Event`s whose ids are valid
    (`require_id`/`require_scope`: at most MAX_ID_BYTES) and whose text holds no NUL."""
    if isinstance(events, Event):
        raise InvalidInput("events", "a sequence of Event is required")
    batch = list(events)
    for e in batch:
        if not isinstance(e, Event):
            raise InvalidInput("events", f"Event required, got {type(e).__name__}")
        # Ids again (an Event built with validators disabled skips them): every
        # backend refuses an id over MAX_ID_BYTES alike, before any I/O.
        require_id(e.id, "event.id")
        require_scope(e.domain, "event.domain")
        require_id(e.agent, "event.agent")
        for name in ("origin_request_id", "user_id"):
            if getattr(e, name) is not None:
                require_id(getattr(e, name), f"event.{name}")
        for entity in e.entities:
            if isinstance(entity, Entity):
                require_id(entity.type, "entity.type")
                require_id(entity.id, "entity.id")
        for name in ("action", "outcome", "summary"):
            require_no_nul(getattr(e, name), f"event.{name}")
        if e.fallback_reason is not None:
            require_no_nul(require_text(e.fallback_reason, "event.fallback_reason"),
                           "event.fallback_reason")  # fmt: skip
        require_storable(e.metadata, "event.metadata")
    return batch


def check_window_args(domain: str, since: datetime, limit: int, entity: Entity | None) -> datetime:
    """The arguments of `window`; returns `since` in UTC."""
    require_scope(domain, "domain")
    since = require_utc(since, "since")
    require_limit(limit, "limit")
    if entity is not None and not isinstance(entity, Entity):
        raise InvalidInput("entity", f"Entity required, got {type(entity).__name__}")
    return since

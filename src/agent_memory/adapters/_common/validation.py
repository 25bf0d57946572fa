"""Argument checks every storage adapter makes the same way, in one place.

Records and leases are validated when built, but a store must not rely on
that: a record built with validators disabled could otherwise reach storage
with a blank owner or a vector of another dimension. The checks raise the
domain's typed errors (`InvalidInput`, `ScopeRequired`, `DimensionMismatch`)
naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import (
    EmbeddingSpace,
    Entity,
    Event,
    MemoryRecord,
    require_dimension,
)
from agent_memory.domain.validation import require_id, require_positive, require_scope, require_utc

__all__ = [
    "check_cache_ttl",
    "check_cache_value",
    "check_events",
    "check_filters",
    "check_lease_args",
    "check_lease_payload",
    "check_min_score",
    "check_record",
    "check_records",
    "check_retention",
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
        if not isinstance(getattr(record, name), str):
            raise InvalidInput(f"record.{name}", "a string is required")
    if not isinstance(record.vector, np.ndarray):
        raise InvalidInput("record.vector", "a numpy vector is required (build records normally)")
    require_dimension(space, record.vector)
    return record


def check_records(records: Sequence[MemoryRecord], space: EmbeddingSpace) -> list[MemoryRecord]:
    """The batch given to `add`, as a list of checked records (`check_record`)."""
    if isinstance(records, MemoryRecord):
        raise InvalidInput("records", "a sequence of MemoryRecord is required")
    batch = list(records)
    for r in batch:
        check_record(r, "records", space)
    return batch


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
    """`min_score` is None or a number (not a bool)."""
    if min_score is not None and (
        isinstance(min_score, bool) or not isinstance(min_score, int | float)
    ):
        raise InvalidInput("min_score", f"a number is required, got {min_score!r}")


def check_cache_value(value: object) -> bytes:
    """A cache value: bytes-like, returned as `bytes`."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInput("value", f"bytes are required, got {type(value).__name__}")
    return bytes(value)


def check_cache_ttl(ttl: object) -> None:
    """A cache entry's ttl: a positive timedelta, or None for no expiry."""
    if ttl is not None and (not isinstance(ttl, timedelta) or ttl <= timedelta(0)):
        raise InvalidInput("ttl", f"a positive timedelta or None is required, got {ttl!r}")


def check_lease_args(scope: str, key: str, owner: str, ttl: timedelta) -> None:
    """The arguments of `acquire` and `renew`: scope, key, owner and a positive ttl."""
    require_scope(scope, "scope")
    require_id(key, "key")
    require_id(owner, "owner")
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise InvalidInput("ttl", f"a positive timedelta is required, got {ttl!r}")


def check_lease_payload(payload: object) -> bytes:
    """A lease payload: bytes-like, returned as `bytes` (field `lease.payload`, as
    the `Lease` record names it)."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise InvalidInput("lease.payload", f"bytes are required, got {type(payload).__name__}")
    return bytes(payload)


def check_retention(retention: object) -> timedelta:
    """An event log's retention: a positive timedelta."""
    if not isinstance(retention, timedelta) or retention <= timedelta(0):
        raise InvalidInput("retention", f"must be a positive timedelta, got {retention!r}")
    return retention


def check_events(events: Sequence[Event]) -> list[Event]:
    """The batch given to `append`, as a list of `Event`s."""
    if isinstance(events, Event):
        raise InvalidInput("events", "a sequence of Event is required")
    batch = list(events)
    for e in batch:
        if not isinstance(e, Event):
            raise InvalidInput("events", f"Event required, got {type(e).__name__}")
    return batch


def check_window_args(domain: str, since: datetime, limit: int, entity: Entity | None) -> datetime:
    """The arguments of `window`; returns `since` in UTC."""
    require_scope(domain, "domain")
    since = require_utc(since, "since")
    require_positive(limit, "limit")
    if entity is not None and not isinstance(entity, Entity):
        raise InvalidInput("entity", f"Entity required, got {type(entity).__name__}")
    return since

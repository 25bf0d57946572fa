"""Domain records: frozen attrs values, validated when built.

Timestamps are timezone-aware UTC, vectors finite float32, scopes and ids
non-blank strings. Nothing here does I/O or reads the clock.
"""

from __future__ import annotations

import enum
import hashlib
import re
from datetime import datetime
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
from attrs import field, frozen

from agent_memory.domain.errors import DimensionMismatch, InvalidInput
from agent_memory.domain.validation import (
    as_vector,
    require_id,
    require_json_mapping,
    require_positive,
    require_scope,
    require_text,
    require_unit_interval,
    require_utc,
)

__all__ = [
    "MAX_DIMENSION",
    "EmbeddingSpace",
    "Entity",
    "EntitySource",
    "Event",
    "EventWindow",
    "Lease",
    "MemoryRecord",
    "Page",
    "ScoredRecord",
    "SummarySource",
    "TimeBasis",
    "require_dimension",
]


def _scope(field_name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        require_scope(value, field_name)

    return check


def _id(field_name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        require_id(value, field_name)

    return check


def _opt_id(field_name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        if value is not None:
            require_id(value, field_name)

    return check


def _text(field_name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        require_text(value, field_name)

    return check


def _utc(value: object) -> datetime:
    return require_utc(value)


def _metadata(value: object) -> dict[str, Any]:
    return require_json_mapping(value, "event.metadata")


def _attributes(value: object) -> dict[str, Any]:
    return require_json_mapping(value, "record.attributes")


def _importance(value: object) -> float:
    return require_unit_interval(value, "importance")


@frozen
class Entity:
    """Something events are about: `(type, id)`, e.g. `("pod", "web-1")`."""

    type: str = field(validator=_id("entity.type"))
    id: str = field(validator=_id("entity.id"))


class SummarySource(enum.StrEnum):
    MODEL = "model"
    HEURISTIC = "heuristic"
    CUSTOM = "custom"
    UNKNOWN = "unknown"


class TimeBasis(enum.StrEnum):
    STEP_END = "step_end"
    STEP_START = "step_start"
    RECORDED = "recorded"


class EntitySource(enum.StrEnum):
    """Where an event's entities came from (the agent memory guide's names are
    accepted as input: see docs/seed-mapping.md)."""

    MODEL = "model"
    METADATA = "metadata"
    REQUEST = "request"
    MIXED = "mixed"
    NONE = "none"

    @classmethod
    def _missing_(cls, value: object) -> EntitySource | None:
        return _GUIDE_ENTITY_SOURCES.get(value) if isinstance(value, str) else None


_GUIDE_ENTITY_SOURCES = {
    "llm_entities": EntitySource.MODEL,
    "explicit_metadata": EntitySource.METADATA,
    "request_metadata": EntitySource.REQUEST,
    "request_and_step": EntitySource.MIXED,
}


def _entities(value: object) -> tuple[Entity, ...]:
    if isinstance(value, Entity) or not isinstance(value, list | tuple):
        raise InvalidInput("entities", "a sequence of Entity is required")
    out = tuple(value)
    for item in out:
        if not isinstance(item, Entity):
            raise InvalidInput("entities", f"an Entity is required, got {item!r}")
    return out


@frozen(weakref_slot=False)  # adapters/postgres/_codec.py: fast decoding
class Event:
    """One episodic event: what an agent did in a domain, and when it happened.

    `is_global` events show up in every domain's window, ordered with the rest.
    Idempotency is by `(domain, id)`.
    """

    id: str = field(validator=_id("event.id"))
    domain: str = field(validator=_scope("event.domain"))
    agent: str = field(validator=_id("event.agent"))
    action: str = field(validator=_text("event.action"))
    outcome: str = field(validator=_text("event.outcome"))
    summary: str = field(validator=_text("event.summary"))
    occurred_at: datetime = field(converter=_utc)
    recorded_at: datetime = field(converter=_utc)
    origin_request_id: str | None = field(default=None, validator=_opt_id("origin_request_id"))
    summary_source: SummarySource = field(default=SummarySource.UNKNOWN, converter=SummarySource)
    fallback_reason: str | None = None
    time_basis: TimeBasis = field(default=TimeBasis.RECORDED, converter=TimeBasis)
    entities: tuple[Entity, ...] = field(default=(), converter=_entities)
    entity_source: EntitySource = field(default=EntitySource.NONE, converter=EntitySource)
    user_id: str | None = field(default=None, validator=_opt_id("event.user_id"))
    importance: float = field(default=0.5, converter=_importance)
    metadata: dict[str, Any] = field(factory=dict, converter=_metadata)
    is_global: bool = False


def _vector(value: object) -> npt.NDArray[np.float32]:
    return as_vector(value, "record.vector")


def _vectors_equal(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    return bool(a.shape == b.shape and np.array_equal(a, b))


@frozen(weakref_slot=False)  # adapters/postgres/_codec.py: fast decoding
class MemoryRecord:
    """A record with an embedding: a user fact, knowledge fragment, summary...

    Records are addressed by `(owner, id)`. `context` is indexing context (for a
    conversation turn: its neighbouring turns) that lexical search may match but
    that is never part of `content`.
    """

    id: str = field(validator=_id("record.id"))
    owner: str = field(validator=_scope("record.owner"))
    namespace: str = field(validator=_scope("record.namespace"))
    kind: str = field(validator=_id("record.kind"))
    content: str = field(validator=_text("record.content"))
    vector: npt.NDArray[np.float32] = field(
        converter=_vector, eq=attrs.cmp_using(eq=_vectors_equal), repr=False
    )
    created_at: datetime = field(converter=_utc)
    updated_at: datetime = field(converter=_utc)
    importance: float = field(default=0.5, converter=_importance)
    attributes: dict[str, Any] = field(factory=dict, converter=_attributes)
    context: str = field(default="", validator=_text("record.context"))


@frozen(weakref_slot=False)  # adapters/postgres/_codec.py: fast decoding
class ScoredRecord:
    """A search hit: the record and its score (cosine similarity for vector search)."""

    record: MemoryRecord
    score: float


@frozen
class Page:
    """One page of `MemoryStore.list`; `next_cursor` is None on the last page."""

    records: tuple[MemoryRecord, ...]
    next_cursor: str | None


@frozen
class EventWindow:
    """Events newest first; `limited` is True when the limit cut the window."""

    events: tuple[Event, ...]
    limited: bool


def _payload(value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInput("lease.payload", f"bytes are required, got {type(value).__name__}")
    return bytes(value)


@frozen
class Lease:
    """A held lease. `token` is the fencing token: it only grows per (scope, key)."""

    scope: str = field(validator=_scope("lease.scope"))
    key: str = field(validator=_id("lease.key"))
    owner: str = field(validator=_id("lease.owner"))
    token: int = field(validator=lambda _i, _a, v: require_positive(v, "lease.token"))
    expires_at: datetime = field(converter=_utc)
    payload: bytes = field(default=b"", converter=_payload)


_SLUG = re.compile(r"[^a-z0-9]+")


MAX_DIMENSION = 65_536
"""The largest embedding dimension a space may have: above every real model's,
and no lower than any backend's own limit (pgvector 16,000, Redis and Milvus
32,768, Qdrant 65,536); a larger one would only make each vector an allocation
that fails."""


def _require_dimension(value: object) -> int:
    dimension = require_positive(value, "space.dimension")
    if dimension > MAX_DIMENSION:
        raise InvalidInput("space.dimension", f"at most {MAX_DIMENSION}, got {dimension}")
    return dimension


@frozen
class EmbeddingSpace:
    """Which vectors can be compared: a model identity and a dimension.

    `provable` is False when the endpoint cannot prove which model answers (a
    generic OpenAI-compatible URL, say): the configured name is then trusted.
    """

    model: str = field(validator=_id("space.model"))
    dimension: int = field(validator=lambda _i, _a, v: _require_dimension(v))
    revision: str = field(default="", validator=_text("space.revision"))
    provable: bool = True

    @property
    def identity(self) -> str:
        """A short, storage-safe name: readable slug plus a hash of the full identity."""
        full = f"{self.model}\x00{self.dimension}\x00{self.revision}"
        digest = hashlib.sha256(full.encode()).hexdigest()[:12]
        slug = _SLUG.sub("_", self.model.lower()).strip("_")[:24] or "model"
        return f"{slug}_{self.dimension}_{digest}"


def require_dimension(space: EmbeddingSpace, vector: npt.NDArray[np.float32]) -> None:
    """Raise `DimensionMismatch` when `vector` does not belong to `space`."""
    if vector.shape[0] != space.dimension:
        raise DimensionMismatch(space.dimension, int(vector.shape[0]))

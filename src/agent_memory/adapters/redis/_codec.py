"""Record and event codecs for the redis adapter (hash fields / JSON payloads).

Decoding builds the frozen domain values without re-running their validators
and converters: every value was validated when it was written, and re-checking
on each read cost more than the network round trip (see the overhead benchmark).
When the domain class gains a field this codec does not know, decoding falls
back to the validating constructor (new fields have defaults).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import attrs
import numpy as np

from agent_memory.domain.lexical import tokenize
from agent_memory.domain.records import (
    Entity,
    EntitySource,
    Event,
    MemoryRecord,
    SummarySource,
    TimeBasis,
)

__all__ = [
    "decode_event",
    "decode_record",
    "encode_event",
    "encode_record",
    "from_micros",
    "sort_key",
    "to_micros",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# Offset so that sort keys of any datetime (year 1 onwards) are non-negative.
_SK_OFFSET = (_EPOCH - datetime(1, 1, 1, tzinfo=UTC)) // _US


_T = TypeVar("_T")
_FIELDS: dict[type[Any], frozenset[str]] = {}


def _trusted(cls: type[_T], values: dict[str, Any]) -> _T:
    """Build a frozen attrs value from already validated data."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in attrs.fields(cast(Any, cls)))
    if names != values.keys():
        return cls(**values)
    obj = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


def to_micros(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def sort_key(created_at: datetime, record_id: str) -> str:
    """A string whose byte order is list order: fixed-width time, then hex of the id
    (hex of UTF-8 preserves code point order and needs no case folding)."""
    micros = to_micros(created_at) + _SK_OFFSET
    return f"{micros:020d}" + record_id.encode("utf-8", "surrogatepass").hex()


def encode_record(r: MemoryRecord, tags: dict[str, str]) -> dict[str, bytes | str | int]:
    vec = np.ascontiguousarray(r.vector, dtype=np.float32)
    zero = not bool(np.any(vec))
    return {
        "id": r.id,
        "owner": r.owner,
        "namespace": r.namespace,
        "kind": r.kind,
        "content": r.content,
        "context": r.context,
        # The lexical index sees the domain's tokens (stopwords dropped, stemmed), so
        # BM25 here ranks like every other backend.
        "terms": " ".join(tokenize(f"{r.content}\n{r.context}")),
        "ca": to_micros(r.created_at),
        "ua": to_micros(r.updated_at),
        "imp": repr(r.importance),
        "attrs": json.dumps(r.attributes, ensure_ascii=False, allow_nan=False),
        "vec": vec.tobytes(),
        "z": "1" if zero else "0",
        "sk": sort_key(r.created_at, r.id),
        **tags,
    }


def _s(fields: dict[bytes, bytes], name: bytes) -> str:
    return fields[name].decode("utf-8", "surrogatepass")


def decode_record(fields: dict[bytes, bytes]) -> MemoryRecord:
    return _trusted(
        MemoryRecord,
        {
            "id": _s(fields, b"id"),
            "owner": _s(fields, b"owner"),
            "namespace": _s(fields, b"namespace"),
            "kind": _s(fields, b"kind"),
            "content": _s(fields, b"content"),
            "context": _s(fields, b"context"),
            "vector": np.frombuffer(fields[b"vec"], dtype=np.float32),  # read-only
            "created_at": from_micros(int(fields[b"ca"])),
            "updated_at": from_micros(int(fields[b"ua"])),
            "importance": float(fields[b"imp"]),
            "attributes": json.loads(fields[b"attrs"]),
        },
    )


def _dt(value: datetime | None) -> int | None:
    return None if value is None else to_micros(value)


def encode_event(e: Event) -> bytes:
    doc: dict[str, Any] = {
        "id": e.id,
        "domain": e.domain,
        "agent": e.agent,
        "action": e.action,
        "outcome": e.outcome,
        "summary": e.summary,
        "occurred_at": to_micros(e.occurred_at),
        "recorded_at": to_micros(e.recorded_at),
        "origin_request_id": e.origin_request_id,
        "summary_source": e.summary_source.value,
        "fallback_reason": e.fallback_reason,
        "time_basis": e.time_basis.value,
        "entities": [[x.type, x.id] for x in e.entities],
        "entity_source": e.entity_source.value,
        "user_id": e.user_id,
        "importance": e.importance,
        "metadata": e.metadata,
        "is_global": e.is_global,
    }
    return json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")


def decode_event(raw: bytes) -> Event:
    doc = json.loads(raw.decode("utf-8", "surrogatepass"))
    return _trusted(
        Event,
        {
            "id": doc["id"],
            "domain": doc["domain"],
            "agent": doc["agent"],
            "action": doc["action"],
            "outcome": doc["outcome"],
            "summary": doc["summary"],
            "occurred_at": from_micros(doc["occurred_at"]),
            "recorded_at": from_micros(doc["recorded_at"]),
            "origin_request_id": doc["origin_request_id"],
            "summary_source": SummarySource(doc["summary_source"]),
            "fallback_reason": doc["fallback_reason"],
            "time_basis": TimeBasis(doc["time_basis"]),
            "entities": tuple(_trusted(Entity, {"type": t, "id": i}) for t, i in doc["entities"]),
            "entity_source": EntitySource(doc["entity_source"]),
            "user_id": doc["user_id"],
            "importance": float(doc["importance"]),
            "metadata": doc["metadata"],
            "is_global": bool(doc["is_global"]),
        },
    )

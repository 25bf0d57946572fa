"""Record <-> Qdrant point codec and the deterministic point-id mapping.

A collection holds every owner's records, so a point id must encode the pair
`(owner, id)`: uuid5 over a length-prefixed encoding (`"<len(owner)>:<owner><id>"`),
which is injective, so two different pairs never share a point id. The original
owner and id travel in the payload, and every read checks them.

Qdrant normalises vectors stored under cosine distance, so the exact vector is
kept in the payload (`v`, base64 float32 little-endian): `get` returns the
vector that was added, and scores are recomputed from it exactly as the
in-process oracle computes them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.adapters.qdrant._lexical import count_tokens
from agent_memory.domain.records import MemoryRecord

__all__ = [
    "FIELD_CONTENT",
    "FIELD_CONTEXT",
    "FIELD_CREATED",
    "FIELD_ID",
    "FIELD_KIND",
    "FIELD_NAMESPACE",
    "FIELD_OWNER",
    "FIELD_TOKENS",
    "from_micros",
    "point_id",
    "record_from_payload",
    "record_to_payload",
    "to_micros",
    "vector_from_payload",
]

# A fixed namespace for uuid5 (itself uuid5(NAMESPACE_URL, "agent-memory/qdrant/record")).
_POINT_NAMESPACE = uuid.UUID("9a18ee79-a692-505f-92ea-9ff72812ec09")
_NAMESPACE_BYTES = _POINT_NAMESPACE.bytes
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)

FIELD_OWNER = "owner"
FIELD_ID = "id"
FIELD_NAMESPACE = "namespace"
FIELD_KIND = "kind"
FIELD_CONTENT = "content"
FIELD_CONTEXT = "context"
FIELD_CREATED = "created_us"
FIELD_UPDATED = "updated_us"
FIELD_IMPORTANCE = "importance"
FIELD_ATTRIBUTES = "attributes_json"
FIELD_VECTOR = "v"
FIELD_TOKENS = "token_count"


def point_id(owner: str, record_id: str) -> str:
    """The deterministic point id of `(owner, id)`; different pairs never collide.

    Equal to `str(uuid.uuid5(_POINT_NAMESPACE, f"{len(owner)}:{owner}{record_id}"))`,
    computed without building UUID objects (it runs once per record on every write).
    """
    name = f"{len(owner)}:{owner}{record_id}".encode()
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def to_micros(moment: datetime) -> int:
    """Microseconds since the epoch: exact for every aware datetime (an i64 in Qdrant)."""
    return (moment - _EPOCH) // _MICRO


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _encode_vector(vector: npt.NDArray[np.float32]) -> str:
    return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode("ascii")


def vector_from_payload(payload: dict[str, Any]) -> npt.NDArray[np.float32]:
    raw = base64.b64decode(payload[FIELD_VECTOR])
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def record_to_payload(record: MemoryRecord) -> dict[str, Any]:
    """The payload of one point: filter fields, exact values, and the token count."""
    return {
        FIELD_OWNER: record.owner,
        FIELD_ID: record.id,
        FIELD_NAMESPACE: record.namespace,
        FIELD_KIND: record.kind,
        FIELD_CONTENT: record.content,
        FIELD_CONTEXT: record.context,
        FIELD_CREATED: to_micros(record.created_at),
        FIELD_UPDATED: to_micros(record.updated_at),
        FIELD_IMPORTANCE: record.importance,
        # A JSON string, so that attributes round-trip exactly (1 vs 1.0, key order)
        # and can never collide with the indexed fields. The record validated them
        # as finite JSON, so the default (cached, fast) encoder is enough.
        FIELD_ATTRIBUTES: json.dumps(record.attributes) if record.attributes else "{}",
        FIELD_VECTOR: _encode_vector(record.vector),
        FIELD_TOKENS: count_tokens(record.content) + count_tokens(record.context),
    }


def record_from_payload(payload: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=payload[FIELD_ID],
        owner=payload[FIELD_OWNER],
        namespace=payload[FIELD_NAMESPACE],
        kind=payload[FIELD_KIND],
        content=payload[FIELD_CONTENT],
        vector=vector_from_payload(payload),
        created_at=from_micros(int(payload[FIELD_CREATED])),
        updated_at=from_micros(int(payload[FIELD_UPDATED])),
        importance=float(payload[FIELD_IMPORTANCE]),
        attributes=json.loads(payload[FIELD_ATTRIBUTES]),
        context=payload[FIELD_CONTEXT],
    )

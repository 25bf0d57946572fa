"""Record <-> Qdrant point codec and the deterministic point-id mapping.

A collection holds every owner's records, so a point id must encode the pair
`(owner, id)`: uuid5 over a length-prefixed encoding (`"<len(owner)>:<owner><id>"`),
which is injective, so two different pairs never share a point id. The original
owner and id travel in the payload, and every read checks them.

Qdrant normalises vectors stored under cosine distance, so the exact vector is
kept in the payload (`v`, base64 float32 little-endian): `get` returns the
vector that was added, and scores are recomputed from it exactly as the
in-process oracle computes them.

`add` converts whole batches (`point_ids`, `batch_payloads`): the vectors from
one stacked matrix, one JSON encoder for the attributes, one hash prefix per
owner. The stored format is the same as one record at a time
(`point_id`, `record_to_payload`), which tests check.

Keyword fields (see `_lexical`): `terms` (distinct `domain.lexical` terms of
content + context), `term_counts` (their counts, same order), `token_count`
(the length in terms) and `lexical` (the `LEXICAL_VERSION` they follow). A
point without the current `lexical` value is re-derived when a store opens the
collection (`store._migrate_terms`) and before a keyword search that would see
it (`store._fill_terms`); `lexical_fields` computes those fields. A store opened
with `keyword=False` writes points without them (`batch_payloads(...,
keyword=False)`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from binascii import b2a_base64
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from qdrant_client import models as qm

from agent_memory.adapters.qdrant._lexical import current_version, record_terms
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.time import from_micros, to_micros

__all__ = [
    "FIELD_CONTENT",
    "FIELD_CONTEXT",
    "FIELD_CREATED",
    "FIELD_ID",
    "FIELD_KIND",
    "FIELD_LEXICAL",
    "FIELD_NAMESPACE",
    "FIELD_OWNER",
    "FIELD_TERMS",
    "FIELD_TERM_COUNTS",
    "FIELD_TOKENS",
    "batch_payloads",
    "from_micros",
    "lexical_fields",
    "make_point",
    "point_id",
    "point_ids",
    "record_from_payload",
    "record_to_payload",
    "to_micros",
    "vector_from_payload",
]

# A fixed namespace for uuid5 (itself uuid5(NAMESPACE_URL, "agent-memory/qdrant/record")).
_POINT_NAMESPACE = uuid.UUID("9a18ee79-a692-505f-92ea-9ff72812ec09")
_NAMESPACE_BYTES = _POINT_NAMESPACE.bytes

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
FIELD_TERMS = "terms"
FIELD_TERM_COUNTS = "term_counts"
FIELD_LEXICAL = "lexical"


# The hex digit holding the RFC 4122 variant bits (10xx), from the digest's digit.
_VARIANT = {f"{n:x}": f"{(n & 0x3) | 0x8:x}" for n in range(16)}


def point_id(owner: str, record_id: str) -> str:
    """The deterministic point id of `(owner, id)`; different pairs never collide.

    Equal to `str(uuid.uuid5(_POINT_NAMESPACE, f"{len(owner)}:{owner}{record_id}"))`.
    """
    return point_ids([(owner, record_id)])[0]


def point_ids(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """`point_id` of each `(owner, id)` pair, computed without building UUID objects
    (it runs once per record on every write): the SHA-1 state after the
    namespace and the owner prefix is computed once per owner and copied."""
    heads: dict[str, Any] = {}
    out: list[str] = []
    append = out.append
    for owner, record_id in pairs:
        head = heads.get(owner)
        if head is None:
            prefix = _NAMESPACE_BYTES + f"{len(owner)}:{owner}".encode()
            head = heads[owner] = hashlib.sha1(prefix, usedforsecurity=False)
        h = head.copy()
        h.update(record_id.encode())
        x = h.hexdigest()
        # The first 16 bytes, version 5 (nibble 12) and the RFC 4122 variant
        # (the top two bits of nibble 16 set to 10).
        append(f"{x[:8]}-{x[8:12]}-5{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}")
    return out


def _encode_vectors(matrix: npt.NDArray[np.float32]) -> list[str]:
    """Base64 of each row of `matrix` as little-endian float32, from one buffer."""
    raw = memoryview(np.ascontiguousarray(matrix, dtype="<f4").tobytes())
    width = 4 * matrix.shape[1]
    return [
        b2a_base64(raw[i : i + width], newline=False).decode("ascii")
        for i in range(0, len(raw), width)
    ]


# Checks the fast encoder against `json.dumps` (escapes, big ints, floats, nesting).
_PROBE: dict[str, Any] = {"a\u00e9\n": [1, 2**70, 0.1, -1e16, None, True, {"k": "\u6240"}]}


def _attributes_encoder() -> Callable[[dict[str, Any]], str]:
    """`json.dumps` with its default arguments, for many calls in a row.

    `json.dumps` builds a new C encoder on every call, which costs more than
    encoding a small mapping; one encoder serves a whole batch (it is not
    shared across batches: its circular-reference markers live in it).
    Falls back to `json.dumps` where that C encoder is unavailable or does not
    give `json.dumps`'s output.
    """
    join = "".join
    try:
        from _json import make_encoder

        encode = make_encoder(
            {},
            json.JSONEncoder().default,
            json.encoder.encode_basestring_ascii,
            None,
            ": ",
            ", ",
            False,  # sort_keys
            False,  # skipkeys
            True,  # allow_nan
        )
        if join(encode(_PROBE, 0)) != json.dumps(_PROBE):
            return json.dumps
    except (ImportError, TypeError):  # pragma: no cover - another Python's internals
        return json.dumps
    return lambda value: join(encode(value, 0))


PointMaker = Callable[[str, list[float], dict[str, Any]], qm.PointStruct]


def _point_maker() -> PointMaker:
    """`PointStruct.model_construct(id=, vector=, payload=)` for values already
    checked (ids from `point_ids`, finite vectors as lists of floats, JSON
    payloads), without its per-field loop over aliases and defaults, which cost
    about as much as the rest of a point's conversion: the instance gets the
    same `__dict__`, fields-set, extra and private slots `model_construct`
    gives it. Falls back to `model_construct` when the model has other fields or
    hooks, or when a probe point differs from `model_construct`'s (another
    pydantic's internals)."""
    cls = qm.PointStruct

    def construct(pid: str, vector: list[float], payload: dict[str, Any]) -> qm.PointStruct:
        return cls.model_construct(id=pid, vector=vector, payload=payload)

    new = object.__new__
    put = object.__setattr__
    names = ("id", "vector", "payload")

    def make(pid: str, vector: list[float], payload: dict[str, Any]) -> qm.PointStruct:
        point = new(cls)
        put(point, "__dict__", {"id": pid, "vector": vector, "payload": payload})
        put(point, "__pydantic_fields_set__", {"id", "vector", "payload"})
        put(point, "__pydantic_extra__", None)
        put(point, "__pydantic_private__", None)
        return point

    try:
        if (
            tuple(cls.model_fields) != names
            or cls.__pydantic_post_init__
            or cls.__pydantic_root_model__
            or cls.model_config.get("extra") == "allow"
            or any(f.alias or f.validation_alias for f in cls.model_fields.values())
        ):
            return construct
        args = ("9a18ee79-a692-505f-92ea-9ff72812ec09", [0.5, -1.0], {"k": [1, "v"]})
        got, want = make(*args), construct(*args)
        same = (
            got == want
            and got.__dict__ == want.__dict__
            and got.model_fields_set == want.model_fields_set
            and got.__pydantic_extra__ == want.__pydantic_extra__
            and got.__pydantic_private__ == want.__pydantic_private__
        )
    except Exception:  # pragma: no cover - another pydantic's internals
        return construct
    return make if same else construct


make_point: PointMaker = _point_maker()


def vector_from_payload(payload: dict[str, Any]) -> npt.NDArray[np.float32]:
    raw = base64.b64decode(payload[FIELD_VECTOR])
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def lexical_fields(content: str, context: str, version: str) -> dict[str, Any]:
    """The keyword fields of a point (terms, counts, length, version marker)."""
    terms, counts, length = record_terms(content, context)
    return {
        FIELD_TERMS: terms,
        FIELD_TERM_COUNTS: counts,
        FIELD_TOKENS: length,
        FIELD_LEXICAL: version,
    }


def record_to_payload(record: MemoryRecord, *, keyword: bool = True) -> dict[str, Any]:
    """The payload of one point: filter fields, exact values, and (unless not
    `keyword`) the keyword fields."""
    return batch_payloads([record], np.stack([record.vector]), keyword=keyword)[0]


def batch_payloads(
    records: Sequence[MemoryRecord], matrix: npt.NDArray[np.float32], *, keyword: bool = True
) -> list[dict[str, Any]]:
    """`record_to_payload` of each record; `matrix` stacks their vectors (the
    points' vectors too), so the exact vectors are encoded from one buffer.
    Without `keyword`, the payloads carry no keyword fields (no `lexical`
    marker either, so the next keyword search derives them)."""
    encoded = _encode_vectors(matrix)
    # A JSON string, so that attributes round-trip exactly (1 vs 1.0, key order)
    # and can never collide with the indexed fields. The records validated them
    # as finite JSON, so the default encoder is enough.
    dumps = _attributes_encoder()
    version = current_version()
    out: list[dict[str, Any]] = []
    append = out.append
    for record, vector in zip(records, encoded, strict=True):
        created = record.created_at
        updated = record.updated_at
        created_us = to_micros(created)
        attributes = record.attributes
        content = record.content
        context = record.context
        payload = {
            FIELD_OWNER: record.owner,
            FIELD_ID: record.id,
            FIELD_NAMESPACE: record.namespace,
            FIELD_KIND: record.kind,
            FIELD_CONTENT: content,
            FIELD_CONTEXT: context,
            FIELD_CREATED: created_us,
            FIELD_UPDATED: created_us if updated == created else to_micros(updated),
            FIELD_IMPORTANCE: record.importance,
            FIELD_ATTRIBUTES: dumps(attributes) if attributes else "{}",
            FIELD_VECTOR: vector,
        }
        if keyword:  # `lexical_fields`, without its intermediate dict
            terms, counts, length = record_terms(content, context)
            payload[FIELD_TERMS] = terms
            payload[FIELD_TERM_COUNTS] = counts
            payload[FIELD_TOKENS] = length
            payload[FIELD_LEXICAL] = version
        append(payload)
    return out


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

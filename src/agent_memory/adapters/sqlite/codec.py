"""How values are stored: timestamps as integer microseconds since the epoch (exact,
and ordered like the datetimes), vectors as little-endian float32 blobs, JSON for
attribute maps, and events as one JSON document (a cattrs converter) next to the
columns that queries filter and order on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from cattrs.preconf.json import make_converter

from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.records import Event, MemoryRecord
from agent_memory.domain.time import from_micros, to_micros
from agent_memory.domain.validation import require_text

__all__ = [
    "RECORD_COLUMNS",
    "blob_to_vector",
    "decode_event",
    "encode_event",
    "from_micros",
    "prefix_condition",
    "record_from_row",
    "record_params",
    "terms_json",
    "text_terms",
    "to_micros",
    "vector_to_blob",
]

_F32 = np.dtype("<f4")

_converter = make_converter()
# One encoder for every write: `json.dumps` with options builds a new encoder per call.
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def vector_to_blob(vector: npt.NDArray[np.float32]) -> bytes:
    return vector.astype(_F32, copy=False).tobytes()


def blob_to_vector(blob: bytes, dimension: int) -> npt.NDArray[np.float32]:
    if len(blob) != dimension * 4:
        raise BackendUnavailable(
            "sqlite", f"stored vector has {len(blob)} bytes, not {dimension * 4}"
        )
    out: npt.NDArray[np.float32] = np.frombuffer(blob, dtype=_F32).astype(np.float32)
    return out


RECORD_COLUMNS = (
    "owner, id, namespace, kind, content, context, vector, created_at, updated_at,"
    " importance, attributes"
)


def record_params(record: MemoryRecord) -> tuple[Any, ...]:
    """Values for `RECORD_COLUMNS`, in order."""
    return (
        record.owner,
        record.id,
        record.namespace,
        record.kind,
        record.content,
        record.context,
        vector_to_blob(record.vector),
        to_micros(record.created_at),
        to_micros(record.updated_at),
        record.importance,
        _encode(record.attributes) if record.attributes else "{}",
    )


def record_from_row(row: Sequence[Any], dimension: int) -> MemoryRecord:
    """Inverse of `record_params` (a row selected with `RECORD_COLUMNS`)."""
    return MemoryRecord(
        owner=row[0],
        id=row[1],
        namespace=row[2],
        kind=row[3],
        content=row[4],
        context=row[5],
        vector=blob_to_vector(row[6], dimension),
        created_at=from_micros(row[7]),
        updated_at=from_micros(row[8]),
        importance=row[9],
        attributes=json.loads(row[10]),
    )


def encode_event(event: Event) -> str:
    return _encode(_converter.unstructure(event))


def decode_event(body: str) -> Event:
    return _converter.structure(json.loads(body), Event)


def prefix_condition(column: str, prefix: str) -> tuple[str, tuple[Any, ...]]:
    """A literal (never wildcard) starts-with test on `column`, NUL-safe: a range
    bound the index can use plus an exact comparison of the UTF-8 bytes."""
    require_text(prefix, "prefix")
    if prefix == "":
        return "1", ()
    raw = prefix.encode("utf-8")
    sql = f"{column} >= ? AND substr(CAST({column} AS BLOB), 1, ?) = ?"
    return sql, (prefix, len(raw), raw)


def terms_json(text: str) -> tuple[str, int]:
    """The searchable terms of `text` (`domain.lexical` rules) as the JSON array the
    keyword-index triggers expand into postings, and how many there are (the BM25
    length)."""
    tokens = tokenize(text)
    # Terms are runs of Unicode letters and digits: never a quote, backslash or
    # control character, so joining them is already valid JSON.
    return ('["' + '","'.join(tokens) + '"]' if tokens else "[]"), len(tokens)


def text_terms(record: MemoryRecord) -> tuple[str, int]:
    """`terms_json` of the record's content and context."""
    return terms_json(f"{record.content}\n{record.context}")

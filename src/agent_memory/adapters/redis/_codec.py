"""Record and event codecs for the redis adapter (hash fields / JSON payloads).

Decoding builds the frozen domain values without re-running their validators
and converters: every value was validated when it was written, and re-checking
on each read cost more than the network round trip (see the overhead benchmark).
When the domain class gains a field this codec does not know, decoding falls
back to the validating constructor (new fields have defaults).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from json.scanner import make_scanner
from types import MemberDescriptorType
from typing import Any, Generic, TypeVar, cast

import attrs
import numpy as np

from agent_memory.adapters._common.slots import twin_class
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.records import (
    Entity,
    EntitySource,
    Event,
    MemoryRecord,
    ScoredRecord,
    SummarySource,
    TimeBasis,
)
from agent_memory.domain.time import from_micros, to_micros

__all__ = [
    "RECORD_FIELDS",
    "decode_event",
    "decode_record",
    "decode_record_values",
    "encode_event",
    "encode_record",
    "from_micros",
    "record_terms",
    "scored",
    "sort_key",
    "to_micros",
]

# Offset so that sort keys of any datetime (year 1 onwards) are non-negative.
_SK_OFFSET = -to_micros(datetime(1, 1, 1, tzinfo=UTC))


_T = TypeVar("_T")


class _Builder(Generic[_T]):
    """Builds a frozen attrs value from already validated data, positionally in
    `names` order, with a generated function (as attrs generates `__init__`).
    Slots are filled with plain stores on a twin class that then becomes `cls`
    (`adapters/_common/slots.py`), or, for a class that allows no twin, through
    their descriptors (what `object.__setattr__` ends up calling). Falls back to the validating
    constructor when the class's fields are not exactly `names` (a new field with
    a default, say)."""

    def __init__(self, cls: type[_T], names: tuple[str, ...]) -> None:
        self._cls = cls
        self._names = names
        self._build: Callable[..., _T] | None = None

    def _compile(self) -> Callable[..., _T]:
        fields = {f.name for f in attrs.fields(cast(Any, self._cls))}
        if fields != set(self._names):
            cls, names = self._cls, self._names
            return lambda *values: cls(**dict(zip(names, values, strict=True)))
        twin = twin_class(self._cls)
        scope: dict[str, Any] = {"_new": object.__new__, "cls": self._cls, "twin": twin}
        body = ""
        for i, name in enumerate(self._names):
            slot = self._cls.__dict__.get(name)
            if twin is not None:  # plain slot stores on the twin, then one class change
                body += f"    o.{name} = a{i}\n"
            elif isinstance(slot, MemberDescriptorType):
                scope[f"_s{i}"] = slot.__set__
                body += f"    _s{i}(o, a{i})\n"
            else:
                scope["_set"] = object.__setattr__
                body += f"    _set(o, {name!r}, a{i})\n"
        args = ", ".join(f"a{i}" for i in range(len(self._names)))
        if twin is not None:
            body += "    o.__class__ = cls\n"
        new = "_new(cls)" if twin is None else "_new(twin)"
        source = f"def build({args}):\n    o = {new}\n{body}    return o\n"
        exec(source, scope)  # names are our own literals, checked against attrs.fields
        build: Callable[..., _T] = scope["build"]
        return build

    def __call__(self, *values: Any) -> _T:
        if self._build is None:
            self._build = self._compile()
        return self._build(*values)


_record = _Builder(
    MemoryRecord,
    ("id", "owner", "namespace", "kind", "content", "context", "vector", "created_at",
     "updated_at", "importance", "attributes"),
)  # fmt: skip
_event = _Builder(
    Event,
    ("id", "domain", "agent", "action", "outcome", "summary", "occurred_at", "recorded_at",
     "origin_request_id", "summary_source", "fallback_reason", "time_basis", "entities",
     "entity_source", "user_id", "importance", "metadata", "is_global"),
)  # fmt: skip
_entity = _Builder(Entity, ("type", "id"))
_scored = _Builder(ScoredRecord, ("record", "score"))
_JSON = json.JSONDecoder()
# The C scanner `decode` runs, without the whitespace regexes around it.
_scan: Callable[[str, int], tuple[Any, int]] = cast(Any, make_scanner)(_JSON)


def _json(text: str) -> Any:
    """JSON as this module writes it (no surrounding whitespace): scanned directly;
    anything else (or an error) goes through the full decoder."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    return value if end == len(text) else _JSON.decode(text)


_SUMMARY_SOURCE = {m.value: m for m in SummarySource}
_TIME_BASIS = {m.value: m for m in TimeBasis}
_ENTITY_SOURCE = {m.value: m for m in EntitySource}


def sort_key(created_at: datetime, record_id: str) -> str:
    """A string whose byte order is list order: fixed-width time, then hex of the id
    (hex of UTF-8 preserves code point order and needs no case folding)."""
    micros = to_micros(created_at) + _SK_OFFSET
    return f"{micros:020d}" + record_id.encode("utf-8", "surrogatepass").hex()


def record_terms(content: str, context: str) -> str:
    """A record's `terms` field: the domain's tokens (stopwords dropped, stemmed) of
    its content and context, joined by single spaces (no token holds a space), so
    BM25 here ranks like every other backend."""
    return " ".join(tokenize(f"{content}\n{context}"))


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
        "terms": record_terms(r.content, r.context),
        "ca": to_micros(r.created_at),
        "ua": to_micros(r.updated_at),
        "imp": repr(r.importance),
        "attrs": json.dumps(r.attributes, ensure_ascii=False, allow_nan=False),
        "vec": vec.tobytes(),
        "z": "1" if zero else "0",
        "sk": sort_key(r.created_at, r.id),
        **tags,
    }


# The hash fields a record is rebuilt from, in the order `decode_record_values` takes.
RECORD_FIELDS: tuple[str, ...] = ("id", "owner", "namespace", "kind", "content", "context")
RECORD_FIELDS += ("ca", "ua", "imp", "attrs", "vec")
_RECORD_KEYS = tuple(name.encode() for name in RECORD_FIELDS)


def _attributes(raw: bytes) -> dict[str, Any]:
    if raw == b"{}":
        return {}
    value: dict[str, Any] = _json(raw.decode("utf-8", "surrogatepass"))
    return value


def decode_record_values(v: Sequence[bytes]) -> MemoryRecord:
    """A record from the raw values of `RECORD_FIELDS`, in that order."""
    return _record(
        v[0].decode("utf-8", "surrogatepass"),
        v[1].decode("utf-8", "surrogatepass"),
        v[2].decode("utf-8", "surrogatepass"),
        v[3].decode("utf-8", "surrogatepass"),
        v[4].decode("utf-8", "surrogatepass"),
        v[5].decode("utf-8", "surrogatepass"),
        np.frombuffer(v[10], dtype=np.float32),  # read-only, shares the reply's bytes
        from_micros(int(v[6])),
        from_micros(int(v[7])),
        float(v[8]),
        _attributes(v[9]),
    )


def decode_record(fields: dict[bytes, bytes]) -> MemoryRecord:
    return decode_record_values([fields[name] for name in _RECORD_KEYS])


def scored(record: MemoryRecord, score: float) -> ScoredRecord:
    """`ScoredRecord(record, score)` for a decoded record and a float score."""
    return _scored(record, score)


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
    d = _json(raw.decode("utf-8", "surrogatepass"))
    entities = d["entities"]
    return _event(
        d["id"],
        d["domain"],
        d["agent"],
        d["action"],
        d["outcome"],
        d["summary"],
        from_micros(d["occurred_at"]),
        from_micros(d["recorded_at"]),
        d["origin_request_id"],
        _SUMMARY_SOURCE[d["summary_source"]],
        d["fallback_reason"],
        _TIME_BASIS[d["time_basis"]],
        tuple([_entity(t, i) for t, i in entities]) if entities else (),
        _ENTITY_SOURCE[d["entity_source"]],
        d["user_id"],
        float(d["importance"]),
        d["metadata"],
        bool(d["is_global"]),
    )

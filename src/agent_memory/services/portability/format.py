"""The export format, version 2: JSON Lines (UTF-8, optionally gzip), one object a
line, each with a `type`. docs/portability.md is its specification.

- line 1 `header`: format name and version, source backend, embedding spaces;
- `record` (memory records: user facts, knowledge, summaries...; the vector as
  base64 of little-endian float32, exact), `event`, `triple`, `cache`, `lease`,
  `audit` (the audit trail's entries; version 2 added them, a version 1 file
  has none);
- last line `footer`: counts per type, the number of lines before it and the
  SHA-256 of their bytes (each line with its `\\n`), so truncation and edits show.

Readers accept any version up to `FORMAT_VERSION` and refuse newer ones.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import secrets
import stat
import zlib
from array import array
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import IO, Any

import attrs
import numpy as np
from attrs import field, frozen

from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.errors import AgentMemoryError
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, Lease, MemoryRecord
from agent_memory.domain.triples import Triple
from agent_memory.services.portability.errors import (
    ChecksumMismatch,
    ExportFormatError,
    TruncatedExport,
    UnknownRecordType,
    UnsupportedFormatVersion,
    WrongDimension,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "CacheItem",
    "ExportReader",
    "ExportWriter",
    "Footer",
    "Header",
    "Item",
    "RecordItem",
    "export_output",
    "open_export",
    "read_header",
    "replaced_atomically",
    "space_json",
]

FORMAT_NAME = "agent-memory-export"
FORMAT_VERSION = 2
TYPES = ("record", "event", "triple", "cache", "lease", "audit")
_F32 = np.dtype("<f4")


@frozen
class Header:
    """What the first line says."""

    version: int
    source: str
    """The source backend family (`sqlite`, `redis`, ...)."""
    spaces: tuple[EmbeddingSpace, ...]
    created_at: datetime
    user: str | None = None
    namespace: str | None = None
    includes: tuple[str, ...] = TYPES
    deployment: str | None = None
    """The source's deployment (tenant): Redis prefix, PostgreSQL schema. None in
    files written before it was recorded."""
    url: str | None = None
    """The source's storage URL, password redacted (None: unknown)."""
    skipped: tuple[str, ...] = ()
    """Ports left out on purpose (`skip=`): `events`, `triples`, `cache`, `leases`."""


@frozen
class Footer:
    counts: dict[str, int]
    lines: int
    sha256: str
    line_digests: bytes | None = None
    """CRC-32 of each line before the footer (4 bytes each, big-endian): where a
    checksum mismatch is. None in files written before it was recorded."""


@frozen
class RecordItem:
    """A memory record and the identity of the space its vector belongs to."""

    space: str
    record: MemoryRecord


@frozen
class CacheItem:
    scope: str
    key: str
    value: bytes
    expires_at: datetime | None


Item = RecordItem | Event | Triple | CacheItem | Lease | AuditEntry


# -- encoding -----------------------------------------------------------------


def _time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def space_json(space: EmbeddingSpace) -> dict[str, Any]:
    """An embedding space as JSON (the export header's, the re-embed records')."""
    return {
        "identity": space.identity,
        "model": space.model,
        "dimension": space.dimension,
        "revision": space.revision,
        "provable": space.provable,
    }


def header_json(header: Header) -> dict[str, Any]:
    return {
        "type": "header",
        "format": FORMAT_NAME,
        "version": header.version,
        "created_at": _time(header.created_at),
        "source": header.source,
        "spaces": [space_json(s) for s in header.spaces],
        "filter": {"user": header.user, "namespace": header.namespace},
        "includes": list(header.includes),
        "deployment": header.deployment,
        "url": header.url,
        "skipped": list(header.skipped),
    }


def record_json(item: RecordItem) -> dict[str, Any]:
    r = item.record
    return {
        "type": "record",
        "space": item.space,
        "owner": r.owner,
        "id": r.id,
        "namespace": r.namespace,
        "kind": r.kind,
        "content": r.content,
        "context": r.context,
        "importance": r.importance,
        "attributes": r.attributes,
        "created_at": _time(r.created_at),
        "updated_at": _time(r.updated_at),
        "vector": _b64(np.ascontiguousarray(r.vector, dtype=_F32).tobytes()),
    }


def event_json(e: Event) -> dict[str, Any]:
    return {
        "type": "event",
        "domain": e.domain,
        "id": e.id,
        "agent": e.agent,
        "action": e.action,
        "outcome": e.outcome,
        "summary": e.summary,
        "occurred_at": _time(e.occurred_at),
        "recorded_at": _time(e.recorded_at),
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


def triple_json(t: Triple) -> dict[str, Any]:
    return {
        "type": "triple",
        "owner": t.owner,
        "loop": t.loop,
        "subject": t.subject,
        "predicate": t.predicate,
        "object": t.object,
        "created_at": _time(t.created_at),
        "source": t.source,
    }


def cache_json(item: CacheItem) -> dict[str, Any]:
    return {
        "type": "cache",
        "scope": item.scope,
        "key": item.key,
        "value": _b64(item.value),
        "expires_at": None if item.expires_at is None else _time(item.expires_at),
    }


def lease_json(lease: Lease) -> dict[str, Any]:
    return {
        "type": "lease",
        "scope": lease.scope,
        "key": lease.key,
        "owner": lease.owner,
        "token": lease.token,
        "expires_at": _time(lease.expires_at),
        "payload": _b64(lease.payload),
    }


def audit_json(entry: AuditEntry) -> dict[str, Any]:
    return {"type": "audit", **entry.as_json()}


def item_json(item: Item) -> dict[str, Any]:
    if isinstance(item, AuditEntry):
        return audit_json(item)
    if isinstance(item, RecordItem):
        return record_json(item)
    if isinstance(item, Event):
        return event_json(item)
    if isinstance(item, Triple):
        return triple_json(item)
    if isinstance(item, CacheItem):
        return cache_json(item)
    return lease_json(item)


def _dumps(obj: dict[str, Any]) -> bytes:
    # ensure_ascii keeps lone surrogates and every other code point representable.
    return (
        json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    )


class ExportWriter:
    """Writes one export to a binary stream: `header`, items, then `finish()`."""

    def __init__(self, stream: IO[bytes], header: Header) -> None:
        self._stream = stream
        self._sha = hashlib.sha256()
        self._digests = bytearray()
        self._lines = 0
        self.counts: dict[str, int] = dict.fromkeys(TYPES, 0)
        self._write(header_json(header))

    def _write(self, obj: dict[str, Any]) -> None:
        data = _dumps(obj)
        self._sha.update(data)
        self._digests += zlib.crc32(data).to_bytes(4, "big")
        self._lines += 1
        self._stream.write(data)

    def write(self, item: Item) -> None:
        obj = item_json(item)
        self.counts[obj["type"]] += 1
        self._write(obj)

    def finish(self) -> Footer:
        footer = Footer(
            counts=dict(self.counts),
            lines=self._lines,
            sha256=self._sha.hexdigest(),
            line_digests=bytes(self._digests),
        )
        self._stream.write(
            _dumps(
                {
                    "type": "footer",
                    "counts": footer.counts,
                    "lines": footer.lines,
                    "sha256": footer.sha256,
                    "line_crc32": _b64(bytes(self._digests)),
                }
            )
        )
        self._stream.flush()
        return footer


@contextlib.contextmanager
def replaced_atomically(path: str) -> Iterator[IO[bytes]]:
    """A binary stream whose bytes replace the file at `path` only once the
    block ends without an exception: they go to a hidden file next to it (next
    to its target, for a symlink), synced, then renamed over it; a failure or an
    interrupt (KeyboardInterrupt) removes that file and leaves `path` as it was.
    What is not a regular file (a named pipe, /dev/stdout, a directory) is
    opened and written as it is, never replaced. Where the hidden file cannot be
    created (a directory one may not write to) `path` is written directly."""
    try:
        kind = os.stat(path).st_mode
    except OSError:  # none yet (or unreachable: opening it says why)
        kind = None
    if kind is not None and not stat.S_ISREG(kind):
        with open(path, "wb") as raw:
            yield raw
        return
    real = os.path.realpath(path)
    folder, name = os.path.split(real)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
    try:  # the mode `open` would give a new file (umask), or the old file's
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        with open(path, "wb") as raw:
            yield raw
        return
    try:
        with os.fdopen(fd, "wb") as raw:
            if kind is not None:
                os.chmod(fd, stat.S_IMODE(kind))
            yield raw
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def export_output(path: str) -> Iterator[IO[bytes]]:
    """`open_export(path, "w")` that replaces `path` only once the export is
    complete (`replaced_atomically`): a failed or interrupted export leaves
    what was there (a previous export) as it was, and no partial file."""
    with replaced_atomically(path) as raw:
        if not path.endswith(".gz"):
            yield raw
            return
        with gzip.GzipFile(path, "wb", fileobj=raw) as zipped:
            yield zipped  # type: ignore[misc]


def open_export(path: str, mode: str) -> IO[bytes]:
    """A binary stream on an export file; gzip when the name ends in `.gz` (writing)
    or the file starts with the gzip magic bytes (reading)."""
    if mode == "w":
        if path.endswith(".gz"):
            return gzip.open(path, "wb")  # type: ignore[return-value]
        return open(path, "wb")
    raw = open(path, "rb")  # noqa: SIM115 - the caller closes it
    magic = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else b""
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


# -- decoding -----------------------------------------------------------------


def _need(obj: dict[str, Any], name: str, line: int, kind: type | tuple[type, ...]) -> Any:
    if name not in obj:
        raise ExportFormatError(line, f"field {name!r} is missing")
    value = obj[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind)):
        raise ExportFormatError(line, f"field {name!r} has the wrong type: {value!r}"[:300])
    return value


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _parse_time(obj: dict[str, Any], name: str, line: int) -> datetime:
    text = _need(obj, name, line, str)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ExportFormatError(line, f"field {name!r} is not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise ExportFormatError(line, f"field {name!r} has no timezone: {text!r}")
    return value.astimezone(UTC)


def _opt_time(obj: dict[str, Any], name: str, line: int) -> datetime | None:
    return None if obj.get(name) is None else _parse_time(obj, name, line)


def _unb64(obj: dict[str, Any], name: str, line: int) -> bytes:
    text = _need(obj, name, line, str)
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ExportFormatError(line, f"field {name!r} is not valid base64") from None


def _space(obj: object, line: int) -> EmbeddingSpace:
    if not isinstance(obj, dict):
        raise ExportFormatError(line, f"a space is an object, got {obj!r}"[:300])
    try:
        space = EmbeddingSpace(
            model=_need(obj, "model", line, str),
            dimension=_need(obj, "dimension", line, int),
            revision=obj.get("revision", ""),
            provable=bool(obj.get("provable", True)),
        )
    except ExportFormatError:
        raise
    except AgentMemoryError as exc:
        raise ExportFormatError(line, f"invalid space: {exc}") from None
    if obj.get("identity", space.identity) != space.identity:
        raise ExportFormatError(line, f"space identity {obj.get('identity')!r} does not match it")
    return space


def parse_header(obj: dict[str, Any], line: int) -> Header:
    if obj.get("type") != "header" or obj.get("format") != FORMAT_NAME:
        raise ExportFormatError(line, f"not an {FORMAT_NAME} file (the first line is no header)")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ExportFormatError(line, f"invalid format version {version!r}")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatVersion(line, version, FORMAT_VERSION)
    spaces = tuple(_space(s, line) for s in _need(obj, "spaces", line, list))
    flt = {} if obj.get("filter") is None else _need(obj, "filter", line, dict)
    return Header(
        version=version,
        source=_need(obj, "source", line, str),
        spaces=spaces,
        created_at=_parse_time(obj, "created_at", line),
        user=_opt_str(flt, "user", line),
        namespace=_opt_str(flt, "namespace", line),
        includes=_names(obj, "includes", line, TYPES),
        deployment=_opt_str(obj, "deployment", line),
        url=_opt_str(obj, "url", line),
        skipped=_names(obj, "skipped", line, ()),
    )


def _names(obj: dict[str, Any], name: str, line: int, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list of strings (`includes`, `skipped`); `default` when absent or null."""
    if obj.get(name) is None:
        return default
    values = _need(obj, name, line, list)
    if not all(isinstance(v, str) for v in values):
        raise ExportFormatError(line, f"field {name!r} must list strings: {values!r}"[:300])
    return tuple(values)


def _opt_str(obj: dict[str, Any], name: str, line: int) -> str | None:
    return None if obj.get(name) is None else _need(obj, name, line, str)


def parse_item(obj: dict[str, Any], line: int, spaces: dict[str, EmbeddingSpace]) -> Item:
    """One record line as a domain value; `ExportFormatError` naming the line."""
    kind = obj.get("type")
    try:
        if kind == "record":
            return _parse_record(obj, line, spaces)
        if kind == "event":
            return _parse_event(obj, line)
        if kind == "triple":
            return Triple(
                owner=_need(obj, "owner", line, str),
                loop=_need(obj, "loop", line, str),
                subject=_need(obj, "subject", line, str),
                predicate=_need(obj, "predicate", line, str),
                object=_need(obj, "object", line, str),
                created_at=_parse_time(obj, "created_at", line),
                source=obj.get("source", ""),
            )
        if kind == "cache":
            return CacheItem(
                scope=_need(obj, "scope", line, str),
                key=_need(obj, "key", line, str),
                value=_unb64(obj, "value", line),
                expires_at=_opt_time(obj, "expires_at", line),
            )
        if kind == "audit":
            for name in ("id", "at", "operation", "tenant", "caller"):
                _need(obj, name, line, str)
            _need(obj, "counts", line, dict)
            if obj.get("subject") is not None:
                _need(obj, "subject", line, str)
            return AuditEntry.from_json({**obj, "subject": obj.get("subject")})
        if kind == "lease":
            return Lease(
                scope=_need(obj, "scope", line, str),
                key=_need(obj, "key", line, str),
                owner=_need(obj, "owner", line, str),
                token=_need(obj, "token", line, int),
                expires_at=_parse_time(obj, "expires_at", line),
                payload=_unb64(obj, "payload", line),
            )
    except ExportFormatError:
        raise
    except (AgentMemoryError, TypeError, ValueError) as exc:
        raise ExportFormatError(line, f"invalid {kind}: {exc}") from None
    raise UnknownRecordType(line, kind)


def _parse_record(obj: dict[str, Any], line: int, spaces: dict[str, EmbeddingSpace]) -> RecordItem:
    sid = _need(obj, "space", line, str)
    space = spaces.get(sid)
    if space is None:
        raise ExportFormatError(line, f"record of space {sid!r}, which the header does not name")
    raw = _unb64(obj, "vector", line)
    if len(raw) % 4:
        raise ExportFormatError(line, f"vector of {len(raw)} bytes is not float32")
    vector = np.frombuffer(raw, dtype=_F32).astype(np.float32)
    if vector.shape[0] != space.dimension:
        raise WrongDimension(line, space.dimension, int(vector.shape[0]))
    record = MemoryRecord(
        id=_need(obj, "id", line, str),
        owner=_need(obj, "owner", line, str),
        namespace=_need(obj, "namespace", line, str),
        kind=_need(obj, "kind", line, str),
        content=_need(obj, "content", line, str),
        vector=vector,
        created_at=_parse_time(obj, "created_at", line),
        updated_at=_parse_time(obj, "updated_at", line),
        importance=_need(obj, "importance", line, (int, float)),
        attributes=_need(obj, "attributes", line, dict),
        context=obj.get("context", ""),
    )
    return RecordItem(space=sid, record=record)


# MemoryRecord's fields, in order, as `_trusted_record` sets them.
_RECORD_FIELDS = (
    "id",
    "owner",
    "namespace",
    "kind",
    "content",
    "vector",
    "created_at",
    "updated_at",
    "importance",
    "attributes",
    "context",
)


def _trusted_record(obj: dict[str, Any]) -> RecordItem:
    """A record line already checked by `_parse_record` (byte for byte the same
    line, see `ExportReader(checked=...)`), built without running the record's
    validators again: the values equal what the validated constructor makes
    (UTC times, float importance, a read-only float32 vector, a dict). Importing
    a large file parses each line twice; this halves the second parse."""
    sid = obj["space"]
    vector = np.frombuffer(base64.b64decode(obj["vector"]), dtype=_F32).astype(np.float32)
    vector.flags.writeable = False
    values = (
        obj["id"],
        obj["owner"],
        obj["namespace"],
        obj["kind"],
        obj["content"],
        vector,
        datetime.fromisoformat(obj["created_at"]).astimezone(UTC),
        datetime.fromisoformat(obj["updated_at"]).astimezone(UTC),
        float(obj["importance"]),
        dict(obj["attributes"]),
        obj.get("context", ""),
    )
    record = object.__new__(MemoryRecord)
    for name, value in zip(_RECORD_FIELDS, values, strict=True):
        object.__setattr__(record, name, value)
    return RecordItem(space=sid, record=record)


def trusted_parsing_applies() -> bool:
    """Whether `_trusted_record` sets every field MemoryRecord has (else the
    reader validates every line again: a new field is never left unset)."""
    return tuple(a.name for a in attrs.fields(MemoryRecord)) == _RECORD_FIELDS


def _entity(value: object, line: int) -> Entity:
    """One `[type, id]` pair of an event's `entities`."""
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(part, str) for part in value)
    ):
        raise ExportFormatError(line, f"an entity is a [type, id] pair of strings: {value!r}"[:300])
    return Entity(type=value[0], id=value[1])


def _parse_event(obj: dict[str, Any], line: int) -> Event:
    entities = _need(obj, "entities", line, list)
    return Event(
        id=_need(obj, "id", line, str),
        domain=_need(obj, "domain", line, str),
        agent=_need(obj, "agent", line, str),
        action=_need(obj, "action", line, str),
        outcome=_need(obj, "outcome", line, str),
        summary=_need(obj, "summary", line, str),
        occurred_at=_parse_time(obj, "occurred_at", line),
        recorded_at=_parse_time(obj, "recorded_at", line),
        origin_request_id=obj.get("origin_request_id"),
        summary_source=obj.get("summary_source", "unknown"),
        fallback_reason=obj.get("fallback_reason"),
        time_basis=obj.get("time_basis", "recorded"),
        entities=tuple(_entity(e, line) for e in entities),
        entity_source=obj.get("entity_source", "none"),
        user_id=obj.get("user_id"),
        importance=_need(obj, "importance", line, (int, float)),
        metadata=_need(obj, "metadata", line, dict),
        is_global=_need(obj, "is_global", line, bool),
    )


@frozen
class _Line:
    number: int
    raw: bytes
    obj: dict[str, Any] = field(factory=dict)


class ExportReader:
    """Reads an export stream. `verify()` checks the whole file (header, every
    line, footer counts and checksum) without side effects; `items()` yields
    `(line_number, item)` after the header, checking the footer at the end.

    `verify()` also keeps a fingerprint of every line (`fingerprints`). A reader
    given them (`checked=`) builds the record lines that are byte for byte the
    ones checked without validating them again, and refuses a line that changed
    (`ExportFormatError`): the second pass of an import costs half the first."""

    def __init__(self, stream: IO[bytes], *, checked: Sequence[int] | None = None) -> None:
        self._stream = stream
        self.header: Header | None = None
        self.footer: Footer | None = None
        self._spaces: dict[str, EmbeddingSpace] = {}
        self._checked = checked if checked is not None and trusted_parsing_applies() else None
        self.fingerprints: array[int] = array("q")
        self._fingerprint = False

    @property
    def spaces(self) -> dict[str, EmbeddingSpace]:
        return dict(self._spaces)

    def _lines(self) -> Iterator[_Line]:
        number = 0
        while True:
            try:
                raw = self._stream.readline()
            except gzip.BadGzipFile as exc:  # a CRC or length mismatch, bytes after the stream
                raise ExportFormatError(
                    number + 1, f"the compressed file is corrupt from here on: {exc}"
                ) from None
            except (OSError, EOFError) as exc:  # a cut gzip stream, a read error
                raise TruncatedExport(number + 1, f"the file cannot be read on: {exc}") from None
            except zlib.error as exc:  # a corrupt deflate stream (not an OSError)
                raise ExportFormatError(
                    number + 1, f"the compressed file is corrupt from here on: {exc}"
                ) from None
            if not raw:
                return
            number += 1
            if not raw.endswith(b"\n"):
                raise TruncatedExport(number, "the last line is cut off (no newline)")
            try:
                obj = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ExportFormatError(number, f"not valid JSON: {exc}") from None
            except RecursionError:
                raise ExportFormatError(number, "not valid JSON: nested too deeply") from None
            if not isinstance(obj, dict):
                raise ExportFormatError(number, "a line must be a JSON object")
            yield _Line(number, raw, obj)

    def items(self) -> Iterator[tuple[int, Item]]:
        sha = hashlib.sha256()
        digests = bytearray()
        counts: dict[str, int] = dict.fromkeys(TYPES, 0)
        last = 0
        for ln in self._lines():
            last = ln.number
            if self._fingerprint:
                self.fingerprints.append(hash(ln.raw))
            checked = self._checked
            if checked is not None and (
                ln.number > len(checked) or hash(ln.raw) != checked[ln.number - 1]
            ):
                raise ExportFormatError(ln.number, "the line changed since the file was checked")
            if self.footer is not None:
                raise ExportFormatError(ln.number, "a line follows the footer")
            if ln.number == 1:
                self.header = parse_header(ln.obj, 1)
                self._spaces = {s.identity: s for s in self.header.spaces}
                sha.update(ln.raw)
                digests += zlib.crc32(ln.raw).to_bytes(4, "big")
                continue
            if ln.obj.get("type") == "footer":
                self.footer = _check_footer(ln, counts, sha.hexdigest(), bytes(digests))
                continue
            item = self._parse(ln)
            counts[str(ln.obj["type"])] += 1
            sha.update(ln.raw)
            digests += zlib.crc32(ln.raw).to_bytes(4, "big")
            yield ln.number, item
        if self.header is None:
            raise TruncatedExport(1, "the file is empty")
        if self.footer is None:
            raise TruncatedExport(last + 1, "the file ends without its footer (truncated?)")

    def _parse(self, ln: _Line) -> Item:
        if self._checked is not None and ln.obj.get("type") == "record":
            return _trusted_record(ln.obj)  # this very line passed `_parse_record`
        return parse_item(ln.obj, ln.number, self._spaces)

    def verify(self) -> tuple[Header, Footer]:
        """Check the whole file; `fingerprints` then holds one per line."""
        self._fingerprint = True
        for _ in self.items():
            pass
        if self.header is None or self.footer is None:  # pragma: no cover - items() raised
            raise TruncatedExport(1, "no header or footer")
        return self.header, self.footer


def _check_footer(ln: _Line, counts: dict[str, int], digest: str, crcs: bytes) -> Footer:
    obj = ln.obj
    footer = Footer(
        counts=_need(obj, "counts", ln.number, dict),
        lines=_need(obj, "lines", ln.number, int),
        sha256=_need(obj, "sha256", ln.number, str),
        line_digests=(
            None if obj.get("line_crc32") is None else _unb64(obj, "line_crc32", ln.number)
        ),
    )
    first = _first_edited(footer.line_digests, crcs)
    if first is not None:
        raise ChecksumMismatch(first, "the line's content does not match what was exported")
    if footer.lines != ln.number - 1:
        raise ChecksumMismatch(
            ln.number, f"the footer counts {footer.lines} lines, the file has {ln.number - 1}"
        )
    want = {k: v for k, v in footer.counts.items() if v}
    have = {k: v for k, v in counts.items() if v}
    if want != have:
        raise ChecksumMismatch(ln.number, f"the footer counts {want}, the file holds {have}")
    if footer.sha256 != digest:
        where = (
            "the footer's own line digests were changed"
            if footer.line_digests is not None
            else "this file has no line digests, so the checksum cannot localise the change"
        )
        raise ChecksumMismatch(
            ln.number, f"the SHA-256 of the lines does not match the footer's ({where})"
        )
    return footer


def _first_edited(recorded: bytes | None, computed: bytes) -> int | None:
    """The first line (1-based) whose CRC-32 differs from the one the footer
    recorded; None when they agree (or the footer recorded none)."""
    if recorded is None:
        return None
    for i in range(0, min(len(recorded), len(computed)), 4):
        if recorded[i : i + 4] != computed[i : i + 4]:
            return i // 4 + 1
    if len(recorded) != len(computed):
        return min(len(recorded), len(computed)) // 4 + 1
    return None


def read_header(path: str) -> Header:
    """The header of an export file (`ExportFormatError` when it has none)."""
    with open_export(path, "r") as stream:
        reader = ExportReader(stream)
        for _ in reader.items():
            break
        if reader.header is None:
            raise TruncatedExport(1, "the file is empty")
        return reader.header

"""Rebuilding domain records from rows of our own tables, cheaply.

Every value in a row was validated when its record was built, before it was
written; running the validators again on the way out (JSON re-serialisation of
metadata, enum and timestamp checks) would cost more than a short query. The
records are therefore rebuilt slot by slot by a decoder generated once per
class and column order (the way attrs generates `__init__`): one function per
row that creates the instance and stores each column, converted where the
column's Python type is not the field's (an enum from its value, say), straight
into its slot. The column order must name every field of the class exactly
once, so a field added to a record class fails loudly instead of going missing;
`tests/postgres/test_codec.py` checks, for generated records, that the decoded
value equals the one the validating constructor builds.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from json.scanner import make_scanner
from typing import Any

import attrs
from psycopg import AsyncConnection
from psycopg.adapt import Buffer, Loader
from psycopg.pq import Format

__all__ = ["register_json_loaders", "row_decoder", "utc"]


def row_decoder(
    cls: type[Any],
    columns: tuple[str, ...],
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Callable[[Sequence[Any]], Any]:
    """A function from a row (a sequence of values in `columns` order) to an
    instance of the frozen attrs class `cls` holding exactly those values, each
    passed through `convert[name]` first when given.

    No validator or converter of `cls` runs: rows must come from our own tables.
    """
    return _compile(cls, columns, tuple(sorted((convert or {}).items())))  # type: ignore[arg-type]


@functools.cache
def _compile(
    cls: type[Any],
    columns: tuple[str, ...],
    convert: tuple[tuple[str, Callable[[Any], Any]], ...],
) -> Callable[[Sequence[Any]], Any]:
    fields = attrs.fields(cls)
    expected = {f.name for f in fields}
    if len(columns) != len(expected) or set(columns) != expected:
        raise AssertionError(f"{cls.__name__}: decoded fields {columns} != {sorted(expected)}")
    if getattr(cls, "__attrs_post_init__", None) is not None:  # pragma: no cover - guard
        raise AssertionError(f"{cls.__name__}: __attrs_post_init__ would be skipped")
    converters = dict(convert)
    unknown = set(converters) - expected
    if unknown:
        raise AssertionError(f"{cls.__name__}: converters for unknown fields {sorted(unknown)}")
    scope: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_setattr": object.__setattr__,
        "_UTC": UTC,
    }
    args = [f"v{i}" for i in range(len(columns))]
    body: list[str] = [f"    ({', '.join(args)},) = row", "    o = _new(_cls)"]
    for i, name in enumerate(columns):
        value = f"v{i}"
        if converters.get(name) is utc:  # inlined: no call for values already in UTC
            value = f"(v{i} if v{i}.tzinfo is _UTC else v{i}.astimezone(_UTC))"
        elif name in converters:
            scope[f"_c{i}"] = converters[name]
            value = f"_c{i}(v{i})"
        slot = cls.__dict__.get(name)
        if slot is not None and hasattr(slot, "__set__"):  # slotted class: the member descriptor
            scope[f"_s{i}"] = slot.__set__
            body.append(f"    _s{i}(o, {value})")
        else:  # pragma: no cover - our records are slotted
            body.append(f"    _setattr(o, {name!r}, {value})")
    source = "def decode(row):\n" + "\n".join(body) + "\n    return o\n"
    # The source is built from attrs field names (identifiers) and our own
    # placeholders only; nothing from a row reaches it.
    exec(compile(source, f"<{cls.__name__} row decoder>", "exec"), scope)
    decode: Callable[[Sequence[Any]], Any] = scope["decode"]
    return decode


def utc(value: datetime) -> datetime:
    """psycopg returns timestamptz in the session's time zone (UTC on our
    connections, see `PostgresDatabase`); records hold UTC either way."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


# The C scanner `json.loads` ends in, called directly: `json.loads` on bytes
# first detects the encoding and goes through two Python-level layers, which
# cost more than parsing a small metadata object.
_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def loads_json(text: str) -> Any:
    """`json.loads(text)`, faster for documents without surrounding whitespace."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:  # leading whitespace, or not JSON: the full parser decides
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


class _JsonTextLoader(Loader):
    """`json` columns (text and binary format alike are the document's UTF-8 text)."""

    def load(self, data: Buffer) -> Any:
        text = str(data, "utf-8")  # `loads_json`, inlined: this runs once per row
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            return json.loads(text)
        return value if end == len(text) else json.loads(text)


class _JsonBinaryLoader(_JsonTextLoader):
    format = Format.BINARY


def register_json_loaders(conn: AsyncConnection[Any]) -> None:
    """Load `json` columns (metadata, attributes) with `loads_json` on `conn`."""
    conn.adapters.register_loader("json", _JsonTextLoader)
    conn.adapters.register_loader("json", _JsonBinaryLoader)

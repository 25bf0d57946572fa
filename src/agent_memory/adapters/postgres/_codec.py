"""Rebuilding domain records from rows of our own tables, cheaply.

Every value in a row was validated when its record was built, before it was
written; running the validators again on the way out (JSON re-serialisation of
metadata, enum and timestamp checks) would cost more than a short query. The
records are therefore rebuilt slot by slot by a decoder generated once per
class and column order (the way attrs generates `__init__`): one function per
row that creates the instance and stores each column, converted where the
column's Python type is not the field's (an enum from its value, say), straight
into its slot; a conversion that is a table lookup (`Lookup`: enum values,
cached entities) is inlined as a subscript, with no call. `rows_decoder` is the
same code in a loop over many rows: psycopg builds plain tuples in C, and one
loop decodes them all, where a row factory costs a call per row. The column
order must name every field of the class exactly once, so a field added to a
record class fails loudly instead of going missing;
`tests/postgres/test_codec.py` checks, for generated records, that the decoded
value equals the one the validating constructor builds.

How a slot is stored matters at thousands of rows a second: when the record
class allows it, the decoder builds the instance as a *twin* (plain slot
stores, then one `__class__` change: see `adapters/_common/slots.py`), else
through the class's slot descriptors; `fast_decoding(cls)` says which way a
class goes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from json.scanner import make_scanner
from typing import Any

import attrs
from psycopg import AsyncConnection
from psycopg.adapt import Buffer, Loader
from psycopg.pq import Format

from agent_memory.adapters._common.slots import twin_class

__all__ = [
    "Lookup",
    "fast_decoding",
    "register_json_loaders",
    "row_decoder",
    "rows_decoder",
    "utc",
]


@attrs.frozen(eq=False)  # hashed by identity: the decoder cache keys on it
class Lookup:
    """A column converted by looking its value up in `table` (`table[value]`),
    inlined into the decoder as a subscript. With `each`, the column is a
    sequence and becomes the tuple of `table[x]` for its items (`()` when empty).
    `table` may be a dict with `__missing__` (a cache that fills itself)."""

    table: Mapping[Any, Any]
    each: bool = False


Converter = Callable[[Any], Any] | Lookup

_SINGLES_SIZE = 4096


class _Singles(dict[Any, tuple[Any, ...]]):
    """`value -> (table[value],)`, filled on first use and emptied when it
    reaches `_SINGLES_SIZE` entries (bounded, like the tables it reads)."""

    def __init__(self, table: Mapping[Any, Any]) -> None:
        super().__init__()
        self._table = table

    def __missing__(self, value: Any) -> tuple[Any, ...]:
        item = (self._table[value],)  # a KeyError as the table's own
        if len(self) >= _SINGLES_SIZE:
            self.clear()
        self[value] = item
        return item


def row_decoder(
    cls: type[Any],
    columns: tuple[str | None, ...],
    convert: Mapping[str, Converter] | None = None,
) -> Callable[[Sequence[Any]], Any]:
    """A function from a row (a sequence of values in `columns` order) to an
    instance of the frozen attrs class `cls` holding exactly those values, each
    passed through `convert[name]` first when given (a function, or a `Lookup`).
    A column named `None` is in the row but not decoded.

    No validator or converter of `cls` runs: rows must come from our own tables.
    """
    key = tuple(sorted((convert or {}).items()))
    return _compile(cls, columns, key, False)  # type: ignore[arg-type]


def rows_decoder(
    cls: type[Any],
    columns: tuple[str | None, ...],
    convert: Mapping[str, Converter] | None = None,
) -> Callable[[Iterable[Sequence[Any]]], list[Any]]:
    """`row_decoder` for many rows at once: a function from rows to the list
    of their instances, the decoding inlined in one loop (no call per row).

    Fetching plain tuples (psycopg builds those in C) and decoding them with
    this costs less than a row factory, which psycopg calls once per row.
    """
    key = tuple(sorted((convert or {}).items()))
    return _compile(cls, columns, key, True)  # type: ignore[arg-type]


def fast_decoding(cls: type[Any]) -> bool:
    """Whether `row_decoder(cls, ...)` builds instances through a twin class
    (plain slot stores and one `__class__` change) rather than slot descriptors."""
    return twin_class(cls) is not None


@functools.cache
def _compile(
    cls: type[Any],
    columns: tuple[str | None, ...],
    convert: tuple[tuple[str, Converter], ...],
    many: bool,
) -> Callable[[Any], Any]:
    fields = attrs.fields(cls)
    expected = {f.name for f in fields}
    named = [c for c in columns if c is not None]
    if len(named) != len(expected) or set(named) != expected:
        raise AssertionError(f"{cls.__name__}: decoded fields {columns} != {sorted(expected)}")
    if getattr(cls, "__attrs_post_init__", None) is not None:  # pragma: no cover - guard
        raise AssertionError(f"{cls.__name__}: __attrs_post_init__ would be skipped")
    converters = dict(convert)
    unknown = set(converters) - expected
    if unknown:
        raise AssertionError(f"{cls.__name__}: converters for unknown fields {sorted(unknown)}")
    twin = twin_class(cls)
    scope: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_twin": twin,
        "_setattr": object.__setattr__,
        "_UTC": UTC,
        "_tuple": tuple,
        "_map": map,
        "_len": len,
    }
    args = [f"v{i}" for i in range(len(columns))]
    body: list[str] = [
        f"({', '.join(args)},) = row",
        # The twin has no `__init__` or `__new__`: calling it is object's own
        # allocation, and cheaper than calling `object.__new__`.
        "o = _new(_cls)" if twin is None else "o = _twin()",
    ]
    for i, name in enumerate(columns):
        if name is None:  # in the row, not decoded
            continue
        value = f"v{i}"
        conv = converters.get(name)
        if conv is utc:  # inlined: no call for values already in UTC
            value = f"(v{i} if v{i}.tzinfo is _UTC else v{i}.astimezone(_UTC))"
        elif isinstance(conv, Lookup) and conv.each:
            # One item (the common case): its 1-tuple comes from a cache of its
            # own (tuples are immutable: sharing one is sharing its item), with
            # no map and no tuple built per row.
            scope[f"_o{i}"] = _Singles(conv.table)
            scope[f"_g{i}"] = conv.table.__getitem__
            value = (
                f"(_o{i}[v{i}[0]] if _len(v{i}) == 1"
                f" else _tuple(_map(_g{i}, v{i})) if v{i} else ())"
            )
        elif isinstance(conv, Lookup):
            scope[f"_t{i}"] = conv.table
            value = f"_t{i}[v{i}]"
        elif conv is not None:
            scope[f"_c{i}"] = converters[name]
            value = f"_c{i}(v{i})"
        slot = cls.__dict__.get(name)
        if twin is not None:  # a plain slot store on the twin (`name` is a field name)
            body.append(f"o.{name} = {value}")
        elif slot is not None and hasattr(slot, "__set__"):  # slotted: the member descriptor
            scope[f"_s{i}"] = slot.__set__
            body.append(f"_s{i}(o, {value})")
        else:  # pragma: no cover - our records are slotted
            body.append(f"_setattr(o, {name!r}, {value})")
    if twin is not None:
        body.append("o.__class__ = _cls")
    if many:
        source = (
            "def decode(rows):\n    out = []\n    add = out.append\n    for row in rows:\n"
            + "".join(f"        {line}\n" for line in body)
            + "        add(o)\n    return out\n"
        )
    else:
        source = "def decode(row):\n" + "".join(f"    {line}\n" for line in body) + "    return o\n"
    # The source is built from attrs field names (identifiers) and our own
    # placeholders only; nothing from a row reaches it.
    exec(compile(source, f"<{cls.__name__} row decoder>", "exec"), scope)
    decode: Callable[[Any], Any] = scope["decode"]
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

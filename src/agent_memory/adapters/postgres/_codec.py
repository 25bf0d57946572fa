"""Rebuilding domain records from rows of our own tables, cheaply.

Every value in a row was validated when its record was built, before it was
written; running the validators again on the way out (JSON re-serialisation of
metadata, enum and timestamp checks) would cost more than a short query. The
records are therefore rebuilt slot by slot by a builder made once per class and
field order, which checks that the order names every field exactly once, so a
field added to a record class fails loudly instead of going missing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs

__all__ = ["builder", "utc"]


@functools.cache
def builder(cls: type[Any], names: tuple[str, ...]) -> Callable[..., Any]:
    """A function taking the values of `names` positionally and returning an
    instance of the frozen attrs class `cls` with exactly those fields."""
    expected = {f.name for f in attrs.fields(cls)}
    if len(names) != len(expected) or set(names) != expected:
        raise AssertionError(f"{cls.__name__}: decoded fields {names} != {sorted(expected)}")
    setters = tuple(
        cls.__dict__[n].__set__
        if n in cls.__dict__
        else functools.partial(_set_attr, n)  # not slotted
        for n in names
    )
    new = object.__new__

    def build(*values: Any) -> Any:
        obj = new(cls)
        for setter, value in zip(setters, values, strict=True):
            setter(obj, value)
        return obj

    return build


def _set_attr(name: str, obj: object, value: object) -> None:
    object.__setattr__(obj, name, value)


def utc(value: datetime) -> datetime:
    """psycopg returns timestamptz in the session's time zone; records hold UTC."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)

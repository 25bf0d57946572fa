"""Rebuilding domain records from rows of our own tables, cheaply.

Every value in a row was validated when its record was built, before it was
written; running the validators again on the way out (JSON re-serialisation of
metadata, enum and timestamp checks) would cost more than a short query. The
records are therefore rebuilt field by field, after a check that every field is
given, so a field added to a record class fails loudly instead of going missing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs

__all__ = ["trusted", "utc"]

T = TypeVar("T")


def trusted(cls: type[T], **values: Any) -> T:
    """An instance of the frozen attrs class `cls` with exactly these field values."""
    if len(values) != len(attrs.fields(cls)):  # type: ignore[arg-type]
        missing = {f.name for f in attrs.fields(cls)} - set(values)  # type: ignore[arg-type]
        raise AssertionError(f"{cls.__name__}: fields not decoded: {sorted(missing)}")
    obj = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


def utc(value: datetime) -> datetime:
    """psycopg returns timestamptz in the session's time zone; records hold UTC."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)

"""Validation helpers shared by records, ports' implementations and services."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.domain.errors import InvalidInput, ScopeRequired

__all__ = [
    "as_vector",
    "require_id",
    "require_json_mapping",
    "require_positive",
    "require_scope",
    "require_text",
    "require_unit_interval",
    "require_utc",
]


def require_text(value: object, field: str) -> str:
    """Any string that encodes as UTF-8 (no lone surrogates), possibly empty."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"a string is required, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(field, "text must be valid Unicode (no lone surrogates)") from None
    return value


def require_scope(value: object, field: str = "scope") -> str:
    """Return `value` if it is a non-blank string, else raise `ScopeRequired`."""
    if not isinstance(value, str) or not value.strip():
        raise ScopeRequired(field, value)
    return require_text(value, field)


def require_id(value: object, field: str = "id") -> str:
    """Ids are opaque, non-blank strings."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, f"a non-empty string is required, got {value!r}")
    return require_text(value, field)


def require_utc(value: object, field: str = "timestamp") -> datetime:
    """Timestamps must be timezone-aware; they are normalised to UTC."""
    if not isinstance(value, datetime):
        raise InvalidInput(field, f"a datetime is required, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(field, f"a timezone-aware datetime is required, got naive {value!r}")
    return value.astimezone(UTC)


def require_positive(value: object, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidInput(field, f"a positive integer is required, got {value!r}")
    return value


def require_unit_interval(value: object, field: str) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise InvalidInput(field, f"a number in [0, 1] is required, got {value!r}")
    return float(value)


def require_json_mapping(value: object, field: str) -> dict[str, Any]:
    """A mapping with string keys whose values survive a JSON round trip."""
    if not isinstance(value, Mapping):
        raise InvalidInput(field, f"a mapping is required, got {type(value).__name__}")
    out = dict(value)
    for key in out:
        if not isinstance(key, str):
            raise InvalidInput(field, f"keys must be strings, got {key!r}")
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, f"values must be JSON-serialisable: {exc}") from None
    return out


def as_vector(value: object, field: str = "vector") -> npt.NDArray[np.float32]:
    """A finite, non-empty, 1-D float32 vector, made read-only."""
    try:
        arr = np.array(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, f"not a numeric vector: {exc}") from None
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InvalidInput(field, f"a non-empty 1-D vector is required, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InvalidInput(field, "every component must be finite (no NaN or infinity)")
    arr.flags.writeable = False
    return arr

"""Validation helpers shared by records, ports' implementations and services.

The storage bounds below are one rule for every backend (the storage ports
document them; the contract suite checks them):

- `MAX_LIMIT`: every `limit` of a storage read is an int in [1, MAX_LIMIT];
- `MAX_TTL`: every lease or cache ttl is a timedelta in (0, MAX_TTL];
- `MAX_ID_BYTES`: every id-like string (owner, namespace, record id, kind, event
  id, domain, user id, entity type and id, lease scope/key/owner, cache
  scope/key, triple owner/loop/subject/predicate/object) is at most this many
  bytes of UTF-8 (`require_id`, `require_scope`);
- `MAX_QUERY_BYTES`: a keyword query is at most this many bytes of UTF-8, and
  every one of its words counts on every backend; a word (run of letters and
  digits) longer than `MAX_QUERY_WORD_BYTES` bytes is ignored on every backend.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from agent_memory.domain.errors import InvalidInput, ScopeRequired

_T = TypeVar("_T")

__all__ = [
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "MAX_LIMIT",
    "MAX_QUERY_BYTES",
    "MAX_QUERY_WORD_BYTES",
    "MAX_TTL",
    "MAX_VALUE_BYTES",
    "as_vector",
    "attrs_validator",
    "json_strings",
    "require_id",
    "require_int_at_least",
    "require_json_mapping",
    "require_limit",
    "require_model_name",
    "require_no_nul",
    "require_non_negative_number",
    "require_positive",
    "require_positive_number",
    "require_scope",
    "require_storable",
    "require_text",
    "require_ttl",
    "require_unit_interval",
    "require_utc",
    "require_vector_norm",
]

#: The largest `limit` any storage read accepts. Large enough for every page a
#: service asks for, small enough that each backend answers it in one bounded
#: query (the engines' own caps, e.g. a 64-bit LIMIT or a search module's
#: result window, are far above it) and that no limit can overflow.
MAX_LIMIT = 10_000
#: The longest id-like string (owner, namespace, id, kind, domain, user id, lease
#: or cache scope and key, triple term...), in bytes of UTF-8. Every backend
#: stores the maximum in every id field of one row at once: PostgreSQL's b-tree
#: entries hold at most 2,704 bytes and its widest key, a triple's (owner, loop,
#: subject, predicate, object), takes 5 x (512 + 4) + 8 = 2,588 bytes of
#: incompressible text; anything longer would fail there (and only there) as a
#: server error instead of this clear `InvalidInput`.
MAX_ID_BYTES = 512
#: The longest lease or cache ttl (about ten years): `now + ttl` stays a valid
#: timestamp on every backend and in every millisecond/microsecond encoding.
MAX_TTL = timedelta(days=3650)
#: The longest keyword query, in bytes of UTF-8 (64 KiB). Every backend honours
#: every word of a query up to this size (measured: about 16,000 distinct words).
MAX_QUERY_BYTES = 64 * 1024
#: The largest cache value and lease payload, in bytes (16 MiB). Every backend
#: stores and returns one within a call's timeout; Redis refuses a value past
#: its 512 MB bulk limit by resetting the connection, and PostgreSQL spends
#: longer than its call timeout on a few hundred MB, both reported as an outage
#: a caller would retry.
MAX_VALUE_BYTES = 16 * 1024 * 1024
#: The deepest nesting of attributes, metadata and LangGraph values (a mapping
#: or list inside another counts one level each; a flat mapping is depth 1).
#: Every backend round-trips it alike; much deeper JSON exhausts Python's
#: recursion in `json.dumps` (about 1,000 levels) and some servers' parsers.
MAX_JSON_DEPTH = 100
#: The most values attributes, metadata and LangGraph values may hold, counted as
#: their JSON holds them: every scalar, container and mapping key, a container
#: shared by several parents once for each place it appears (JSON has no
#: sharing, so `json.dumps` writes it out each time). Ten million values are
#: tens of MB of JSON; a list that holds another twice, thirty levels down, would
#: be 2 ** 30 (hours of work and GBs of memory to serialise), and is refused
#: when built.
MAX_JSON_VALUES = 10_000_000
#: A query word (run of letters and digits) longer than this many UTF-8 bytes is
#: ignored: the search engines index only bounded tokens (RediSearch keeps the
#: first 128 bytes, PostgreSQL drops words over 2047), so such words could match
#: on some backends and not on others.
MAX_QUERY_WORD_BYTES = 64


def require_text(value: object, field: str) -> str:
    """Any string that encodes as UTF-8 (no lone surrogates), possibly empty."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"a string is required, got {type(value).__name__}")
    if not value.isascii():  # ASCII always encodes: skip the copy
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(field, "text must be valid Unicode (no lone surrogates)") from None
    return value


def _no_nul_text(value: str, field: str) -> str:
    if "\x00" in value:
        raise InvalidInput(field, "text must not contain NUL (\\x00)")
    return require_text(value, field)


def json_strings(value: object) -> Iterator[str]:
    """Every string in a JSON-like value: itself, mapping keys and nested values
    (walked with an explicit stack, whatever the depth)."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def require_no_nul(value: _T, field: str) -> _T:
    """`value` unless it holds NUL (U+0000) in a string, a mapping key or a nested
    JSON value: no backend can store it alike (PostgreSQL text and jsonb refuse it)."""
    for text in json_strings(value):
        if "\x00" in text:
            raise InvalidInput(field, "text must not contain NUL (\\x00)")
    return value


def require_storable(value: _T, field: str) -> _T:
    """`value` unless a string in it (a mapping key or a nested JSON value too)
    holds NUL or a lone surrogate: neither can be stored alike as UTF-8 text or
    JSON by every backend."""
    for text in json_strings(value):
        _no_nul_text(text, field)
    return value


def _bounded_id(value: str, field: str) -> str:
    """`value` (valid text without NUL) unless it is over MAX_ID_BYTES of UTF-8."""
    # A character is at most 4 bytes: short ids skip the encoding.
    if len(value) * 4 > MAX_ID_BYTES:
        size = len(value.encode("utf-8"))
        if size > MAX_ID_BYTES:
            raise InvalidInput(
                field, f"at most {MAX_ID_BYTES} bytes of UTF-8 are allowed, got {size} bytes"
            )
    return value


def require_scope(value: object, field: str = "scope") -> str:
    """Return `value` if it is a non-blank string without NUL of at most
    MAX_ID_BYTES of UTF-8, else raise `ScopeRequired` (blank) or `InvalidInput`."""
    if not isinstance(value, str) or not value.strip():
        raise ScopeRequired(field, value)
    return _bounded_id(_no_nul_text(value, field), field)


def require_id(value: object, field: str = "id") -> str:
    """Ids are opaque, non-blank strings without NUL, of at most MAX_ID_BYTES of
    UTF-8."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, f"a non-empty string is required, got {value!r}")
    return _bounded_id(_no_nul_text(value, field), field)


def require_utc(value: object, field: str = "timestamp") -> datetime:
    """Timestamps must be timezone-aware; they are normalised to UTC."""
    if not isinstance(value, datetime):
        raise InvalidInput(field, f"a datetime is required, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(field, f"a timezone-aware datetime is required, got naive {value!r}")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:00-05:00 is past datetime.max in UTC
        raise InvalidInput(field, f"{value!r} is out of range in UTC") from None


def require_positive(value: object, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidInput(field, f"a positive integer is required, got {value!r}")
    return value


def require_positive_number(value: object, field: str) -> float:
    """A finite number (int or float, not a bool) above 0."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInput(field, f"a positive number is required, got {value!r}")
    return float(value)


def require_non_negative_number(value: object, field: str) -> float:
    """A finite number (int or float, not a bool) at or above 0."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise InvalidInput(field, f"a finite number >= 0 is required, got {value!r}")
    return float(value)


def require_int_at_least(value: object, field: str, minimum: int) -> int:
    """An int (not a bool) at or above `minimum`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidInput(field, f"an integer >= {minimum} is required, got {value!r}")
    return value


def require_model_name(value: object, field: str = "model") -> str:
    """A model name: a string that is not blank."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, f"a non-empty model name is required, got {value!r}")
    return value


def attrs_validator(
    rule: Callable[[object, str], object], field: str | None = None
) -> Callable[[object, Any, object], None]:
    """One of the `require_*` checks as an attrs validator; the error names
    `field`, else the attribute."""

    def check(_inst: object, attr: Any, value: object) -> None:
        rule(value, field if field is not None else attr.name)

    return check


def require_limit(value: object, field: str = "limit") -> int:
    """A storage read's limit: an int (not a bool) in [1, MAX_LIMIT]."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(field, f"an integer in [1, {MAX_LIMIT}] is required, got {value!r}")
    return value


def require_ttl(value: object, field: str = "ttl") -> timedelta:
    """A lease or cache ttl: a timedelta in (0, MAX_TTL]."""
    if not isinstance(value, timedelta) or not timedelta(0) < value <= MAX_TTL:
        raise InvalidInput(
            field, f"a timedelta above 0 and at most {MAX_TTL.days} days is required, got {value!r}"
        )
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
    _require_shape(out, field)
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, f"values must be JSON-serialisable: {exc}") from None
    return out


def _children(item: object) -> Collection[object] | None:
    if isinstance(item, Mapping):
        return item.values()
    if isinstance(item, list | tuple):
        return item
    return None


def _too_many(field: str) -> InvalidInput:
    return InvalidInput(
        field,
        f"holds more than {MAX_JSON_VALUES} values as JSON, a shared container counted "
        "once for each place it appears (MAX_JSON_VALUES)",
    )


def _require_shape(value: object, field: str) -> None:
    """`InvalidInput` when containers nest deeper than `MAX_JSON_DEPTH`, or the
    value holds more than `MAX_JSON_VALUES` values as JSON. Walked with an
    explicit stack (no recursion, whatever the depth). A container met again
    (shared) is walked again only when met deeper than before, so each is walked
    at most `MAX_JSON_DEPTH` times; a cycle is infinitely deep. Every visit is a
    place the value appears in its JSON, so the visits bound the count from
    below; when a container is shared, the exact count is taken by
    `_expanded_size`, linear in the distinct containers."""
    stack: list[tuple[object, int]] = [(value, 1)]
    deepest: dict[int, int] = {}
    count = 1
    shared = False
    while stack:
        item, depth = stack.pop()
        children = _children(item)
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(
                field, f"nested more than {MAX_JSON_DEPTH} levels deep (MAX_JSON_DEPTH)"
            )
        seen = deepest.get(id(item))
        if seen is not None:
            shared = True
            if seen >= depth:
                continue
        deepest[id(item)] = depth
        if seen is None:  # a re-walk adds nothing here: `_expanded_size` counts it
            count += len(children) * (2 if isinstance(item, Mapping) else 1)
            if count > MAX_JSON_VALUES:
                raise _too_many(field)
        stack.extend((child, depth + 1) for child in children if _children(child) is not None)
    if shared and _expanded_size(value, MAX_JSON_VALUES) > MAX_JSON_VALUES:
        raise _too_many(field)


def _expanded_size(value: object, limit: int) -> int:
    """How many values `value`'s JSON holds (scalars, containers, mapping keys; a
    shared container once per place), or a number past `limit` as soon as that
    is certain. `value` has no cycle. Each distinct container is sized once,
    after its children (an explicit post-order stack)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[object, bool]] = [(value, False)]
    while stack:
        item, ready = stack.pop()
        children = _children(item)
        if children is None or (not ready and id(item) in sizes):
            continue
        if not ready:
            stack.append((item, True))
            stack.extend(
                (child, False)
                for child in children
                if _children(child) is not None and id(child) not in sizes
            )
            continue
        total = 1 + (len(children) if isinstance(item, Mapping) else 0)
        for child in children:
            total += sizes.get(id(child), 1)
        if total > limit:
            return total
        sizes[id(item)] = total
    return sizes.get(id(value), 1)


# A non-zero vector's norm must lie in [MIN_VECTOR_NORM, MAX_VECTOR_NORM]: the
# engines (pgvector, Redis, Qdrant, Milvus) square and sum components in float32,
# where a smaller norm underflows to 0 (1e-30 scored as a zero vector, 1e-42 as
# NaN) and a larger one overflows; within it every backend scores the direction.
MIN_VECTOR_NORM = 1e-15
MAX_VECTOR_NORM = 1e15


def require_vector_norm(vector: npt.NDArray[np.float32], field: str = "vector") -> None:
    """Raise `InvalidInput` when `vector` (finite) is neither zero nor of a norm
    from `MIN_VECTOR_NORM` to `MAX_VECTOR_NORM`."""
    v = vector.astype(np.float64)
    squared = float(v @ v)
    if squared != 0.0 and not MIN_VECTOR_NORM**2 <= squared <= MAX_VECTOR_NORM**2:
        raise InvalidInput(
            field,
            f"a non-zero vector needs a norm from {MIN_VECTOR_NORM:g} to {MAX_VECTOR_NORM:g}"
            f" (float32 engines cannot score it otherwise), got {math.sqrt(squared):.3g}",
        )


def as_vector(value: object, field: str = "vector") -> npt.NDArray[np.float32]:
    """A finite, non-empty, 1-D float32 vector, made read-only."""
    try:
        with np.errstate(over="ignore"):  # a float32 overflow is reported below
            arr = np.array(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, f"not a numeric vector: {exc}") from None
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InvalidInput(field, f"a non-empty 1-D vector is required, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise InvalidInput(field, "every component must be finite (no NaN or infinity)")
    arr.flags.writeable = False
    return arr

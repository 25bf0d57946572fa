"""Hypothesis strategies for events, lease payloads and cache entries.

Exported for users' own property tests as well as the contract suite:

- `adversarial_names()`: non-blank scope/id strings full of characters that
  break naive key layouts and query languages (``: * { } | @ - \\ % _ [ ] ?``,
  spaces, non-ASCII). Control characters and surrogates are left out (they
  are not valid in every storage engine's text type).
- `domains()`, `event_ids()`, `agents()`, `user_ids()`, `entity_ids()`,
  `entities()`: the same alphabet for each role.
- `recent_timestamps(max_age)`: timezone-aware UTC datetimes at millisecond
  precision, no older than `max_age` before the moment they are drawn
  (events are built relative to the real clock, like production events).
- `json_metadata()`: JSON-safe metadata mappings.
- `events(...)`: fully populated `Event` values.
- `lease_payloads()`, `cache_values()`: arbitrary bytes, the empty string and
  non-UTF-8 sequences included; `cache_keys()`: adversarial keys.

`LITERAL_PREFIX_CHARS` lists characters that pattern languages (glob, SQL
LIKE, regex) treat specially; prefix operations must treat them literally.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from agent_memory.domain.records import (
    Entity,
    EntitySource,
    Event,
    SummarySource,
    TimeBasis,
)

__all__ = [
    "ADVERSARIAL_SCOPE_PAIRS",
    "LITERAL_PREFIX_CHARS",
    "adversarial_names",
    "agents",
    "cache_keys",
    "cache_values",
    "domains",
    "entities",
    "entity_ids",
    "event_ids",
    "events",
    "json_metadata",
    "lease_payloads",
    "now_ms",
    "recent_timestamps",
    "user_ids",
]

#: Characters with a special meaning in glob, SQL LIKE, regex or key layouts.
LITERAL_PREFIX_CHARS: tuple[str, ...] = ("*", "?", "[", "%", "_", "\\", ":", "{", "|", ".")

#: Pairs of distinct scopes that naive escaping, key joining, collation or
#: pattern matching tends to confuse. Each pair must stay fully isolated.
ADVERSARIAL_SCOPE_PAIRS: tuple[tuple[str, str], ...] = (
    ("a}b", "a"),
    ("*", "x"),
    ("x|y", "x"),
    ("@d:{x}", "@d"),
    ("a:b", "a"),
    ("a b", "a"),
    ("a", "a "),
    ("A", "a"),
    ("café", "cafe\u0301"),
    ("%", "_"),
    ("[ab]", "a"),
    ("a\\", "a"),
    ("日本語", "日本"),
)

_SPECIALS = [*":*{}|@-\\%_[]?. ", "é", "ß", "日", "🙂", "\u00a0"]

_alphabet = st.characters(
    codec="utf-8",
    exclude_categories=("Cc", "Cs"),
)


def adversarial_names(max_size: int = 24) -> st.SearchStrategy[str]:
    """Non-blank strings mixing key/query metacharacters, spaces and non-ASCII."""
    special_runs = st.lists(st.sampled_from(_SPECIALS), min_size=1, max_size=6).map("".join)
    pieces = st.lists(
        st.one_of(st.text(_alphabet, min_size=1, max_size=8), special_runs),
        min_size=1,
        max_size=4,
    ).map("".join)
    fixed = st.sampled_from(
        ["*", "a}b", "x|y", "@d:{x}", "a b", "%", "_", "[", "\\", "日本語", "a:b:c", " a", "-"]
    )
    return st.one_of(fixed, pieces).map(lambda s: s[:max_size]).filter(lambda s: bool(s.strip()))


def domains() -> st.SearchStrategy[str]:
    """Event domains (scopes)."""
    return adversarial_names()


def event_ids() -> st.SearchStrategy[str]:
    """Event ids."""
    return adversarial_names(max_size=32)


def agents() -> st.SearchStrategy[str]:
    """Agent names."""
    return adversarial_names()


def user_ids() -> st.SearchStrategy[str]:
    """User ids (as carried by events for per-user erasure)."""
    return adversarial_names()


def entity_ids() -> st.SearchStrategy[str]:
    """Entity ids (and types)."""
    return adversarial_names()


def entities() -> st.SearchStrategy[Entity]:
    """Entities with adversarial types and ids."""
    return st.builds(Entity, type=entity_ids(), id=entity_ids())


def now_ms() -> datetime:
    """The current UTC time truncated to whole milliseconds."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def recent_timestamps(max_age: timedelta = timedelta(days=1)) -> st.SearchStrategy[datetime]:
    """UTC datetimes at ms precision within `max_age` before the moment of drawing."""
    max_ms = max(int(max_age.total_seconds() * 1000), 0)
    return st.integers(min_value=0, max_value=max_ms).map(
        lambda ms: now_ms() - timedelta(milliseconds=ms)
    )


_json_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(_alphabet, max_size=12),
)


def json_metadata() -> st.SearchStrategy[dict[str, Any]]:
    """JSON-safe metadata: nested lists and objects of scalars."""
    values = st.recursive(
        _json_scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.text(_alphabet, max_size=8), inner, max_size=3),
        ),
        max_leaves=6,
    )
    return st.dictionaries(st.text(_alphabet, max_size=10), values, max_size=4)


def events(
    *,
    domain: st.SearchStrategy[str] | None = None,
    ids: st.SearchStrategy[str] | None = None,
    occurred_at: st.SearchStrategy[datetime] | None = None,
    is_global: st.SearchStrategy[bool] | None = None,
    user_id: st.SearchStrategy[str | None] | None = None,
) -> st.SearchStrategy[Event]:
    """Fully populated events; pass strategies to pin domain, ids, times, globality."""
    times = occurred_at if occurred_at is not None else recent_timestamps()
    return st.builds(
        Event,
        id=ids if ids is not None else event_ids(),
        domain=domain if domain is not None else domains(),
        agent=agents(),
        action=st.text(_alphabet, max_size=20),
        outcome=st.sampled_from(["ok", "error", "timeout", "partial", ""]),
        summary=st.text(_alphabet, max_size=60),
        occurred_at=times,
        recorded_at=recent_timestamps(),
        origin_request_id=st.none() | adversarial_names(),
        summary_source=st.sampled_from(list(SummarySource)),
        fallback_reason=st.none() | st.text(_alphabet, max_size=20),
        time_basis=st.sampled_from(list(TimeBasis)),
        entities=st.lists(entities(), max_size=3, unique=True).map(tuple),
        entity_source=st.sampled_from(list(EntitySource)),
        user_id=user_id if user_id is not None else st.none() | user_ids(),
        importance=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
        metadata=json_metadata(),
        is_global=is_global if is_global is not None else st.booleans(),
    )


def lease_payloads(max_size: int = 64) -> st.SearchStrategy[bytes]:
    """Arbitrary lease payloads, b"" and non-UTF-8 bytes included."""
    return st.one_of(
        st.sampled_from([b"", b"\x00", b"\xff\xfe", b"\xc3\x28", b"\x80abc"]),
        st.binary(max_size=max_size),
    )


def cache_keys() -> st.SearchStrategy[str]:
    """Cache keys with key/query metacharacters and non-ASCII."""
    return adversarial_names(max_size=40)


def cache_values(max_size: int = 256) -> st.SearchStrategy[bytes]:
    """Arbitrary cache values, b"" and non-UTF-8 bytes included."""
    return lease_payloads(max_size=max_size)

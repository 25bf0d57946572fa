"""The PostgreSQL adapter's fast decoding path equals the validating constructors.

Rows of our own tables are decoded without re-running the domain validators
(`_codec.row_decoder`, and `_codec.rows_decoder` for many rows in one loop),
and `json` columns are parsed by `_codec.loads_json`.
These properties pin both to the domain: for generated records, the decoded
value compares equal to the one the public constructor builds, field by field
and type by type, both from rows shaped like psycopg's and after a real round
trip through PostgreSQL.
"""

from __future__ import annotations

import json
import struct
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from agent_memory.adapters.postgres import (
    PostgresDatabase,
    PostgresEventLog,
    PostgresMemoryStore,
    _codec,
)
from agent_memory.adapters.postgres._codec import (
    _JsonBinaryLoader,
    _JsonTextLoader,
    fast_decoding,
    loads_json,
    row_decoder,
    rows_decoder,
)
from agent_memory.adapters.postgres._vector import _VectorBinaryLoader, vectors_from_bytes
from agent_memory.adapters.postgres.events import (
    _COLUMNS,
    encode_entity,
    event_decoder,
    events_decoder,
)
from agent_memory.adapters.postgres.store import _RECORD_FIELDS, _hits, _record
from agent_memory.domain.records import (
    Entity,
    EntitySource,
    Event,
    EventWindow,
    MemoryRecord,
    ScoredRecord,
    SummarySource,
    TimeBasis,
)
from agent_memory.domain.validation import MAX_LIMIT
from postgres.conftest import SPACE, OpenDatabase

_chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
_text = st.text(_chars, max_size=20)
_ident = _text.filter(lambda s: bool(s.strip()))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_mapping = st.dictionaries(_text, _json, max_size=4)
_zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))]
)
_any_time = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=_zones
)
_NOW = datetime.now(UTC)
_OLDEST = _NOW - timedelta(days=29)
# Instants inside the 30-day retention for a day after import, each shown in one of
# `_zones`. (Bounds on the zone's wall clock, as `st.datetimes(timezones=...)` reads
# them, let a +05:30 draw sit 5.5 h before the edge: expired on arrival.)
_recent = st.builds(
    datetime.astimezone,
    st.datetimes(
        min_value=_OLDEST.replace(tzinfo=None),
        max_value=_NOW.replace(tzinfo=None),
        timezones=st.just(UTC),
    ),
    _zones,
)


_FIXTURE = [HealthCheck.function_scoped_fixture]  # each example uses its own ids


def _events(
    occurred: st.SearchStrategy[datetime], recorded: st.SearchStrategy[datetime] = _any_time
) -> st.SearchStrategy[Event]:
    return st.builds(
        Event,
        id=_ident,
        domain=_ident,
        agent=_ident,
        action=_text,
        outcome=_text,
        summary=_text,
        occurred_at=occurred,
        recorded_at=recorded,
        origin_request_id=st.none() | _ident,
        summary_source=st.sampled_from(list(SummarySource)),
        fallback_reason=st.none() | _text,
        time_basis=st.sampled_from(list(TimeBasis)),
        entities=st.lists(st.builds(Entity, type=_ident, id=_ident), max_size=3).map(tuple),
        entity_source=st.sampled_from(list(EntitySource)),
        user_id=st.none() | _ident,
        importance=st.floats(min_value=0.0, max_value=1.0),
        metadata=_mapping,
        is_global=st.booleans(),
    )


def _records() -> st.SearchStrategy[MemoryRecord]:
    return st.builds(
        MemoryRecord,
        id=_ident,
        owner=_ident,
        namespace=_ident,
        kind=_ident,
        content=_text,
        vector=st.lists(
            st.floats(min_value=-1e3, max_value=1e3, width=32), min_size=8, max_size=8
        ).map(lambda v: np.asarray(v, dtype=np.float32)),
        created_at=_any_time,
        updated_at=_any_time,
        importance=st.floats(min_value=0.0, max_value=1.0),
        attributes=_mapping,
        context=_text,
    )


def _same(decoded: Any, expected: Any) -> None:
    """Equal as values, and field by field of the same type (enums stay enums)."""
    assert type(decoded) is type(expected)
    assert decoded == expected
    for f in attrs.fields(type(expected)):
        got, want = getattr(decoded, f.name), getattr(expected, f.name)
        assert type(got) is type(want), f.name
        if isinstance(want, datetime):
            assert got.tzinfo is UTC, f.name


def _event_row(e: Event, zone: timezone) -> tuple[Any, ...]:
    """The row psycopg returns for `e` (timestamps in the session's zone)."""
    values = {
        **{name: getattr(e, name) for name in _COLUMNS},
        "occurred_at": e.occurred_at.astimezone(zone),
        "recorded_at": e.recorded_at.astimezone(zone),
        "summary_source": e.summary_source.value,
        "time_basis": e.time_basis.value,
        "entity_source": e.entity_source.value,
        "entities": [encode_entity(x) for x in e.entities],
        "metadata": json.loads(json.dumps(e.metadata)),
    }
    return tuple(values[name] for name in _COLUMNS)


@settings(max_examples=200)
@given(event=_events(_any_time), zone=_zones)
def test_decoded_event_rows_equal_the_validated_event(event: Event, zone: timezone) -> None:
    _same(event_decoder()(_event_row(event, zone)), event)


@settings(max_examples=50)
@given(events=st.lists(_events(_any_time), max_size=4), zone=_zones)
def test_events_decoded_in_one_loop_equal_the_validated_events(
    events: list[Event], zone: timezone
) -> None:
    """The window's decoder (`rows_decoder`: every row in one generated loop)."""
    decoded = events_decoder()([_event_row(e, zone) for e in events])
    assert len(decoded) == len(events)
    for got, want in zip(decoded, events, strict=True):
        _same(got, want)


@settings(max_examples=100)
@given(record=_records(), zone=_zones)
def test_decoded_record_rows_equal_the_validated_record(
    record: MemoryRecord, zone: timezone
) -> None:
    row = tuple(
        getattr(record, "vector" if name == "embedding" else name).astimezone(zone)
        if name in ("created_at", "updated_at")
        else getattr(record, name)
        for name in _RECORD_FIELDS
    )
    _same(_record(row), record)


def _wire(vector: np.ndarray[Any, Any]) -> bytes:
    """A vector in pgvector's binary format (what `VectorBytesLoader` returns)."""
    return struct.pack(">HH", vector.shape[0], 0) + vector.astype(">f4").tobytes()


@settings(max_examples=50)
@given(
    record=_records(),
    score=st.floats(min_value=-1.0, max_value=1.0),
    probe=st.booleans(),
)
def test_decoded_search_hits_equal_the_validated_hits(
    record: MemoryRecord, score: float, probe: bool
) -> None:
    """A search row holds its vector's bytes (and, from the probe statement,
    the scope's size last); the hit carries the vector converted with the others."""
    row = tuple(
        _wire(record.vector) if n == "vector" else getattr(record, n) for n in _RECORD_FIELDS
    ) + ((7,) if probe else ())
    vectors = vectors_from_bytes([row[6], row[6]], record.vector.shape[0])
    [hit] = _hits([row, row], vectors, [(1, score)], probe)
    _same(hit, ScoredRecord(record=record, score=score))
    assert not hit.record.vector.flags.writeable


@settings(max_examples=100)
@given(
    matrix=hnp.arrays(
        np.float32,
        st.tuples(st.integers(0, 6), st.integers(1, 20)),
        elements=st.floats(width=32, allow_nan=False),
    )
)
def test_vectors_from_bytes_equals_the_row_loader(matrix: np.ndarray[Any, Any]) -> None:
    """Converting the rows' bytes together gives, bit for bit, what the
    connection's `vector` loader gives row by row (read-only arrays)."""
    loader = _VectorBinaryLoader(0, None)
    raws = [_wire(row) for row in matrix]
    together = vectors_from_bytes(raws, matrix.shape[1])
    assert together.dtype == np.float32
    assert together.shape == matrix.shape
    assert not together.flags.writeable
    for raw, row in zip(raws, together, strict=True):
        alone = loader.load(raw)
        assert alone.dtype == row.dtype
        assert alone.tobytes() == row.tobytes()


def test_vectors_of_another_dimension_are_refused() -> None:
    raws = [_wire(np.ones(3, dtype=np.float32))] * 2
    assert vectors_from_bytes(raws, 3).tolist() == [[1.0] * 3] * 2
    for dimension in (2, 4, 5):
        with pytest.raises(ValueError, match=f"vectors of {dimension} dimensions expected"):
            vectors_from_bytes(raws, dimension)


def test_a_column_named_none_is_skipped() -> None:
    decode = rows_decoder(Entity, ("type", None, "id"))
    [entity] = decode([("service", "ignored", "svc-1")])
    _same(entity, Entity("service", "svc-1"))
    with pytest.raises(AssertionError, match="decoded fields"):
        row_decoder(Entity, ("type", None))


def test_the_hot_records_decode_through_a_twin_class() -> None:
    """Window and search rows are decoded with plain slot stores and one class
    change; a record class that gains a `__weakref__` slot (or a base class)
    would silently fall back to the slower descriptor path."""
    for cls in (Event, MemoryRecord, ScoredRecord):
        assert fast_decoding(cls), cls.__name__
    assert not fast_decoding(Entity)  # a weakref slot: decoded through descriptors


@given(events=st.lists(st.booleans(), max_size=3), limited=st.booleans())
def test_a_class_with_a_weakref_slot_decodes_through_its_descriptors(
    events: list[bool], limited: bool
) -> None:
    """The fallback path builds the same value as the constructor."""
    assert not fast_decoding(EventWindow)
    value = row_decoder(EventWindow, ("events", "limited"))((tuple(events), limited))
    _same(value, EventWindow(events=tuple(events), limited=limited))  # type: ignore[arg-type]


def test_a_field_order_missing_a_field_fails_loudly() -> None:
    with pytest.raises(AssertionError, match="decoded fields"):
        row_decoder(Entity, ("type",))
    with pytest.raises(AssertionError, match="decoded fields"):
        row_decoder(Entity, ("type", "id", "extra"))


@given(
    value=_json,
    before=st.sampled_from(["", " ", "\n\t "]),
    after=st.sampled_from(["", " ", "\r\n"]),
)
def test_loads_json_is_json_loads(value: Any, before: str, after: str) -> None:
    text = before + json.dumps(value) + after
    assert loads_json(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", " ", "{} x", "[1,", "nope"])
def test_loads_json_rejects_what_json_loads_rejects(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads_json(text)


@given(moment=_recent)
def test_recent_moments_are_instants_inside_the_retention(moment: datetime) -> None:
    """The round trips below need events that stay unexpired while the suite runs."""
    assert _OLDEST <= moment <= _NOW


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# Recorded recently: retention counts from `recorded_at`, so an event recorded
# years ago is (rightly) never returned.
@given(events=st.lists(_events(_recent, _recent), min_size=1, max_size=6))
async def test_events_read_back_from_postgres_equal_the_appended_ones(
    open_database: OpenDatabase, events: list[Event]
) -> None:
    """Round trip: every appended event comes back from `window` equal to itself."""
    db = await open_database()
    try:
        await _round_trip(PostgresEventLog(db), events)
    finally:
        await db.close()  # one pool per example would exhaust the server's connections


async def _round_trip(log: PostgresEventLog, events: list[Event]) -> None:
    run = uuid.uuid4().hex  # examples share the table: their own domain and ids
    batch = [
        attrs.evolve(e, domain=f"{run}-{e.domain}", id=f"{run}-{i}") for i, e in enumerate(events)
    ]
    await log.append(batch)
    since = _NOW - timedelta(days=31)
    for domain in {e.domain for e in batch}:
        # Examples share the table, and a global event shows in every domain: a
        # window of 100 could be filled by earlier examples' globals alone.
        window = await log.window(domain, since=since, limit=MAX_LIMIT)
        assert not window.limited
        got = {e.id: e for e in window.events if e.id.startswith(run)}
        expected = [e for e in batch if e.domain == domain or e.is_global]
        assert len(got) == len(expected)
        for e in expected:
            _same(got[e.id], e)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=st.lists(_records(), min_size=1, max_size=5))
async def test_records_read_back_from_postgres_equal_the_added_ones(
    open_database: OpenDatabase, records: list[MemoryRecord]
) -> None:
    db = await open_database()
    try:
        store = PostgresMemoryStore(db, SPACE)
        run = uuid.uuid4().hex
        batch = [attrs.evolve(r, id=f"{run}-{i}") for i, r in enumerate(records)]
        await store.add(batch)
        for r in batch:
            got = await store.get(r.owner, r.id)
            assert got is not None
            _same(got, r)
    finally:
        await db.close()  # one pool per example would exhaust the server's connections


@given(
    value=_json,
    before=st.sampled_from(["", " ", "\n\t "]),
    after=st.sampled_from(["", " ", "\r\n"]),
)
def test_the_json_column_loader_is_json_loads(value: Any, before: str, after: str) -> None:
    text = before + json.dumps(value) + after
    for loader in (_JsonTextLoader, _JsonBinaryLoader):
        assert loader(0).load(memoryview(text.encode())) == json.loads(text)


async def test_a_session_in_another_time_zone_still_reads_utc(
    open_database: OpenDatabase, postgres_url: str
) -> None:
    """`settings` may set another session time zone: records still hold UTC."""
    db = await open_database()
    event = Event(
        id="e1",
        domain="tz",
        agent="a",
        action="act",
        outcome="ok",
        summary="s",
        occurred_at=_NOW - timedelta(hours=1),
        recorded_at=_NOW,
        metadata={"k": [1, "v"]},
    )
    await PostgresEventLog(db).append([event])
    other = PostgresDatabase(postgres_url, schema=db.schema, settings={"timezone": "Asia/Kolkata"})
    log = PostgresEventLog(other, owns_database=True)
    try:
        window = await log.window("tz", since=_NOW - timedelta(days=1), limit=5)
    finally:
        await log.close()
    assert len(window.events) == 1
    _same(window.events[0], event)


def test_the_single_entity_cache_stays_bounded_and_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """Events with one entity take their 1-tuple from a bounded cache; once it
    is emptied (full), it refills with the same values."""
    monkeypatch.setattr(_codec, "_SINGLES_SIZE", 2)
    base = Event(
        id="e",
        domain="d",
        agent="a",
        action="act",
        outcome="ok",
        summary="s",
        occurred_at=_NOW,
        recorded_at=_NOW,
    )
    events = [
        attrs.evolve(base, id=f"e{i}", entities=(Entity("svc", f"s{i % 5}"),)) for i in range(12)
    ]
    decode = events_decoder()
    for _ in range(2):
        for got, want in zip(decode([_event_row(e, UTC) for e in events]), events, strict=True):
            _same(got, want)

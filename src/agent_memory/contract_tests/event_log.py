"""`EventLogContract`: the conformance suite every `EventLog` backend must pass.

Subclass it, declare `capabilities`, and override the `event_log` fixture (yield
an EMPTY log; its retention is read from `event_log.retention`; clean up after
the yield). With `Capabilities(reopen=True)` also override `reopen`: an async
fixture returning an async zero-argument callable that opens a SECOND handle on
the same data (the suite closes that handle itself)::

    class TestAcmeEventLog(EventLogContract):
        capabilities = Capabilities(ttl_resolution_ms=10)

        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def event_log(self):
            log = AcmeEventLog(...)
            yield log
            await log.close()

Events are built relative to the real clock (`datetime.now(UTC)`), at
millisecond precision; timestamps read back may differ by at most 1 ms. The
suite assumes a retention of at least a day (the default is 60 days).

Clause ids (each assertion message starts with one):

- EL-ORD-1  the window is newest first by `occurred_at`, not by arrival (nor
            by `recorded_at`): older events appended late land in their time slot.
- EL-ORD-2  events with equal `occurred_at` are ordered by id descending
            (code-point order).
- EL-ORD-3  for any set of events appended in any batches, the window equals
            the oracle: filter, sort by (occurred_at, id) desc, cut at limit.
- EL-IDEM-1 append is idempotent by (domain, id): an id twice in one batch is
            stored once, the count says 1, the first version wins.
- EL-IDEM-2 re-appending across batches stores nothing new (count 0) and never
            replaces the first stored version.
- EL-IDEM-3 idempotency is per domain: one id in two domains is two events.
- EL-IDEM-4 an empty batch stores nothing and returns 0.
- EL-LIM-1  `limited` is True exactly when more events matched than `limit`;
            a page of limit N holds the N newest.
- EL-SINCE-1 only events with occurred_at >= since are returned (inclusive).
- EL-SINCE-2 `since` and `until` are instants: given with a non-UTC offset they
            bound the window exactly as the same instants in UTC (never read
            as UTC wall-clock times).
- EL-UNTIL-1 `until` keeps only events with occurred_at < until (exclusive),
            applied before `limit`; `until=None` is no bound.
- EL-UNTIL-2 paging back with until=<oldest instant of the last page> never
            skips or repeats an event, ties across the page boundary included:
            `until` is a bare instant, so the next page starts strictly before
            it and the pager reads that instant whole (since=t,
            until=t + 1 microsecond), keeping from the page only the events
            newer than t (example and property).
- EL-UNTIL-3 global events obey `until`, with or without the entity filter.
- EL-UNTIL-4 `until` must be a timezone-aware datetime; anything else raises
            InvalidInput naming `until`.
- EL-UNTIL-5 `until <= since` is an empty window, never limited.
- EL-ENT-1  the entity filter keeps exactly the events carrying that (type, id)
            entity, among several; entity types/ids never match by pattern or
            by joining type and id.
- EL-GLOB-1 `is_global` events of any domain appear in every domain's window.
- EL-GLOB-2 global events take part in the same ordering and reserve no room:
            a page of limit N holds the N newest of domain + global events.
- EL-GLOB-3 the entity filter applies to global events too; non-global events
            of other domains never appear.
- EL-ISO-1  domains are isolated, whatever characters their names hold.
- EL-ISO-2  property: a window only ever holds its own domain's events and
            global ones, for adversarial domain names.
- EL-RET-1  events recorded longer than `retention` ago are never returned,
            whatever `since`.
- EL-RET-2  `purge_expired` deletes exactly the expired events (the count) and
            keeps the rest; a domain left without events is no longer listed
            by `domains` (it was until the purge).
- EL-RET-3  retention counts from ingestion: an event expires at
            `recorded_at + retention`; one recorded now with an old event time
            is returned (and survives the purge) until then.
- EL-RET-4  an event recorded longer than `retention` ago is never returned
            (nor counted in `limited`), however recent its event time, and is
            purged.
- EL-ERASE-1 `erase_user` deletes exactly the events carrying that user id, in
            every domain (the count); other users' events stay.
- EL-ERASE-2 user ids match whole: erasing `u1` leaves `u10`'s and `u`'s
            events, and `user_events("u1")` lists none of them.
- EL-ERASE-3 a forget racing appends (any interleaving of `erase_user` with
            appends of that user's and others' events) leaves nothing of the
            user after a quiet second `erase_user`: `user_events` is empty and
            no window of any domain shows an event carrying that user id;
            other users' events all stay (example and property).
- EL-ERASE-4 user ids are compared exactly in `erase_user` and `user_events`:
            ids one case fold, trim or Unicode normalisation apart (`u1`/`U1`,
            `u1 `, `\\u00e9`/`e\\u0301`, `\\ufb01le`/`file`) are other users,
            whose events stay.
- EL-USER-1 `user_events` returns exactly the events `erase_user` would delete
            (every domain, global ones included, user ids matched exactly),
            newest first by occurred_at, ties by (domain, id) descending,
            compared in order; `domains` lists every domain with a stored event.
- EL-USER-2 `user_events` includes expired events not yet purged (forgetting
            must see them), and `erase_user` deletes them.
- EL-USER-3 `user_events` returns all of the user's events, never a page
            (150 events in two domains all come back).
- EL-DOM-1  `domains` lists a domain whose only events are expired but not yet
            purged.
- EL-RT-1   a stored event reads back with every field equal (timestamps within
            1 ms, entities in order, enums as enums) and its metadata
            type-exactly at every depth: an int stays an int, a float a float,
            a bool a bool, also inside nested lists and objects (`1 == 1.0`
            in Python, so a plain `==` would not tell).
- EL-RT-2   property: the same for arbitrary adversarial events, metadata
            compared type-exactly too.
- EL-SCOPE-1 an empty or whitespace-only domain raises `ScopeRequired`.
- EL-INPUT-1 a non-positive limit, a naive `since`, a blank user id raise
            `InvalidInput`.
- EL-CLOSE-1 after close every operation raises `StoreClosed`.
- EL-INPUT-2 a window limit above MAX_LIMIT (or 2**63) raises InvalidInput naming
  `limit`; NUL in an event's text raises InvalidInput naming the field.
- EL-INPUT-3 an event whose id, domain, agent, origin request id, user id and
  entity type and id are each exactly MAX_ID_BYTES bytes of UTF-8 (incompressible,
  multi-byte) round-trips through append, window (by domain and by entity) and
  user_events; one byte over in any of them (or in the domain of `window`, the
  user id of `user_events`/`erase_user`) raises InvalidInput naming the field, its
  size and the maximum, and nothing is written.
- EL-CLOSE-2 close is idempotent.
- EL-CLOSE-3 an append racing close either completed before close returned
            (and is visible from another handle) or was rejected with
            `StoreClosed` (and is never persisted). Needs `reopen`.
- EL-SHARED-1 a second handle sees the first one's events and idempotency holds
            across handles. Needs `reopen`.
- EL-CANARY-1 the fixture yields an empty log: nothing written by an earlier
            test is visible.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.contract_tests._support import (
    Shown,
    clause,
    expect_closed,
    expect_raises,
    expect_too_long,
    json_diff,
    mark_async_tests,
    max_id,
    outcome,
    property_settings,
    race_close,
    require_reopen,
    same_instant,
)
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.contract_tests.event_strategies import (
    ADVERSARIAL_SCOPE_PAIRS,
    domains,
    event_ids,
    events,
    now_ms,
)
from agent_memory.domain.errors import InvalidInput, ScopeRequired, StoreClosed
from agent_memory.domain.records import (
    Entity,
    EntitySource,
    Event,
    EventWindow,
    SummarySource,
    TimeBasis,
)
from agent_memory.domain.validation import MAX_ID_BYTES, MAX_LIMIT
from agent_memory.ports.storage import EventLog

__all__ = ["EventLogContract"]

ReopenEventLog = Callable[[], Awaitable[EventLog]]

CANARY_DOMAIN = "agent-memory-contract-canary"
_CANARY_IDS = ("canary-local", "canary-global")
_PROPERTY = property_settings(max_examples=25, port="events")
# A handful: each example races appends against a forget on the real backend.
_RACE = property_settings(max_examples=8, port="events")
_BIG = 10_000


def _event(domain: str, id: str, at: datetime, **kw: Any) -> Event:
    values: dict[str, Any] = {
        "agent": "agent-1",
        "action": "act",
        "outcome": "ok",
        "summary": f"summary of {id}",
        "recorded_at": datetime.now(UTC),
    }
    values.update(kw)
    return Event(id=id, domain=domain, occurred_at=at, **values)


def _recorded(event: Event) -> Event:
    """The event as if recorded when it occurred."""
    return attrs.evolve(event, recorded_at=event.occurred_at)


def _ids(window: EventWindow) -> list[str]:
    return [e.id for e in window.events]


def _keys(window: EventWindow) -> list[tuple[str, str]]:
    return [(e.domain, e.id) for e in window.events]


def _event_diff(expected: Event, got: Event) -> list[str]:
    """Names and values of the fields that differ (timestamps within 1 ms;
    metadata type-exactly at every depth, `json_diff`: `1 == 1.0` in Python,
    but an int read back as a float is a difference)."""
    out: list[str] = []
    for f in attrs.fields(Event):
        a, b = getattr(expected, f.name), getattr(got, f.name)
        if f.name == "metadata":
            out += json_diff(a, b, "metadata")
            continue
        if isinstance(a, datetime):
            ok = isinstance(b, datetime) and same_instant(a, b)
        else:
            ok = type(a) is type(b) and a == b
        if not ok:
            out.append(f"{f.name}: expected {a!r}, got {b!r}")
    return out


async def _error_of(op: Awaitable[object]) -> BaseException | None:
    """The exception `op` raises, or None."""
    try:
        await op
    except Exception as exc:
        return exc
    return None


@mark_async_tests
class EventLogContract:
    """Conformance tests for `EventLog`; override `event_log` (and `reopen`)."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    @pytest.fixture  # sync: its failure shows in strict and auto mode alike
    def event_log(self) -> EventLog:
        """Override: yield an EMPTY EventLog, close/clean it after the yield."""
        pytest.fail("EventLogContract: override the `event_log` fixture in your subclass")

    @pytest.fixture
    def reopen(self) -> ReopenEventLog | None:
        """Override when `capabilities.reopen`: an async callable opening a second
        handle on the same data as `event_log`."""
        return None

    # -- helpers ---------------------------------------------------------------

    def _resolution(self) -> timedelta:
        return timedelta(milliseconds=self.capabilities.ttl_resolution_ms)

    @staticmethod
    async def _all(log: EventLog, domain: str, **kw: Any) -> EventWindow:
        since = kw.pop("since", datetime.now(UTC) - log.retention - timedelta(days=1))
        return await log.window(domain, since=since, limit=kw.pop("limit", _BIG), **kw)

    # -- canary (first) --------------------------------------------------------

    async def test_canary_write(self, event_log: EventLog) -> None:
        """Writes under a well-known domain for the last test to look for.

        When this fails, check that append + window work at all (earlier clauses).
        """
        now = now_ms()
        stored = await event_log.append(
            [
                _event(CANARY_DOMAIN, _CANARY_IDS[0], now),
                _event(CANARY_DOMAIN, _CANARY_IDS[1], now, is_global=True),
            ]
        )
        seen = _ids(await self._all(event_log, CANARY_DOMAIN))
        assert (stored, sorted(seen)) == (2, sorted(_CANARY_IDS)), clause(
            "EL-CANARY-1",
            "canary events are stored and visible",
            (stored, sorted(seen)),
            want=(2, sorted(_CANARY_IDS)),
        )

    # -- ordering --------------------------------------------------------------

    @pytest.mark.parametrize("arrival", ["newer-first", "interleaved-batches"])
    async def test_window_orders_by_event_time_not_arrival(
        self, event_log: EventLog, arrival: str
    ) -> None:
        """Older events appended after newer ones must land in their time slot.

        When this fails, check that the window sorts by `occurred_at` (then id desc),
        not by insertion order, stream ids or recorded_at.
        """
        d = "orders"
        base = now_ms() - timedelta(hours=1)
        evs = [_event(d, f"e{i}", base + timedelta(seconds=i)) for i in range(9)]
        if arrival == "newer-first":
            batches = [[evs[8], evs[7]], [evs[6]], [evs[5], evs[4], evs[3]], evs[:3]]
        else:
            batches = [[evs[0], evs[3], evs[6]], [evs[8], evs[1]], [evs[5], evs[2], evs[7]]]
            batches.append([evs[4]])
        # recorded_at follows arrival (as a recorder stamps it), so a window
        # ordered by recorded_at is caught as surely as one in insertion order
        arrived = base + timedelta(minutes=10)
        position = 0
        for batch in batches:
            stamped = []
            for e in batch:
                stamped.append(attrs.evolve(e, recorded_at=arrived + timedelta(seconds=position)))
                position += 1
            await event_log.append(stamped)
        got = _ids(await self._all(event_log, d))
        want = [f"e{i}" for i in reversed(range(9))]
        assert got == want, clause(
            "EL-ORD-1", "window is newest first by occurred_at, not arrival", got, want=want
        )
        page = _ids(await self._all(event_log, d, limit=3))
        assert page == want[:3], clause(
            "EL-ORD-1",
            "a limited page holds the newest by occurred_at, not the latest arrivals",
            page,
            want=want[:3],
        )

    async def test_window_ties_by_id_desc(self, event_log: EventLog) -> None:
        """Equal occurred_at: id descending in code-point order.

        When this fails, check the secondary sort key (id desc) and, in SQL, that
        the comparison uses a binary collation (COLLATE "C").
        """
        d = "ties"
        at = now_ms() - timedelta(minutes=5)
        ids = ["b", "a", "B", "é", "a2", "10", "9", "Z"]
        await event_log.append([_event(d, i, at) for i in ids])
        await event_log.append([_event(d, "newest", at + timedelta(seconds=1))])
        got = _ids(await self._all(event_log, d))
        want = ["newest", *sorted(ids, reverse=True)]
        assert got == want, clause(
            "EL-ORD-2", "ties by occurred_at are ordered by id desc", got, want=want
        )

    @_PROPERTY
    @given(
        evs=st.lists(
            events(ids=event_ids(), is_global=st.just(False)),
            min_size=1,
            max_size=12,
            unique_by=lambda e: e.id,
        ),
        cuts=st.lists(st.integers(0, 12), max_size=4),
        limit=st.integers(1, 15),
        seed=st.randoms(use_true_random=False),
    )
    async def test_window_matches_oracle_property(
        self,
        event_log: EventLog,
        evs: list[Event],
        cuts: list[int],
        limit: int,
        seed: Any,
    ) -> None:
        """Property: any events, shuffled, in any batches -> the oracle's window.

        When this fails, read the falsifying example: compare the ids' order with
        sorting by (occurred_at, id) desc and check `limited`.
        """
        d = f"oracle-{uuid.uuid4().hex}"
        mine = [attrs.evolve(e, domain=d) for e in evs]
        shuffled = list(mine)
        seed.shuffle(shuffled)
        bounds = sorted({0, len(shuffled), *(min(c, len(shuffled)) for c in cuts)})
        for lo, hi in itertools.pairwise(bounds):
            await event_log.append(shuffled[lo:hi])
        since = datetime.now(UTC) - min(timedelta(days=2), event_log.retention / 2)
        got = await event_log.window(d, since=since, limit=limit)
        matching = [e for e in mine if e.occurred_at >= since]
        ordered = sorted(matching, key=lambda e: (e.occurred_at, e.id), reverse=True)
        want = [e.id for e in ordered[:limit]]
        assert _ids(got) == want, clause(
            "EL-ORD-3",
            "window equals sort by (occurred_at, id) desc cut at limit",
            _ids(got),
            want=want,
        )
        assert got.limited == (len(matching) > limit), clause(
            "EL-ORD-3",
            f"limited is True exactly when {len(matching)} > {limit}",
            got.limited,
            want=len(matching) > limit,
        )

    # -- idempotency -----------------------------------------------------------

    async def test_same_id_twice_in_one_batch(self, event_log: EventLog) -> None:
        """A batch holding one id twice stores it once; the first version wins.

        When this fails, check de-duplication inside a batch (not only against
        stored events) and that the count is of events newly stored.
        """
        d = "idem-batch"
        at = now_ms() - timedelta(minutes=1)
        first = _event(d, "x", at, summary="first")
        second = _event(d, "x", at + timedelta(seconds=1), summary="second")
        stored = await event_log.append([first, second, _event(d, "y", at)])
        assert stored == 2, clause("EL-IDEM-1", "count of newly stored events is 2", stored, want=2)
        window = await self._all(event_log, d)
        assert sorted(_ids(window)) == ["x", "y"], clause(
            "EL-IDEM-1",
            "one event per (domain, id)",
            sorted(_ids(window)),
            want=["x", "y"],
            detail=_ids(window),
        )
        [kept] = [e for e in window.events if e.id == "x"]
        assert kept.summary == "first", clause(
            "EL-IDEM-1", "the first version in the batch wins", kept.summary, want="first"
        )

    async def test_same_id_across_batches(self, event_log: EventLog) -> None:
        """Re-appending stored ids stores nothing new and keeps the first version.

        When this fails, check that append never overwrites (use insert-if-absent,
        SETNX / ON CONFLICT DO NOTHING) and counts only new events.
        """
        d = "idem-across"
        at = now_ms() - timedelta(minutes=1)
        n = await event_log.append([_event(d, "x", at, summary="first")])
        assert n == 1, clause("EL-IDEM-2", "a new event counts 1", n, want=1)
        again = await event_log.append([_event(d, "x", at + timedelta(hours=-1), summary="2nd")])
        assert again == 0, clause("EL-IDEM-2", "re-appending a stored id returns 0", again, want=0)
        mixed = await event_log.append([_event(d, "x", at, summary="3rd"), _event(d, "y", at)])
        assert mixed == 1, clause(
            "EL-IDEM-2", "only the new id of a mixed batch counts", mixed, want=1
        )
        window = await self._all(event_log, d)
        summaries = {e.id: (e.summary, e.occurred_at) for e in window.events}
        assert (len(window.events), summaries["x"][0]) == (2, "first"), clause(
            "EL-IDEM-2",
            "the first stored version wins, stored once",
            (len(window.events), summaries["x"][0]),
            want=(2, "first"),
            detail=summaries,
        )
        assert same_instant(summaries["x"][1], at), clause(
            "EL-IDEM-2", "a re-append never moves the stored event's time", summaries["x"]
        )

    async def test_same_id_in_two_domains(self, event_log: EventLog) -> None:
        """Idempotency is by (domain, id): one id in two domains is two events.

        When this fails, check that the storage key includes the domain.
        """
        at = now_ms() - timedelta(minutes=1)
        stored = await event_log.append([_event("dom-a", "x", at), _event("dom-b", "x", at)])
        assert stored == 2, clause("EL-IDEM-3", "same id in two domains stores two", stored, want=2)
        for d in ("dom-a", "dom-b"):
            got = _keys(await self._all(event_log, d))
            assert got == [(d, "x")], clause(
                "EL-IDEM-3", f"domain {d!r} holds its own x", got, want=[(d, "x")]
            )

    async def test_empty_batch(self, event_log: EventLog) -> None:
        """An empty batch is a no-op returning 0.

        When this fails, check the early return for an empty batch (no empty
        pipeline/INSERT errors).
        """
        stored = await event_log.append([])
        assert stored == 0, clause("EL-IDEM-4", "an empty batch returns 0", stored, want=0)

    # -- limit, since, entity --------------------------------------------------

    @pytest.mark.parametrize("limit", [1, 4, 5, 6])
    async def test_limited_flag(self, event_log: EventLog, limit: int) -> None:
        """`limited` is True exactly when more events matched than `limit`.

        When this fails, check the over-fetch by one (limit + 1) used to compute
        `limited`, and that the page holds the newest events.
        """
        d = "limited"
        base = now_ms() - timedelta(minutes=10)
        await event_log.append([_event(d, f"e{i}", base + timedelta(seconds=i)) for i in range(5)])
        got = await event_log.window(d, since=base, limit=limit)
        want = [f"e{i}" for i in reversed(range(5))][:limit]
        assert _ids(got) == want, clause(
            "EL-LIM-1", f"a page of limit {limit} holds the {limit} newest", _ids(got), want=want
        )
        assert got.limited == (limit < 5), clause(
            "EL-LIM-1",
            f"limited is {limit < 5} for 5 matches and limit {limit}",
            got.limited,
            want=limit < 5,
        )

    async def test_since_filter(self, event_log: EventLog) -> None:
        """Only events at or after `since` (inclusive) are returned.

        When this fails, check the comparison (>=, not >) and the timestamp
        precision kept by the backend (milliseconds at least).
        """
        d = "since"
        base = now_ms() - timedelta(minutes=10)
        await event_log.append([_event(d, f"e{i}", base + timedelta(seconds=i)) for i in range(6)])
        since = base + timedelta(seconds=3)
        got = await event_log.window(d, since=since, limit=100)
        assert _ids(got) == ["e5", "e4", "e3"], clause(
            "EL-SINCE-1",
            "occurred_at >= since, boundary included",
            _ids(got),
            want=["e5", "e4", "e3"],
        )
        assert got.limited is False, clause(
            "EL-SINCE-1",
            "events before since do not make the window limited",
            got.limited,
            want=False,
        )

    async def test_since_and_until_with_an_offset(self, event_log: EventLog) -> None:
        """When this fails, `since`/`until` are stored or compared as wall-clock
        text or naive values without converting them to UTC first (e.g.
        `since.isoformat()` against UTC text, or `replace(tzinfo=UTC)`): an aware
        datetime is an instant, whatever its offset (`require_utc` converts it)."""
        d = "offset"
        base = now_ms() - timedelta(minutes=10)
        await event_log.append([_event(d, f"e{i}", base + timedelta(seconds=i)) for i in range(6)])
        east, west = timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-7))
        since = (base + timedelta(seconds=2)).astimezone(east)
        got = _ids(await event_log.window(d, since=since, limit=100))
        assert got == ["e5", "e4", "e3", "e2"], clause(
            "EL-SINCE-2",
            f"since={since.isoformat()} is the instant {base + timedelta(seconds=2)}",
            got,
            want=["e5", "e4", "e3", "e2"],
        )
        until = (base + timedelta(seconds=4)).astimezone(west)
        got = _ids(await event_log.window(d, since=since, until=until, limit=100))
        assert got == ["e3", "e2"], clause(
            "EL-SINCE-2",
            f"until={until.isoformat()} is the instant {base + timedelta(seconds=4)}",
            got,
            want=["e3", "e2"],
        )

    # -- until (paging back in event time) ---------------------------------------

    async def test_until_is_exclusive(self, event_log: EventLog) -> None:
        """`until` keeps only events with occurred_at < until (exclusive).

        When this fails, check the comparison (<, not <=), that the bound is an
        index range applied before `limit` (not a filter on a cut page), and
        that events at or after `until` never make the window `limited`.
        """
        d = "until"
        t = now_ms() - timedelta(minutes=10)
        ms = timedelta(milliseconds=1)
        await event_log.append(
            [
                _event(d, "before", t - ms),
                _event(d, "at", t),
                _event(d, "after", t + ms),
                _event(d, "older", t - timedelta(seconds=1)),
            ]
        )
        since = t - timedelta(minutes=1)
        got = await event_log.window(d, since=since, limit=100, until=t)
        assert _ids(got) == ["before", "older"], clause(
            "EL-UNTIL-1",
            "until is exclusive: occurred_at < until",
            _ids(got),
            want=["before", "older"],
        )
        got = await event_log.window(d, since=since, limit=1, until=t)
        assert (_ids(got), got.limited) == (["before"], True), clause(
            "EL-UNTIL-1",
            "limit cuts the bounded window (limited=True)",
            (_ids(got), got.limited),
            want=(["before"], True),
        )
        got = await event_log.window(d, since=since, limit=2, until=t)
        assert (_ids(got), got.limited) == (["before", "older"], False), clause(
            "EL-UNTIL-1",
            "events at or after until do not make it limited",
            (_ids(got), got.limited),
            want=(["before", "older"], False),
            detail=got.limited,
        )
        got = await event_log.window(d, since=since, limit=100, until=t + timedelta(microseconds=1))
        assert _ids(got) == ["at", "before", "older"], clause(
            "EL-UNTIL-1",
            "until = t + 1 microsecond includes the event at t",
            _ids(got),
            want=["at", "before", "older"],
        )
        got = await event_log.window(d, since=since, limit=100, until=None)
        assert _ids(got) == ["after", "at", "before", "older"], clause(
            "EL-UNTIL-1",
            "until=None means no upper bound",
            _ids(got),
            want=["after", "at", "before", "older"],
        )

    @staticmethod
    async def _page_back(log: EventLog, domain: str, since: datetime, page: int) -> list[Event]:
        """Read a domain's window page by page, back in event time, as the
        reflection job does: each page is bounded by `until=<oldest instant of
        the previous page>`; the page keeps its events newer than its oldest
        instant, and that instant is read whole (since=t, until=t + 1 µs)."""
        out: list[Event] = []
        until: datetime | None = None
        for _ in range(10_000):
            w = await log.window(domain, since=since, limit=page, until=until)
            if not w.limited:
                return out + list(w.events)
            assert w.events, clause("EL-UNTIL-2", "a limited page holds events", (until, w))
            oldest = w.events[-1].occurred_at
            out += [e for e in w.events if e.occurred_at > oldest]
            instant = await log.window(
                domain, since=oldest, until=oldest + timedelta(microseconds=1), limit=_BIG
            )
            out += instant.events
            until = oldest
        pytest.fail(clause("EL-UNTIL-2", "paging back ends", len(out)))

    async def test_until_pages_back_without_gaps_or_repeats(self, event_log: EventLog) -> None:
        """Paging back with until=<oldest seen> never skips or repeats an event,
        including events sharing one timestamp across a page boundary.

        Ties at the boundary: `until` is a bare exclusive instant, so the next
        page never repeats an event of the boundary instant t, and events at t
        that the limit cut off are left out of it as well: a pager reads t whole
        with since=t, until=t + 1 µs. When this fails, check that `until` is
        exclusive, `since` inclusive, that both are applied before `limit` (an
        index range), and that timestamps keep their precision in comparisons.
        """
        d, other = "paging", "paging-other"
        base = now_ms() - timedelta(hours=1)
        s = timedelta(seconds=1)
        await event_log.append(
            [
                _event(d, "a", base + 5 * s),
                *(_event(d, i, base + 4 * s) for i in ("b", "c", "d", "e")),
                _event(other, "f-global", base + 4 * s, is_global=True),
                _event(d, "g", base + 3 * s),
                _event(d, "h", base + 2 * s),
                _event(other, "i-global", base + 2 * s, is_global=True),
                _event(other, "j-foreign", base + 2 * s),
                _event(d, "k", base + s),
                _event(d, "l", base),
            ]
        )
        want = ["a", "f-global", "e", "d", "c", "b", "g", "i-global", "h", "k", "l"]
        since = base - s
        for page in (1, 2, 3, 4, 5):
            got = [e.id for e in await self._page_back(event_log, d, since, page)]
            assert got == want, clause(
                "EL-UNTIL-2",
                f"paging back by {page} yields every event once, in order",
                got,
                want=want,
            )
        # The bare pages (until = oldest of the previous page) never overlap.
        first = await event_log.window(d, since=since, limit=3)
        assert _ids(first) == ["a", "f-global", "e"], clause(
            "EL-UNTIL-2", "first page", _ids(first), want=["a", "f-global", "e"], detail=first
        )
        oldest = first.events[-1].occurred_at
        second = await event_log.window(d, since=since, limit=3, until=oldest)
        assert _ids(second) == ["g", "i-global", "h"], clause(
            "EL-UNTIL-2",
            "the next page starts strictly before the boundary instant",
            _ids(second),
            want=["g", "i-global", "h"],
        )

    @_PROPERTY
    @given(
        slots=st.lists(
            st.tuples(st.integers(0, 3), st.sampled_from(["own", "global", "foreign"])),
            min_size=1,
            max_size=14,
        ),
        page=st.integers(1, 6),
    )
    async def test_until_paging_property(
        self, event_log: EventLog, slots: list[tuple[int, str]], page: int
    ) -> None:
        """Property: for events crowded on a few instants (domain, global and
        foreign ones), paging back equals one unbounded read.

        When this fails, read the falsifying example: which instant was split
        across a page boundary, and what the bounded page returned.
        """
        d = f"paging-{uuid.uuid4().hex}"
        other = f"paging-other-{uuid.uuid4().hex}"
        base = now_ms() - timedelta(hours=2)
        evs = []
        for n, (slot, kind) in enumerate(slots):
            at = base + timedelta(seconds=slot)
            if kind == "own":
                evs.append(_event(d, f"e{n:02d}", at))
            else:
                evs.append(_event(other, f"e{n:02d}", at, is_global=kind == "global"))
        await event_log.append(evs)
        since = base - timedelta(seconds=1)
        whole = await event_log.window(d, since=since, limit=_BIG)
        got = await self._page_back(event_log, d, since, page)
        assert _keys(EventWindow(events=tuple(got), limited=False)) == _keys(whole), clause(
            "EL-UNTIL-2",
            f"paging back by {page} equals one unbounded read",
            _keys(EventWindow(events=tuple(got), limited=False)),
            want=_keys(whole),
            detail=_ids(whole),
        )

    async def test_until_applies_to_global_events(self, event_log: EventLog) -> None:
        """Global events obey `until` like the domain's own, entity filter included.

        When this fails, check that the bound is applied to the global branch
        (index, sorted set or query) as well as the domain's.
        """
        d, other = "until-g", "until-g-other"
        t = now_ms() - timedelta(minutes=10)
        ms = timedelta(milliseconds=1)
        pod = Entity("pod", "p1")
        await event_log.append(
            [
                _event(other, "g-at", t, is_global=True, entities=(pod,)),
                _event(other, "g-after", t + ms, is_global=True, entities=(pod,)),
                _event(other, "g-before", t - ms, is_global=True, entities=(pod,)),
                _event(d, "own-at", t, entities=(pod,)),
                _event(d, "own-before", t - 2 * ms, entities=(pod,)),
            ]
        )
        since = t - timedelta(minutes=1)
        for entity in (None, pod):
            got = await event_log.window(d, since=since, limit=100, until=t, entity=entity)
            assert _ids(got) == ["g-before", "own-before"], clause(
                "EL-UNTIL-3",
                f"global events obey until (entity={entity})",
                _ids(got),
                want=["g-before", "own-before"],
            )
            got = await event_log.window(d, since=since, limit=1, until=t, entity=entity)
            assert (_ids(got), got.limited) == (["g-before"], True), clause(
                "EL-UNTIL-3",
                "a bounded page of 1 holds the newest global before until",
                (_ids(got), got.limited),
                want=(["g-before"], True),
                detail=got,
            )

    @pytest.mark.parametrize(
        "value",
        [
            datetime(2026, 1, 1, 12, 0),
            "2026-01-01T12:00:00+00:00",
            1_767_268_800,
            datetime(2026, 1, 1, tzinfo=UTC).date(),
        ],
        ids=["naive", "string", "int", "date"],
    )
    async def test_until_must_be_aware_datetime(self, event_log: EventLog, value: object) -> None:
        """`until` must be a timezone-aware datetime: anything else raises
        InvalidInput naming `until`.

        When this fails, check `until` before any I/O (a naive datetime would be
        read in the server's or the process's time zone).
        """
        since = datetime.now(UTC) - timedelta(days=1)
        exc = await _error_of(event_log.window("d", since=since, limit=10, until=value))  # type: ignore[arg-type]
        assert isinstance(exc, InvalidInput), clause(
            "EL-UNTIL-4",
            f"until={value!r} raises InvalidInput",
            outcome(exc),
            want=Shown("InvalidInput"),
        )
        assert "until" in str(exc), clause(
            "EL-UNTIL-4",
            "the message names `until`",
            str(exc),
            want=Shown("a message containing 'until'"),
        )

    async def test_until_not_after_since_is_empty(self, event_log: EventLog) -> None:
        """`until <= since` is an empty window (not an error, never limited).

        When this fails, check that both bounds apply together (an empty range),
        not that one replaces the other.
        """
        d = "until-empty"
        t = now_ms() - timedelta(minutes=10)
        ms = timedelta(milliseconds=1)
        await event_log.append([_event(d, f"e{i}", t + (i - 2) * ms) for i in range(5)])
        for until in (t, t - ms, t - timedelta(days=1)):
            got = await event_log.window(d, since=t, limit=1, until=until)
            assert (_ids(got), got.limited) == ([], False), clause(
                "EL-UNTIL-5",
                f"until={until - t} from since is an empty window",
                (_ids(got), got.limited),
                want=([], False),
                detail=got,
            )

    @pytest.mark.parametrize(
        ("query", "want"),
        [
            (("pod", "web-1"), ["e2", "e1"]),
            (("svc", "api"), ["e2"]),
            (("pod", "web-*"), ["e3"]),
            (("pod:web", "1"), ["e4"]),
            (("pod", "web:1"), ["e5"]),
            (("svc", "web-1"), []),
        ],
        ids=["shared", "second-of-several", "glob-literal", "joined-type", "joined-id", "type"],
    )
    async def test_entity_filter(
        self, event_log: EventLog, query: tuple[str, str], want: list[str]
    ) -> None:
        """`entity=` keeps exactly the events carrying that (type, id).

        When this fails, check that the filter matches whole (type, id) pairs —
        no pattern matching, no joining type and id with a separator — and that
        an event with several entities is found by each of them.
        """
        d = "entities"
        base = now_ms() - timedelta(minutes=10)
        carried = {
            "e1": [Entity("pod", "web-1")],
            "e2": [Entity("svc", "api"), Entity("pod", "web-1")],
            "e3": [Entity("pod", "web-*")],
            "e4": [Entity("pod:web", "1")],
            "e5": [Entity("pod", "web:1")],
            "e6": [],
        }
        await event_log.append(
            [
                _event(d, i, base + timedelta(seconds=n), entities=ents)
                for n, (i, ents) in enumerate(carried.items())
            ]
        )
        got = await self._all(event_log, d, entity=Entity(*query))
        assert _ids(got) == want, clause(
            "EL-ENT-1",
            f"entity {query!r} selects exactly the events carrying it",
            _ids(got),
            want=want,
        )

    # -- global events ---------------------------------------------------------

    async def test_global_events_in_every_domain(self, event_log: EventLog) -> None:
        """A global event of one domain shows up in every domain's window.

        When this fails, check that the window query also reads the global index
        (or `is_global` rows of every domain).
        """
        at = now_ms() - timedelta(minutes=1)
        await event_log.append([_event("origin", "g", at, is_global=True)])
        for d in ("origin", "elsewhere", "*", "other domain"):
            got = _keys(await self._all(event_log, d))
            assert got == [("origin", "g")], clause(
                "EL-GLOB-1", f"domain {d!r} sees the global event", got, want=[("origin", "g")]
            )

    @pytest.mark.parametrize("limit", [1, 2, 3, 4])
    async def test_global_events_share_ordering(self, event_log: EventLog, limit: int) -> None:
        """Global events interleave by time and reserve no room on the page.

        When this fails, check that domain and global events are merged and sorted
        together before the limit is applied (not N of each, not globals first).
        """
        d = "merged"
        base = now_ms() - timedelta(minutes=10)
        await event_log.append(
            [
                _event(d, "d1", base + timedelta(seconds=1)),
                _event(d, "d3", base + timedelta(seconds=3)),
                _event("other", "o5", base + timedelta(seconds=5)),
            ]
        )
        await event_log.append(
            [
                _event("other", "g2", base + timedelta(seconds=2), is_global=True),
                _event("third", "g4", base + timedelta(seconds=4), is_global=True),
            ]
        )
        got = await event_log.window(d, since=base, limit=limit)
        want = ["g4", "d3", "g2", "d1"][:limit]
        assert _ids(got) == want, clause(
            "EL-GLOB-2",
            f"a page of {limit} holds the {limit} newest of domain+global",
            _ids(got),
            want=want,
        )
        assert got.limited == (limit < 4), clause(
            "EL-GLOB-2", "global events count towards `limited`", got.limited, want=limit < 4
        )

    async def test_entity_filter_applies_to_global_events(self, event_log: EventLog) -> None:
        """With `entity=`, only global events carrying the entity show up.

        When this fails, check that the entity filter is applied to the global
        part of the window too.
        """
        base = now_ms() - timedelta(minutes=10)
        pod = Entity("pod", "web-1")
        await event_log.append(
            [
                _event("x", "g-with", base + timedelta(seconds=1), is_global=True, entities=[pod]),
                _event("x", "g-without", base + timedelta(seconds=2), is_global=True),
                _event("x", "local-with", base + timedelta(seconds=3), entities=[pod]),
                _event("y", "own", base + timedelta(seconds=4), entities=[pod]),
            ]
        )
        got = _ids(await self._all(event_log, "y", entity=pod))
        assert got == ["own", "g-with"], clause(
            "EL-GLOB-3",
            "entity filter applies to globals; other domains' events never show",
            got,
            want=["own", "g-with"],
        )

    # -- isolation ---------------------------------------------------------------

    @pytest.mark.parametrize(
        ("first", "second"), ADVERSARIAL_SCOPE_PAIRS, ids=[repr(p) for p in ADVERSARIAL_SCOPE_PAIRS]
    )
    async def test_domains_isolated(self, event_log: EventLog, first: str, second: str) -> None:
        """Two domains whose names differ by metacharacters stay isolated.

        When this fails, check how the domain is put into keys or queries: escape
        or hash it; no glob/LIKE/regex; no case or Unicode folding.
        """
        at = now_ms() - timedelta(minutes=1)
        await event_log.append([_event(first, "in-first", at), _event(second, "in-second", at)])
        for d, own in ((first, "in-first"), (second, "in-second")):
            got = _keys(await self._all(event_log, d))
            assert got == [(d, own)], clause(
                "EL-ISO-1", f"domain {d!r} sees only its own events", got, want=[(d, own)]
            )
        erased = await event_log.erase_user("nobody")
        assert erased == 0, clause(
            "EL-ISO-1", "erasing an unknown user deletes nothing", erased, want=0
        )

    @_PROPERTY
    @given(pair=st.lists(domains(), min_size=2, max_size=2, unique=True), data=st.data())
    async def test_domains_isolated_property(
        self, event_log: EventLog, pair: list[str], data: st.DataObject
    ) -> None:
        """Property: a window holds only its domain's events and global ones.

        When this fails, read the falsifying domains: some character widens the
        query or collides keys.
        """
        tag = uuid.uuid4().hex
        for d in pair:
            batch = data.draw(
                st.lists(
                    events(domain=st.just(d), ids=st.just(tag) | event_ids()),
                    max_size=3,
                )
            )
            await event_log.append(batch)
        for d in pair:
            window = await self._all(event_log, d)
            strays = [(e.domain, e.id) for e in window.events if e.domain != d and not e.is_global]
            assert not strays, clause(
                "EL-ISO-2",
                f"window of {d!r} holds only its own and global events",
                strays,
                want=Shown("nothing"),
            )

    # -- retention -------------------------------------------------------------

    async def _retention_fixture(self, log: EventLog) -> datetime:
        now = now_ms()
        r = log.retention
        await log.append(
            [
                # Recorded when they occurred: retention counts from recorded_at.
                _recorded(_event("ret-a", "old-a", now - r - timedelta(hours=1))),
                _recorded(_event("ret-b", "old-g", now - r - timedelta(minutes=5), is_global=True)),
                _recorded(_event("ret-a", "kept-a", now - r + timedelta(hours=1))),
                _recorded(_event("ret-a", "fresh-a", now - timedelta(minutes=1))),
                _recorded(_event("ret-b", "fresh-b", now - timedelta(minutes=2))),
            ]
        )
        return now

    async def test_retention_hides_expired(self, event_log: EventLog) -> None:
        """Events older than retention are never returned, even with an old `since`.

        When this fails, check that the window keeps only events with
        recorded_at >= now - retention, global events included.
        """
        now = await self._retention_fixture(event_log)
        ancient = now - event_log.retention * 3
        got = _ids(await event_log.window("ret-a", since=ancient, limit=100))
        assert got == ["fresh-a", "kept-a"], clause(
            "EL-RET-1", "events past retention are never returned", got, want=["fresh-a", "kept-a"]
        )

    async def test_purge_expired(self, event_log: EventLog) -> None:
        """`purge_expired` deletes exactly the expired events and returns the count.

        When this fails, check the purge's cutoff (now - retention, by recorded_at)
        and that it covers every domain and the global index.
        """
        now = await self._retention_fixture(event_log)
        # a domain whose only event is expired: listed until the purge, not after
        r = event_log.retention
        await event_log.append(
            [_recorded(_event("ret-gone", "old-x", now - r - timedelta(hours=2)))]
        )
        listed = await event_log.domains()
        assert listed == ["ret-a", "ret-b", "ret-gone"], clause(
            "EL-RET-2",
            "before the purge, domains lists a domain whose only event is expired",
            listed,
            want=["ret-a", "ret-b", "ret-gone"],
        )
        purged = await event_log.purge_expired()
        assert purged == 3, clause(
            "EL-RET-2", "purge_expired deletes the 3 expired events", purged, want=3
        )
        listed = await event_log.domains()
        assert listed == ["ret-a", "ret-b"], clause(
            "EL-RET-2",
            "after the purge, domains no longer lists a domain left without events",
            listed,
            want=["ret-a", "ret-b"],
        )
        again = await event_log.purge_expired()
        assert again == 0, clause("EL-RET-2", "a second purge finds nothing", again, want=0)
        a = _ids(await self._all(event_log, "ret-a"))
        b = _ids(await self._all(event_log, "ret-b"))
        assert (a, b) == (["fresh-a", "kept-a"], ["fresh-b"]), clause(
            "EL-RET-2",
            "unexpired events survive the purge",
            (a, b),
            want=(["fresh-a", "kept-a"], ["fresh-b"]),
        )

    async def test_retention_counts_from_recording(self, event_log: EventLog) -> None:
        """Retention counts from ingestion (`recorded_at`), not event time: an
        event recorded now with an old event time is kept for the full
        retention, and an event recorded longer ago than retention is never
        returned, however recent its event time.

        When this fails, check that the window's retention floor and the purge
        read `recorded_at` (column, index or score) and that `since`/`until`
        alone bound `occurred_at`.
        """
        now = now_ms()
        r = event_log.retention
        old = now - r - timedelta(days=1)
        recent, stale = now - timedelta(minutes=1), now - r - timedelta(hours=1)
        await event_log.append(
            [
                _event("ret-in", "backfilled", old, recorded_at=now),
                _event("ret-in", "late-global", old, recorded_at=now, is_global=True),
                _event("ret-in", "near-expiry", old, recorded_at=now - r + timedelta(hours=1)),
                _event("ret-in", "recent-but-stale", recent, recorded_at=stale),
                _event("ret-in", "stale-global", recent, recorded_at=stale, is_global=True),
            ]
        )
        since = old - timedelta(days=1)
        got = _ids(await event_log.window("ret-in", since=since, limit=100))
        assert got == ["near-expiry", "late-global", "backfilled"], clause(
            "EL-RET-3",
            "kept until recorded_at + retention, whatever the event time",
            got,
            want=["near-expiry", "late-global", "backfilled"],
        )
        got = _ids(await event_log.window("ret-in", since=now - timedelta(hours=1), limit=100))
        assert got == [], clause(
            "EL-RET-4", "an event recorded past retention is never returned", got, want=[]
        )
        page = await event_log.window("ret-in", since=since, limit=3)
        assert page.limited is False, clause(
            "EL-RET-4", "expired events do not make the window limited", page.limited, want=False
        )

    async def test_purge_counts_from_recording(self, event_log: EventLog) -> None:
        """`purge_expired` deletes by `recorded_at + retention`, not event time.

        When this fails, check the purge's cutoff (now - retention, by
        recorded_at) and the index or score it reads.
        """
        now = now_ms()
        r = event_log.retention
        old = now - r - timedelta(days=1)
        recent, stale = now - timedelta(minutes=1), now - r - timedelta(hours=1)
        await event_log.append(
            [
                _event("ret-p", "backfilled", old, recorded_at=now),
                _event("ret-p", "late-global", old, recorded_at=now, is_global=True),
                _event("ret-p", "recent-but-stale", recent, recorded_at=stale),
                _event("ret-p", "stale-global", recent, recorded_at=stale, is_global=True),
                _event("ret-p", "stale-too", recent, recorded_at=stale),
            ]
        )
        purged = await event_log.purge_expired()
        assert purged == 3, clause(
            "EL-RET-4", "purge deletes the 3 events recorded past retention", purged, want=3
        )
        left = _ids(await event_log.window("ret-p", since=old - timedelta(days=1), limit=100))
        assert left == ["late-global", "backfilled"], clause(
            "EL-RET-3",
            "events recorded within retention survive the purge",
            left,
            want=["late-global", "backfilled"],
        )

    # -- erasure ---------------------------------------------------------------

    async def test_erase_user(self, event_log: EventLog) -> None:
        """`erase_user` removes exactly that user's events, in every domain.

        When this fails, check the user index (it must span domains and global
        events) and that user ids are matched exactly, not as patterns.
        """
        at = now_ms() - timedelta(minutes=5)
        await event_log.append(
            [
                _event("er-b", "b1", at - timedelta(minutes=1), user_id="u:1*", is_global=True),
                _event("er-a", "a1", at, user_id="u:1*"),
                _event("er-b", "b4", at, user_id="u:1*"),
                _event("er-a", "c1", at, user_id="u:1*"),
                _event("er-a", "a2", at, user_id="u:1"),
                _event("er-b", "b2", at, user_id="u:10"),
                _event("er-b", "b3", at),
            ]
        )
        seen = [(e.domain, e.id) for e in await event_log.user_events("u:1*")]
        # Newest first by occurred_at, ties by (domain, id) descending: compared
        # in order, never sorted first (an oldest-first list must fail); c1 > b4
        # as ids, so ties by id alone (domain left out) must fail too.
        want = [("er-b", "b4"), ("er-a", "c1"), ("er-a", "a1"), ("er-b", "b1")]
        assert seen == want, clause(
            "EL-USER-1",
            "user_events lists exactly the user's events, in every domain, newest first",
            seen,
            want=want,
        )
        domains = await event_log.domains()
        assert domains == ["er-a", "er-b"], clause(
            "EL-USER-1",
            "domains lists every domain with a stored event, sorted",
            domains,
            want=["er-a", "er-b"],
        )
        erased = await event_log.erase_user("u:1*")
        assert erased == 4, clause(
            "EL-ERASE-1", "erase_user returns the 4 erased events", erased, want=4
        )
        left = [(e.domain, e.id) for e in await event_log.user_events("u:1*")]
        assert left == [], clause(
            "EL-USER-1", "after erase_user, user_events finds nothing", left, want=[]
        )
        a = sorted(_ids(await self._all(event_log, "er-a")))
        b = sorted(_ids(await self._all(event_log, "er-b")))
        assert (a, b) == (["a2"], ["b2", "b3"]), clause(
            "EL-ERASE-1",
            "only the user's events are gone, in every domain",
            (a, b),
            want=(["a2"], ["b2", "b3"]),
        )
        again = await event_log.erase_user("u:1*")
        assert again == 0, clause("EL-ERASE-1", "a second erase finds nothing", again, want=0)
        stored = await event_log.append([_event("er-a", "a1", at, user_id="u:1*")])
        assert stored == 1, clause(
            "EL-ERASE-1", "an erased event id can be appended again", stored, want=1
        )

    async def test_erase_user_matches_whole_ids(self, event_log: EventLog) -> None:
        """User ids match whole, never as a prefix: erasing `u1` keeps `u10`'s
        and `u`'s events.

        When this fails, check the user lookup: an equality on the user id
        (column, key or digest), not LIKE/prefix/range matching.
        """
        at = now_ms() - timedelta(minutes=5)
        await event_log.append(
            [
                _event("px-a", "one", at, user_id="u1"),
                _event("px-a", "ten", at, user_id="u10"),
                _event("px-b", "ten-g", at, user_id="u10", is_global=True),
                _event("px-b", "short", at, user_id="u"),
            ]
        )
        seen = sorted(e.id for e in await event_log.user_events("u1"))
        assert seen == ["one"], clause(
            "EL-ERASE-2", "user_events('u1') lists u1's only", seen, want=["one"]
        )
        erased = await event_log.erase_user("u1")
        assert erased == 1, clause(
            "EL-ERASE-2", "erase_user('u1') erases u1's 1 event", erased, want=1
        )
        left = sorted(
            set(_keys(await self._all(event_log, "px-a")))
            | set(_keys(await self._all(event_log, "px-b")))
        )
        assert left == [("px-a", "ten"), ("px-b", "short"), ("px-b", "ten-g")], clause(
            "EL-ERASE-2",
            "u10's and u's events survive erasing u1",
            left,
            want=[("px-a", "ten"), ("px-b", "short"), ("px-b", "ten-g")],
        )
        ten = sorted(e.id for e in await event_log.user_events("u10"))
        assert ten == ["ten", "ten-g"], clause(
            "EL-ERASE-2", "u10's events are all kept", ten, want=["ten", "ten-g"]
        )

    async def test_erase_user_compares_ids_exactly(self, event_log: EventLog) -> None:
        """When this fails, user ids are case-folded, trimmed or Unicode-normalised
        in the user lookup (a case-insensitive collation, LOWER(), NFC/NFKC on the
        way in, `.strip()`): a forget would erase another user's events."""
        at = now_ms() - timedelta(minutes=5)
        pairs = [("u1", "U1"), ("u1", "u1 "), ("\u00e9", "e\u0301"), ("file", "\ufb01le")]
        users = list(dict.fromkeys(u for pair in pairs for u in pair))
        await event_log.append(
            [_event("xu", f"ev-{i}", at, user_id=u) for i, u in enumerate(users)]
        )
        for i, u in enumerate(users):
            seen = [e.id for e in await event_log.user_events(u)]
            assert seen == [f"ev-{i}"], clause(
                "EL-ERASE-4", f"user_events({u!r}) lists that user's event only", seen,
                want=[f"ev-{i}"],
            )  # fmt: skip
        for first, second in pairs:
            if first == "u1":
                continue  # erased last: it has two lookalikes
            erased = await event_log.erase_user(first)
            assert erased == 1, clause(
                "EL-ERASE-4", f"erase_user({first!r}) erases its 1 event", erased, want=1
            )
            kept = [e.user_id for e in await event_log.user_events(second)]
            assert kept == [second], clause(
                "EL-ERASE-4", f"erasing {first!r} keeps {second!r}'s event", kept, want=[second]
            )
        erased = await event_log.erase_user("u1")
        left = sorted(str(e.user_id) for e in (await self._all(event_log, "xu")).events)
        want = sorted(["U1", "u1 ", "e\u0301", "\ufb01le"])
        assert (erased, left) == (1, want), clause(
            "EL-ERASE-4",
            "erase_user('u1') erases u1's event only",
            (erased, left),
            want=(1, want),
        )

    async def test_user_events_include_expired_unpurged(self, event_log: EventLog) -> None:
        """`user_events` sees expired events not yet purged, `erase_user` deletes
        them, and `domains` lists a domain whose only events are expired.

        When this fails, check that the user lookup and `domains` do not apply
        the window's retention floor: only `purge_expired` removes expired events.
        """
        now = now_ms()
        stale = now - event_log.retention - timedelta(hours=1)
        await event_log.append(
            [
                _event("ux-live", "live", now - timedelta(minutes=1), user_id="ux"),
                _recorded(_event("ux-dead", "dead", stale, user_id="ux")),
                _recorded(_event("ux-dead", "dead-g", stale, user_id="ux", is_global=True)),
            ]
        )
        seen = sorted(e.id for e in await event_log.user_events("ux"))
        assert seen == ["dead", "dead-g", "live"], clause(
            "EL-USER-2",
            "user_events includes expired events not yet purged",
            seen,
            want=["dead", "dead-g", "live"],
        )
        domains = await event_log.domains()
        assert "ux-dead" in domains, clause(
            "EL-DOM-1", "domains lists a domain whose only events expired unpurged", domains
        )
        erased = await event_log.erase_user("ux")
        assert erased == 3, clause(
            "EL-USER-2", "erase_user deletes expired events too", erased, want=3
        )
        left = [(e.domain, e.id) for e in await event_log.user_events("ux")]
        assert left == [], clause(
            "EL-USER-2", "after erase_user nothing of the user is left", left, want=[]
        )
        purged = await event_log.purge_expired()
        assert purged == 0, clause(
            "EL-USER-2",
            "the erased expired events are gone, nothing is left to purge",
            purged,
            want=0,
        )

    async def test_user_events_returns_every_event(self, event_log: EventLog) -> None:
        """`user_events` returns all of the user's events, not a page.

        When this fails, check for a LIMIT, a COUNT or a page size on the user
        lookup: forgetting must see every event.
        """
        at = now_ms() - timedelta(minutes=5)
        batch = [
            _event(f"all-{i % 2}", f"e{i:03}", at - timedelta(seconds=i), user_id="many")
            for i in range(150)
        ]
        await event_log.append(batch)
        seen = await event_log.user_events("many")
        assert len(seen) == 150, clause(
            "EL-USER-3", "user_events returns all 150", len(seen), want=150
        )
        assert [e.id for e in seen] == [e.id for e in batch], clause(
            "EL-USER-3",
            "all of them, newest first",
            [e.id for e in seen][:5],
            want=[e.id for e in batch][:5],
        )
        erased = await event_log.erase_user("many")
        assert erased == 150, clause("EL-USER-3", "erase_user deletes all 150", erased, want=150)

    async def _race_erase(
        self, log: EventLog, user: str, other: str, schedule: list[tuple[int, list[Event]]]
    ) -> None:
        """Run `erase_user(user)` concurrently with one append per schedule entry
        (started after that many event-loop turns), then a quiet second erase,
        then check that nothing of `user` is left and `other`'s events all are."""

        async def later(turns: int, batch: list[Event]) -> None:
            for _ in range(turns):
                await asyncio.sleep(0)
            await log.append(batch)

        await asyncio.gather(log.erase_user(user), *(later(t, b) for t, b in schedule))
        await log.erase_user(user)
        left = [(e.domain, e.id) for e in await log.user_events(user)]
        assert left == [], clause(
            "EL-ERASE-3", "after a racing and a quiet forget, user_events is empty", left, want=[]
        )
        seen: set[tuple[str, str]] = set()
        for domain in await log.domains():
            window = await self._all(log, domain)
            seen |= {(e.domain, e.id) for e in window.events if e.user_id == user}
        shown = sorted(seen)
        assert shown == [], clause(
            "EL-ERASE-3",
            "after a racing and a quiet forget, no window shows the user",
            shown,
            want=[],
        )
        want = sorted({(e.domain, e.id) for _, b in schedule for e in b if e.user_id == other})
        kept = sorted((e.domain, e.id) for e in await log.user_events(other))
        assert kept == want, clause(
            "EL-ERASE-3", "another user's racing events all stay", kept, want=want
        )

    async def test_erase_racing_appends(self, event_log: EventLog) -> None:
        """A forget racing appends: after a quiet second forget nothing of the
        user is left (user_events empty, no window shows the user's events).

        When this fails, check that erase_user is atomic with respect to appends:
        an index read, then deletes, then dropping the whole index loses the
        entries of events appended in between (do it in one transaction or
        script per slot, or remove only the entries read).
        """
        tag = uuid.uuid4().hex[:8]
        user, other = f"racer-{tag}", f"bystander-{tag}"
        at = now_ms() - timedelta(minutes=5)
        await event_log.append(
            [
                _event("race-a", f"pre-{tag}", at, user_id=user),
                _event("race-b", f"pre-g-{tag}", at, user_id=user, is_global=True),
            ]
        )
        schedule = [
            (turns, [
                _event("race-a", f"t{turns}-{tag}", at, user_id=user),
                _event(f"race-{turns}", f"n{turns}-{tag}", at, user_id=user),
                _event("race-b", f"g{turns}-{tag}", at, user_id=user, is_global=True),
                _event("race-a", f"o{turns}-{tag}", at, user_id=other),
            ])
            for turns in range(6)
        ]  # fmt: skip
        await self._race_erase(event_log, user, other, schedule)

    @_RACE
    @given(
        plan=st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=8),
                st.lists(
                    st.tuples(
                        st.sampled_from(["ra-a", "ra-b", "ra-c"]),
                        st.booleans(),
                        st.booleans(),
                    ),
                    min_size=1,
                    max_size=3,
                ),
            ),
            min_size=1,
            max_size=4,
        )
    )
    async def test_erase_racing_appends_property(
        self, event_log: EventLog, plan: list[tuple[int, list[tuple[str, bool, bool]]]]
    ) -> None:
        """Property: for drawn append batches (domain, global or not, this user or
        another) started after drawn numbers of event-loop turns, a forget racing
        them and a quiet second forget leave nothing of the user.

        When this fails, read the schedule: which append landed during the first
        forget and lost its index entry (see `test_erase_racing_appends`).
        """
        tag = uuid.uuid4().hex[:8]
        user, other = f"racer-{tag}", f"bystander-{tag}"
        at = now_ms() - timedelta(minutes=5)
        await event_log.append([_event("ra-a", f"pre-{tag}", at, user_id=user)])
        schedule = [
            (
                turns,
                [
                    _event(d, f"e{n}-{j}-{tag}", at, user_id=user if mine else other, is_global=g)
                    for j, (d, g, mine) in enumerate(batch)
                ],
            )
            for n, (turns, batch) in enumerate(plan)
        ]
        await self._race_erase(event_log, user, other, schedule)

    # -- round trip ------------------------------------------------------------

    async def test_round_trip_preserves_fields(self, event_log: EventLog) -> None:
        """Every Event field reads back equal (timestamps within 1 ms; metadata
        type-exactly at every depth).

        When this fails, check the codec: enums, entity order, metadata nesting
        and number types (an int read back as a float, or 1.0 written as 1: a
        decoder with one number type, a JSON encoder dropping `.0`), None vs
        empty, UTC conversion and timestamp precision.
        """
        at = datetime.now(UTC) - timedelta(minutes=3)
        full = Event(
            id="full:1",
            domain="rt",
            agent="agent é",
            action="restart pod",
            outcome="error",
            summary="Restarted web-1 — failed 🙂",
            occurred_at=at,
            recorded_at=at + timedelta(seconds=2, microseconds=123),
            origin_request_id="req-7",
            summary_source=SummarySource.MODEL,
            fallback_reason="model timeout",
            time_basis=TimeBasis.STEP_START,
            entities=(Entity("pod", "web-1"), Entity("svc", "api"), Entity("ns", "a:b")),
            entity_source=EntitySource.MIXED,
            user_id="user|42",
            importance=0.25,
            metadata={
                "a": [1, 2.5, None, True, "ü"],
                "b": {"c": {"d": -3}},
                "": 0,
                # 1 == 1.0 == True in Python: each must read back as its own type.
                "n": [{"int": 1, "float": 1.0, "bool": True}, [0, 0.0, False, -0.5, 2**53]],
            },
        )
        minimal = _event("rt", "minimal", at - timedelta(seconds=1), summary="")
        glob = _event("rt-other", "glob", at - timedelta(seconds=2), is_global=True)
        await event_log.append([full, minimal, glob])
        got = {e.id: e for e in (await self._all(event_log, "rt")).events}
        for want in (full, minimal, glob):
            assert want.id in got, clause("EL-RT-1", f"event {want.id!r} reads back", list(got))
            diff = _event_diff(want, got[want.id])
            assert not diff, clause(
                "EL-RT-1",
                f"event {want.id!r} fields survive (metadata type-exactly at every depth)",
                diff,
                want=Shown("no difference"),
            )

    @_PROPERTY
    @given(evs=st.lists(events(), min_size=1, max_size=5, unique_by=lambda e: (e.domain, e.id)))
    async def test_round_trip_property(self, event_log: EventLog, evs: list[Event]) -> None:
        """Property: arbitrary adversarial events read back equal.

        When this fails, read the falsifying event: which field or character does
        the codec lose?
        """
        tag = uuid.uuid4().hex
        mine = [attrs.evolve(e, id=f"{e.id}{tag}") for e in evs]
        stored = await event_log.append(mine)
        assert stored == len(mine), clause(
            "EL-RT-2", "every new event is stored", stored, want=len(mine)
        )
        for want in mine:
            window = await self._all(event_log, want.domain)
            match = [e for e in window.events if e.id == want.id and e.domain == want.domain]
            assert len(match) == 1, clause(
                "EL-RT-2", f"event {want.id!r} reads back once", len(match), want=1, detail=match
            )
            diff = _event_diff(want, match[0])
            assert not diff, clause(
                "EL-RT-2",
                "every field survives the round trip (metadata type-exactly at every depth)",
                diff,
                want=Shown("no difference"),
            )

    # -- bad input -------------------------------------------------------------

    @pytest.mark.parametrize("blank", ["", " ", "\t\n"], ids=["empty", "space", "whitespace"])
    async def test_blank_domain(self, event_log: EventLog, blank: str) -> None:
        """An empty or whitespace-only domain raises `ScopeRequired`.

        When this fails, check that `window` validates the domain first
        (`domain.validation.require_scope`).
        """
        await expect_raises(
            "EL-SCOPE-1",
            f"window({blank!r}) raises ScopeRequired",
            ScopeRequired,
            event_log.window(blank, since=datetime.now(UTC), limit=10),
        )

    @pytest.mark.parametrize("case", ["limit-0", "limit-negative", "naive-since", "blank-user"])
    async def test_invalid_input(self, event_log: EventLog, case: str) -> None:
        """A non-positive limit, a naive `since`, a blank user id raise `InvalidInput`.

        When this fails, check the argument validation at the top of the operation.
        """
        now = datetime.now(UTC)
        op: Awaitable[object]
        if case == "limit-0":
            op = event_log.window("d", since=now, limit=0)
        elif case == "limit-negative":
            op = event_log.window("d", since=now, limit=-1)
        elif case == "naive-since":
            op = event_log.window("d", since=now.replace(tzinfo=None), limit=10)
        else:
            op = event_log.erase_user("  ")
        await expect_raises("EL-INPUT-1", f"{case} raises InvalidInput", InvalidInput, op)

    async def test_limit_bound_and_nul(self, event_log: EventLog) -> None:
        """When this fails, a huge limit reaches the engine (OverflowError, a server
        error) or NUL text is left to the backend: check both before any I/O."""
        now = datetime.now(UTC)
        for limit in (MAX_LIMIT + 1, 2**63):
            exc = await _error_of(event_log.window("d", since=now, limit=limit))
            rule = f"window(limit={limit}) raises InvalidInput"
            assert isinstance(exc, InvalidInput), clause(
                "EL-INPUT-2", rule, outcome(exc), want=Shown("InvalidInput")
            )
            assert "limit" in str(exc), clause(
                "EL-INPUT-2",
                "the message names `limit`",
                str(exc),
                want=Shown("a message containing 'limit'"),
            )
        await event_log.window("d", since=now, limit=MAX_LIMIT)
        event = Event(id="nul", domain="d", agent="a", action="x", outcome="ok",
                      summary="a\x00b", occurred_at=now, recorded_at=now)  # fmt: skip
        exc = await _error_of(event_log.append([event]))
        rule = "NUL in a summary raises InvalidInput"
        assert isinstance(exc, InvalidInput), clause(
            "EL-INPUT-2", rule, outcome(exc), want=Shown("InvalidInput")
        )
        assert "summary" in str(exc), clause(
            "EL-INPUT-2",
            "the message names summary",
            str(exc),
            want=Shown("a message containing 'summary'"),
        )

    async def test_ids_at_and_over_the_maximum(self, event_log: EventLog) -> None:
        """When this fails at the maximum, the backend cannot hold MAX_ID_BYTES in
        every id field of one event (a key or index entry over the engine's limit);
        over it, the size is not checked before I/O (`check_events`, `require_id`)."""
        now = now_ms()
        ids = {f: max_id(f"el-{f}") for f in ("id", "domain", "agent", "req", "user", "et", "ei")}
        entity = Entity(type=ids["et"], id=ids["ei"])
        event = _event(ids["domain"], ids["id"], now, agent=ids["agent"], entities=(entity,),
                       origin_request_id=ids["req"], user_id=ids["user"])  # fmt: skip
        n = await event_log.append([event])
        assert n == 1, clause("EL-INPUT-3", "append stores it", n, want=1)
        got = (await self._all(event_log, ids["domain"])).events
        diff = _event_diff(event, got[0]) if len(got) == 1 else got
        assert not diff, clause(
            "EL-INPUT-3", "window returns it unchanged", diff, want=Shown("nothing")
        )
        by_entity = await self._all(event_log, ids["domain"], entity=entity)
        assert _ids(by_entity) == [ids["id"]], clause(
            "EL-INPUT-3", "window(entity=...)", _ids(by_entity), want=[ids["id"]], detail=by_entity
        )
        mine = [e.id for e in await event_log.user_events(ids["user"])]
        assert mine == [ids["id"]], clause(
            "EL-INPUT-3", "user_events finds it", mine, want=[ids["id"]]
        )
        long = max_id("el-over") + "x"
        assert len(long.encode()) == MAX_ID_BYTES + 1
        good = _event("over", "ok", now)
        with attrs.validators.disabled():
            bad = {
                "event.id": attrs.evolve(good, id=long),
                "event.domain": attrs.evolve(good, domain=long),
                "event.agent": attrs.evolve(good, agent=long),
                "event.user_id": attrs.evolve(good, user_id=long),
                "event.origin_request_id": attrs.evolve(good, origin_request_id=long),
                "entity.type": attrs.evolve(good, entities=(Entity(type=long, id="e"),)),
                "entity.id": attrs.evolve(good, entities=(Entity(type="t", id=long),)),
            }
        for field, ev in bad.items():
            await expect_too_long("EL-INPUT-3", field, event_log.append([good, ev]))
        await expect_too_long("EL-INPUT-3", "domain", event_log.window(long, since=now, limit=5))
        await expect_too_long("EL-INPUT-3", "user_id", event_log.user_events(long))
        await expect_too_long("EL-INPUT-3", "user_id", event_log.erase_user(long))
        left = _ids(await self._all(event_log, "over"))
        assert left == [], clause(
            "EL-INPUT-3", "a batch with an over-long id writes nothing", left, want=[]
        )

    # -- lifecycle ---------------------------------------------------------------

    async def test_operations_after_close(self, event_log: EventLog) -> None:
        """After close, every operation raises `StoreClosed`.

        When this fails, check that every method goes through the lifecycle guard
        (`async with self._life.op():`).
        """
        at = now_ms()
        await event_log.append([_event("closing", "before", at)])
        await event_log.close()
        await expect_closed(
            "EL-CLOSE-1",
            {
                "append": lambda: event_log.append([_event("closing", "after", at)]),
                "window": lambda: event_log.window("closing", since=at, limit=5),
                "erase_user": lambda: event_log.erase_user("u"),
                "user_events": lambda: event_log.user_events("u"),
                "domains": lambda: event_log.domains(),
                "purge_expired": lambda: event_log.purge_expired(),
                "ping": lambda: event_log.ping(),
            },
        )

    async def test_close_is_idempotent(self, event_log: EventLog) -> None:
        """Closing twice is fine; operations still raise `StoreClosed`.

        When this fails, check that a second close does not release resources twice
        or raise.
        """
        await event_log.close()
        try:
            await event_log.close()
        except Exception as exc:
            pytest.fail(clause("EL-CLOSE-2", "a second close does not raise", repr(exc)))
        await expect_raises(
            "EL-CLOSE-2",
            "ping after a double close raises StoreClosed",
            StoreClosed,
            event_log.ping(),
        )

    async def test_append_racing_close(
        self, event_log: EventLog, reopen: ReopenEventLog | None
    ) -> None:
        """Appends racing close: completed before close returned, or rejected.

        When this fails, check that close waits for in-flight operations before
        releasing resources and that no write is queued to run after close.
        """
        opener = require_reopen(self.capabilities, "EL-CLOSE-3", reopen)
        d = "race"
        at = now_ms() - timedelta(minutes=1)
        evs = [_event(d, f"r{i:02d}", at + timedelta(milliseconds=i)) for i in range(20)]
        appends = [(e.id, partial(event_log.append, [e])) for e in evs]
        results = await race_close("EL-CLOSE-3", "append", appends, event_log.close)
        done = sorted(e.id for e, r in zip(evs, results, strict=True) if isinstance(r, int))
        other = await opener()
        try:
            for _ in range(2):
                seen = sorted(_ids(await self._all(other, d)))
                assert seen == done, clause(
                    "EL-CLOSE-3",
                    "exactly the appends that completed before close are persisted",
                    seen,
                    want=done,
                )
                await asyncio.sleep(self._resolution().total_seconds() * 2)
        finally:
            await other.close()

    async def test_second_handle_shares_events(
        self, event_log: EventLog, reopen: ReopenEventLog | None
    ) -> None:
        """A second handle sees the events; idempotency holds across handles.

        When this fails, check that handles share the same storage (no per-handle
        state such as an in-process de-duplication set).
        """
        opener = require_reopen(self.capabilities, "EL-SHARED-1", reopen)
        at = now_ms() - timedelta(minutes=1)
        await event_log.append([_event("shared", "s1", at, summary="first")])
        other = await opener()
        try:
            again = await other.append([_event("shared", "s1", at, summary="second")])
            assert again == 0, clause(
                "EL-SHARED-1", "idempotency holds across handles", again, want=0
            )
            got = [(e.id, e.summary) for e in (await self._all(other, "shared")).events]
            assert got == [("s1", "first")], clause(
                "EL-SHARED-1",
                "the second handle sees the first version",
                got,
                want=[("s1", "first")],
            )
        finally:
            await other.close()

    # -- canary (last) ---------------------------------------------------------

    async def test_canary_fixture_is_empty(self, event_log: EventLog) -> None:
        """The fixture must yield an EMPTY log: the first test's canary is gone.

        When this fails, your `event_log` fixture leaks data between tests: use a
        fresh key prefix/schema per test, or delete everything after the yield.
        """
        for d in (CANARY_DOMAIN, "any-domain"):
            got = _keys(await self._all(event_log, d))
            assert got == [], clause("EL-CANARY-1", "a fresh fixture holds no events", got, want=[])

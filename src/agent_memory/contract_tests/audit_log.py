"""`AuditLogContract`: the conformance suite every `AuditLog` backend must pass.

Subclass it and override the `audit_log` fixture (yield an EMPTY audit log;
clean up after the yield). Override `neighbours` to return the `EventLog` and
`MemoryStore` of the SAME deployment (an `AuditNeighbours`), so the suite can
check that erasing a user leaves the audit trail alone; without it those
clauses skip. With `Capabilities(reopen=True)` also override `reopen` (an async
zero-argument callable opening a second handle on the same data)::

    class TestAcmeAuditLog(AuditLogContract):
        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def audit_log(self):
            log = AcmeAuditLog(...)
            yield log
            await log.close()

Clause ids (each assertion message starts with one):

- AL-WRITE-1  append then list returns the entry field for field: `at` to the
              microsecond in UTC, counts exact, subject None or an id, tenant ""
              or a name, ids with any characters (`: * { } | @`, non-ASCII, the
              maximum size).
- AL-WRITE-2  append is idempotent by id: a second append of the id returns
              False and the first entry stays, once and unchanged.
- AL-ORDER-1  list is newest `at` first, ties by id descending in code point
              order (property: any entries agree with the oracle's order).
- AL-PAGE-1   paging with any limit returns every entry exactly once, in list
              order; the last page's `next_cursor` is None.
- AL-PAGE-2   entries appended while a reader pages are never returned twice,
              and every entry that existed when paging began is returned.
- AL-FILTER-1 `tenant` keeps one tenant's entries ("" the library's own, None
              every tenant), compared exactly (no case fold, trim or Unicode
              normalisation); `since` keeps `at >= since`, inclusive, to the
              microsecond.
- AL-KEEP-1   entries survive `EventLog.erase_user` and `MemoryStore.delete_scope`
              of their subject (needs `neighbours`), and never expire.
- AL-CONTENT-1 an entry written for a real forget (events and records of
              generated text erased through the neighbours) holds none of the
              forgotten text when listed back (needs `neighbours`).
- AL-INPUT-1  bad input raises `InvalidInput` naming the argument: a
              non-entry, a limit out of [1, MAX_LIMIT] or a bool, a cursor not
              returned by list, a naive `since`, a tenant with NUL; an entry with
              an unknown operation, a negative or bool count, a count name that
              is not [a-z0-9_] or a blank caller cannot be built.
- AL-CLOSE-1  after close every operation raises `StoreClosed`; close is idempotent.
- AL-SHARED-1 a second handle sees the first one's entries. Needs `reopen`.
- AL-CANARY-1 the fixture yields an empty audit log: nothing written by an
              earlier test is visible.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import numpy as np
import pytest
from attrs import frozen
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.contract_tests._support import (
    clause,
    expect_closed,
    expect_raises,
    mark_async_tests,
    max_id,
    property_settings,
    require_reopen,
)
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.domain.audit import AuditEntry, audit_sort_key
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Event, MemoryRecord
from agent_memory.domain.validation import MAX_LIMIT
from agent_memory.ports.storage import AuditLog, EventLog, MemoryStore

__all__ = ["AuditLogContract", "AuditNeighbours"]

ReopenAudit = Callable[[], Awaitable[AuditLog]]

CANARY_ID = "agent-memory-contract-canary"
_PROPERTY = property_settings(max_examples=20, port="cache")
_BASE = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
_IDS = ["a", "b", "ab", "B", "é", "\uffef", "\U00010000", "k:*{}|@ x", "ß/t/u/"]


@frozen
class AuditNeighbours:
    """The other ports of the audit log's deployment."""

    events: EventLog
    store: MemoryStore


def entry(
    id: str | None = None,
    *,
    at: datetime = _BASE,
    operation: str = "forget_user",
    tenant: str = "",
    subject: str | None = "user-1",
    counts: dict[str, int] | None = None,
    caller: str = "library",
) -> AuditEntry:
    """An entry with defaults (a fresh id unless given)."""
    return AuditEntry(
        id=id if id is not None else uuid.uuid4().hex,
        at=at,
        operation=operation,
        tenant=tenant,
        subject=subject,
        counts={"facts": 1} if counts is None else counts,
        caller=caller,
    )


async def _all(log: AuditLog, limit: int, **filters: Any) -> list[AuditEntry]:
    out: list[AuditEntry] = []
    cursor: str | None = None
    for _ in range(10_000):
        page = await log.list(limit=limit, cursor=cursor, **filters)
        out.extend(page.entries)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor
    pytest.fail(clause("AL-PAGE-1", "paging ends (next_cursor None on the last page)"))


def _ids(entries: Sequence[AuditEntry]) -> list[str]:
    return [e.id for e in entries]


def _oracle(entries: list[AuditEntry]) -> list[str]:
    return [e.id for e in sorted(entries, key=audit_sort_key, reverse=True)]


@mark_async_tests
class AuditLogContract:
    """Conformance tests for `AuditLog`; override `audit_log` (and `neighbours`, `reopen`)."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    @pytest.fixture  # sync: its failure shows in strict and auto mode alike
    def audit_log(self) -> AuditLog:
        """Override: yield an EMPTY AuditLog, close/clean it after the yield."""
        pytest.fail("AuditLogContract: override the `audit_log` fixture in your subclass")

    @pytest.fixture
    def neighbours(self) -> AuditNeighbours | None:
        """Override: the EventLog and MemoryStore of the audit log's deployment."""
        return None

    @pytest.fixture
    def reopen(self) -> ReopenAudit | None:
        """Override when `capabilities.reopen`: a second handle on the same data."""
        return None

    # -- canary (first) --------------------------------------------------------

    async def test_canary_write(self, audit_log: AuditLog) -> None:
        """Writes a well-known entry for the last test to look for.

        When this fails, check that append/list work at all (AL-WRITE-1).
        """
        await audit_log.append(entry(CANARY_ID))
        got = _ids(await _all(audit_log, 50))
        assert got == [CANARY_ID], clause(
            "AL-CANARY-1", "the canary entry is stored", got, want=[CANARY_ID]
        )

    # -- write -----------------------------------------------------------------

    async def test_round_trip(self, audit_log: AuditLog) -> None:
        """Each entry reads back field for field.

        When this fails, check the codec: `at` in UTC to the microsecond, the
        counts mapping, a None subject, an empty tenant, ids of any characters.
        """
        long_id = max_id("audit-id")
        wanted = [
            entry("plain", at=_BASE),
            entry(
                long_id,
                at=_BASE + timedelta(microseconds=1),
                operation="import_replace",
                tenant="acme",
                subject=None,
                counts={"records": 0, "events": 12, "cache_entries": 2**40},
                caller="key:*{}|@ é",
            ),
            entry(
                "k:*{}|@ é\U00010000",
                at=datetime(1970, 1, 1, tzinfo=UTC),
                operation="forget_fact",
                tenant="t.0-_",
                subject=max_id("audit-subject"),
                counts={},
                caller=max_id("audit-caller"),
            ),
            entry("late", at=datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ]
        for item in wanted:
            added = await audit_log.append(item)
            assert added is True, clause("AL-WRITE-1", "append of a new id returns True", added)
        got = {e.id: e for e in await _all(audit_log, 50)}
        for item in wanted:
            back = got.get(item.id)
            assert back is not None, clause("AL-WRITE-1", "the entry is listed", item.id[:40])
            assert back.as_json() == item.as_json(), clause(
                "AL-WRITE-1", "the entry reads back field for field", back.as_json(),
                want=item.as_json(),
            )  # fmt: skip
            assert back.at.utcoffset() == timedelta(0), clause(
                "AL-WRITE-1", "at reads back in UTC", back.at
            )

    async def test_append_idempotent(self, audit_log: AuditLog) -> None:
        """A second append of one id stores nothing.

        When this fails, check the insert: keyed by id, first write wins.
        """
        first = entry("same", counts={"facts": 1})
        again = entry("same", counts={"facts": 99}, at=_BASE + timedelta(days=1))
        assert await audit_log.append(first) is True
        added = await audit_log.append(again)
        assert added is False, clause(
            "AL-WRITE-2", "a second append of an id returns False", added, want=False
        )
        got = await _all(audit_log, 50)
        assert [e.as_json() for e in got] == [first.as_json()], clause(
            "AL-WRITE-2", "the first entry stays, once and unchanged", [e.as_json() for e in got]
        )

    # -- order and paging -----------------------------------------------------

    async def test_order(self, audit_log: AuditLog) -> None:
        """Newest first, ties by id descending (code point order).

        When this fails, check the sort: `at` desc, then id desc, compared as
        code points (bytes of UTF-8), not UTF-16 or a locale collation.
        """
        made = [entry(f"{i}", at=_BASE + timedelta(seconds=i % 3)) for i in range(6)]
        made += [entry(id_, at=_BASE + timedelta(seconds=1)) for id_ in _IDS]
        for item in reversed(made):
            await audit_log.append(item)
        got = _ids((await audit_log.list(limit=MAX_LIMIT)).entries)
        assert got == _oracle(made), clause(
            "AL-ORDER-1", "newest first, ties by id descending", got, want=_oracle(made)
        )

    @_PROPERTY
    @given(
        offsets=st.lists(
            st.tuples(st.integers(0, 5), st.sampled_from(_IDS + [f"x{i}" for i in range(5)])),
            min_size=1,
            max_size=20,
            unique_by=lambda t: t[1],
        ),
        limit=st.integers(1, 7),
    )
    async def test_order_property(
        self, audit_log: AuditLog, offsets: list[tuple[int, str]], limit: int
    ) -> None:
        """Property: any entries list, and page, in the oracle's order.

        When this fails, read the falsifying entries: which tie or instant breaks it?
        """
        run = uuid.uuid4().hex[:8]
        made = [entry(f"{run}{i}", at=_BASE + timedelta(microseconds=o)) for o, i in offsets]
        for item in made:
            await audit_log.append(item)
        mine = [e for e in await _all(audit_log, limit) if e.id.startswith(run)]
        assert _ids(mine) == _oracle(made), clause(
            "AL-ORDER-1", "pages list in the oracle's order", _ids(mine), want=_oracle(made)
        )

    @pytest.mark.parametrize("limit", [1, 2, 3, 10, 11])
    async def test_paging(self, audit_log: AuditLog, limit: int) -> None:
        """Every entry exactly once across pages; the last cursor is None.

        When this fails, check the cursor: it must name the last entry's (at, id)
        and the next page must start strictly after it (keyset, not offset).
        """
        made = [entry(f"p{i:02d}", at=_BASE + timedelta(seconds=i // 4)) for i in range(10)]
        for item in made:
            await audit_log.append(item)
        got = _ids(await _all(audit_log, limit))
        assert got == _oracle(made), clause(
            "AL-PAGE-1", f"pages of {limit} return every entry once, in order", got,
            want=_oracle(made),
        )  # fmt: skip
        last = await audit_log.list(limit=len(made))
        assert last.next_cursor is None, clause(
            "AL-PAGE-1", "a page holding the last entry has no next_cursor", last.next_cursor
        )

    async def test_paging_under_appends(self, audit_log: AuditLog) -> None:
        """Appends racing a reader cause no duplicates and no gaps.

        When this fails, check that the cursor is a key (at, id), not an offset:
        an offset shifts when entries are added before it.
        """
        before = [entry(f"old{i:03d}", at=_BASE + timedelta(seconds=i)) for i in range(30)]
        for item in before:
            await audit_log.append(item)
        seen: list[str] = []
        cursor: str | None = None
        n = 0
        while True:
            page = await audit_log.list(limit=4, cursor=cursor)
            seen += _ids(list(page.entries))
            # newer entries, and entries at instants already listed, arrive meanwhile
            await asyncio.gather(
                audit_log.append(entry(f"new{n:03d}", at=_BASE + timedelta(days=1, seconds=n))),
                audit_log.append(entry(f"zzz{n:03d}", at=_BASE + timedelta(seconds=29))),
            )
            n += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
            # two entries arrive per page of four, one of them behind the cursor:
            # a cursor that does not advance would page forever, so stop it here
            repeated = sorted({i for i in seen if seen.count(i) > 1})
            assert not repeated, clause("AL-PAGE-2", "no entry is returned twice", repeated)
            assert n <= len(before), clause("AL-PAGE-2", "paging terminates", n)
        dupes = sorted({i for i in seen if seen.count(i) > 1})
        assert not dupes, clause("AL-PAGE-2", "no entry is returned twice", dupes)
        missing = sorted(set(_ids(before)) - set(seen))
        assert not missing, clause("AL-PAGE-2", "every earlier entry is returned", missing)

    # -- filters ---------------------------------------------------------------

    async def test_filters(self, audit_log: AuditLog) -> None:
        """tenant and since narrow the listing.

        When this fails, check the tenant column/index (exact match, "" is a
        tenant of its own) and that since is inclusive.
        """
        made = [
            entry("lib", tenant="", at=_BASE),
            entry("acme1", tenant="acme", at=_BASE + timedelta(seconds=1)),
            entry("acme2", tenant="acme", at=_BASE + timedelta(seconds=2)),
            entry("other", tenant="acme2", at=_BASE + timedelta(seconds=3)),
        ]
        for item in made:
            await audit_log.append(item)
        cases: list[tuple[dict[str, Any], list[str]]] = [
            ({"tenant": "acme"}, ["acme2", "acme1"]),
            ({"tenant": ""}, ["lib"]),
            ({"tenant": None}, ["other", "acme2", "acme1", "lib"]),
            ({"since": _BASE + timedelta(seconds=2)}, ["other", "acme2"]),
            ({"tenant": "acme", "since": _BASE + timedelta(seconds=1)}, ["acme2", "acme1"]),
            ({"tenant": "nobody"}, []),
        ]
        for filters, want in cases:
            for limit in (1, 10):
                got = _ids(await _all(audit_log, limit, **filters))
                assert got == want, clause(
                    "AL-FILTER-1", f"list({filters}) with pages of {limit}", got, want=want
                )
        # Tenants are compared exactly (no case fold, trim or normalisation), and
        # `since` to the microsecond (never truncated to the second or millisecond).
        edge = _BASE + timedelta(seconds=10)
        more = [
            entry("Acme", tenant="Acme", at=edge - timedelta(seconds=1)),
            entry("acme-sp", tenant="acme ", at=edge - timedelta(seconds=1)),
            entry("nfd", tenant="e\u0301", at=edge - timedelta(seconds=1)),
            entry("micro-before", tenant="edge", at=edge - timedelta(microseconds=1)),
            entry("milli-before", tenant="edge", at=edge - timedelta(microseconds=999)),
            entry("micro-at", tenant="edge", at=edge),
        ]
        for item in more:
            await audit_log.append(item)
        exact: list[tuple[dict[str, Any], list[str]]] = [
            ({"tenant": "acme"}, ["acme2", "acme1"]),
            ({"tenant": "Acme"}, ["Acme"]),
            ({"tenant": "acme "}, ["acme-sp"]),
            ({"tenant": "\u00e9"}, []),
            ({"tenant": "edge", "since": edge}, ["micro-at"]),
            (
                {"tenant": "edge", "since": edge - timedelta(microseconds=999)},
                ["micro-at", "micro-before", "milli-before"],
            ),
        ]
        for filters, want in exact:
            got = _ids(await _all(audit_log, 10, **filters))
            assert got == want, clause(
                "AL-FILTER-1",
                f"list({filters}): tenant compared exactly, since to the microsecond",
                got,
                want=want,
            )

    # -- what a forget leaves --------------------------------------------------

    async def _forget_fixture(
        self, neighbours: AuditNeighbours, user: str, secret: str
    ) -> dict[str, int]:
        """Store events and records of `user` holding `secret`, then erase them
        through the ports; the counts a receipt would carry."""
        now = datetime.now(UTC)
        events = [
            Event(
                id=f"ev-{i}",
                domain=f"audit-{uuid.uuid4().hex[:6]}",
                agent="agent",
                action=f"wrote {secret}",
                outcome="ok",
                summary=f"{secret} number {i}",
                occurred_at=now,
                recorded_at=now,
                user_id=user,
                metadata={"note": secret},
            )
            for i in range(2)
        ]
        await neighbours.events.append(events)
        dim = neighbours.store.space.dimension
        vector = np.ones(dim, dtype=np.float32) / np.sqrt(dim)
        records = [
            MemoryRecord(
                id=f"fact-{i}",
                owner=user,
                namespace="profile",
                kind="preference",
                content=f"{secret} fact {i}",
                vector=vector,
                created_at=now,
                updated_at=now,
                attributes={"source": secret},
            )
            for i in range(3)
        ]
        await neighbours.store.add(records)
        return {
            "facts": await neighbours.store.delete_scope(user),
            "events": await neighbours.events.erase_user(user),
        }

    async def test_entries_survive_erasure(
        self, audit_log: AuditLog, neighbours: AuditNeighbours | None
    ) -> None:
        """Erasing the subject's data deletes none of the subject's entries.

        When this fails, check that the audit log's keys/rows are apart from the
        events and records, and that no erase or delete_scope touches them.
        """
        if neighbours is None:
            pytest.skip("no `neighbours` fixture: the deployment's EventLog and MemoryStore")
        user = f"subject-{uuid.uuid4().hex[:8]}"
        earlier = entry("earlier", subject=user, operation="forget_fact")
        await audit_log.append(earlier)
        counts = await self._forget_fixture(neighbours, user, "harmless")
        await audit_log.append(entry("forget", subject=user, counts=counts))
        await neighbours.events.erase_user(user)
        await neighbours.store.delete_scope(user)
        await neighbours.events.purge_expired()
        got = sorted(_ids(await _all(audit_log, 50)))
        assert got == ["earlier", "forget"], clause(
            "AL-KEEP-1", "entries of an erased subject stay", got, want=["earlier", "forget"]
        )

    async def test_entry_holds_no_forgotten_text(
        self, audit_log: AuditLog, neighbours: AuditNeighbours | None
    ) -> None:
        """The entry of a real forget carries none of the forgotten text.

        When this fails, check what the adapter stores and returns besides the
        entry's own fields: no event or record content may enter the audit log.
        """
        if neighbours is None:
            pytest.skip("no `neighbours` fixture: the deployment's EventLog and MemoryStore")
        user = f"subject-{uuid.uuid4().hex[:8]}"
        secret = f"Zq{uuid.uuid4().hex[:10]}secret"
        counts = await self._forget_fixture(neighbours, user, secret)
        assert counts == {"facts": 3, "events": 2}, clause(
            "AL-CONTENT-1", "the forget erased what was stored", counts,
            want={"facts": 3, "events": 2},
        )  # fmt: skip
        await audit_log.append(entry("forgot", subject=user, counts=counts))
        for back in await _all(audit_log, 50):
            text = repr(back.as_json())
            assert secret not in text, clause(
                "AL-CONTENT-1", "a listed entry holds none of the forgotten text", text
            )
            for name in ("id", "subject", "caller", "tenant"):
                value = getattr(back, name) or ""
                assert secret not in value, clause(
                    "AL-CONTENT-1", f"{name} holds none of the forgotten text", value
                )

    # -- bad input -------------------------------------------------------------

    async def test_bad_input(self, audit_log: AuditLog) -> None:
        """Bad arguments raise InvalidInput naming them and store nothing.

        When this fails, check the adapter calls `check_audit_entry` and
        `check_audit_list_args` (agent_memory.domain.audit) before any I/O.
        """
        bad_calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("entry", lambda: audit_log.append({"id": "x"})),  # type: ignore[arg-type]
            ("limit", lambda: audit_log.list(limit=0)),
            ("limit", lambda: audit_log.list(limit=MAX_LIMIT + 1)),
            ("limit", lambda: audit_log.list(limit=True)),
            ("cursor", lambda: audit_log.list(cursor="not-a-cursor")),
            ("cursor", lambda: audit_log.list(cursor="")),
            ("since", lambda: audit_log.list(since=datetime(2030, 1, 1))),
            ("tenant", lambda: audit_log.list(tenant="a\x00b")),
        ]
        for field, call in bad_calls:
            named: str | None = None
            try:
                result = await call()
            except InvalidInput as exc:
                named = exc.field
            except Exception as exc:
                pytest.fail(clause("AL-INPUT-1", f"bad {field} raises InvalidInput", exc))
            else:
                pytest.fail(clause("AL-INPUT-1", f"bad {field} raises InvalidInput", result))
            assert named == field, clause(
                "AL-INPUT-1", "the error names the argument", named, want=field
            )
        got = (await audit_log.list()).entries
        assert got == (), clause("AL-INPUT-1", "bad input stores nothing", got)
        builds: list[tuple[str, Callable[[], object]]] = [
            ("operation", lambda: entry(operation="drop_everything")),
            ("counts", lambda: entry(counts={"facts": -1})),
            ("counts", lambda: entry(counts={"facts": True})),
            ("counts", lambda: entry(counts={"the user said hello": 1})),
            ("caller", lambda: entry(caller=" ")),
            ("at", lambda: entry(at=datetime(2030, 1, 1))),
            ("subject", lambda: entry(subject="")),
        ]
        for field, build in builds:
            with pytest.raises(InvalidInput) as info:
                build()
            assert info.value.field == field, clause(
                "AL-INPUT-1", "building a bad entry names the field", info.value.field, want=field
            )

    # -- lifecycle -------------------------------------------------------------

    async def test_close(self, audit_log: AuditLog) -> None:
        """After close every operation raises StoreClosed; close is idempotent.

        When this fails, check the adapter's Lifecycle guard on each method.
        """
        await audit_log.close()
        await audit_log.close()
        await expect_closed(
            "AL-CLOSE-1",
            {
                "append": lambda: audit_log.append(entry()),
                "list": lambda: audit_log.list(),
                "ping": lambda: audit_log.ping(),
            },
        )

    async def test_shared(self, audit_log: AuditLog, reopen: ReopenAudit | None) -> None:
        """A second handle sees the first one's entries.

        When this fails, check that entries are stored in the backend, not in
        the handle.
        """
        opener = require_reopen(self.capabilities, "AL-SHARED-1", reopen)
        await audit_log.append(entry("shared"))
        other = await opener()
        try:
            got = _ids(list((await other.list()).entries))
        finally:
            await other.close()
        assert got == ["shared"], clause(
            "AL-SHARED-1", "a second handle lists the entry", got, want=["shared"]
        )

    # -- canary (last) ---------------------------------------------------------

    async def test_zz_canary_absent(self, audit_log: AuditLog) -> None:
        """The canary written by the first test is not visible.

        When this fails, the fixture does not yield an EMPTY audit log.
        """
        got = _ids(await _all(audit_log, 50))
        assert CANARY_ID not in got, clause(
            "AL-CANARY-1", "the fixture yields an empty audit log", got
        )
        await expect_raises(
            "AL-INPUT-1",
            "a cursor from nowhere raises InvalidInput",
            InvalidInput,
            audit_log.list(cursor="@@@"),
        )

"""Mutation testing of the shipped contract clauses, as a team writing its own
backend from docs/writing-a-backend.md would meet them.

Each class below is the in-memory adapter with ONE realistic bug a backend
author might write (list ordered ascending, ties not by id, a keyset cursor on
created_at alone, min_score ignored, an update that upserts, an acquire that
forgets expiry, a collation that folds case, ...). One pytest subprocess runs
the shipped contract classes on every mutant (the tests of the clause that must
catch it) and on the genuine memory adapters (the control, the same tests);
each mutant must fail with a failure naming that clause.

Mutants the suite once let through (the clauses were strengthened for them):
`AttributesIntsAsFloats` (MS-ADD-1 compared attributes with `==`, and
`1 == 1.0`), `UpdateKeepsVector` (MS-UPD-1 searched only after the update, so
a vector index built by an earlier search was never exercised),
`DeleteScopeOtherOwners` (MS-DEL-4 had a single owner), `WindowByRecordedAt`
(EL-ORD-1's recorded_at followed occurred_at), `ScanCollatedOrder` and
`EntriesCollatedOrder` (LS-SCAN-1 and C-LIST-1 had no key whose case decides
its place), `TriplesBySecond` (TS-Q-2's instants were whole seconds apart);
`SearchFalsyMinScore` (MS-SEARCH-4 never tried min_score=0.0),
`RenewEmptyPayloadKeepsOld` (LS-RENEW-3 never renewed with b""),
`DomainsKeepPurged` (no clause looked at `domains()` after a purge; the Redis
log had exactly this bug), `CacheGetIgnoresScope` (C-ISO-1 only used keys both
scopes held); `CursorIgnored` and `AuditCursorIgnored` made MS-LIST-3 and
AL-PAGE-2 page forever (a hang, not a failure).
"""

from __future__ import annotations

import fnmatch
import re
import sys
import textwrap
import uuid
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import background
from agent_memory.adapters.memory import (
    InMemoryAuditLog,
    InMemoryCache,
    InMemoryEventLog,
    InMemoryLeaseStore,
    InMemoryMemoryStore,
    InMemoryTripleStore,
)
from agent_memory.domain.audit import AuditPage
from agent_memory.domain.errors import NotFound
from agent_memory.domain.ranking import encode_cursor
from agent_memory.domain.records import (
    Entity,
    Event,
    EventWindow,
    Lease,
    MemoryRecord,
    Page,
    ScoredRecord,
)
from agent_memory.domain.triples import Triple, WalkStep
from agent_memory.domain.validation import MAX_LIMIT
from agent_memory.ports.storage import CacheEntry, EventLog
from broken.harness import PYTEST_INI, env

# --------------------------------------------------------------------------
# MemoryStore mutants
# --------------------------------------------------------------------------


class _ListBy(InMemoryMemoryStore):
    """`list` with a pluggable sort key, cursor predicate and page cut."""

    def _key(self, r: MemoryRecord) -> tuple[object, ...]:
        return (r.created_at, r.id)

    _reverse = True

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return (r.created_at, r.id) < after

    def _more(self, rows: int, limit: int) -> bool:
        return rows > limit

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        from agent_memory.adapters._common.validation import check_list_args

        self._life.check()
        wanted, after = check_list_args(owner, limit, namespace, kinds, cursor)
        index = self._owners().get(owner)
        rows = [] if index is None else list(index.records.values())
        rows = [
            r
            for r in rows
            if (namespace is None or r.namespace == namespace)
            and (wanted is None or r.kind in wanted)
        ]
        if after is not None:
            rows = [r for r in rows if self._after(r, after)]
        rows.sort(key=self._key, reverse=self._reverse)
        page = tuple(rows[:limit])
        more = self._more(len(rows), limit) and bool(page)
        next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if more else None
        return Page(records=page, next_cursor=next_cursor)


class ListTiesByIdAscending(_ListBy):
    """created_at desc, but ties by id ascending (`ORDER BY created_at DESC, id`)."""

    def _key(self, r: MemoryRecord) -> tuple[object, ...]:
        return (r.created_at, tuple(-ord(c) for c in r.id))

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return r.created_at < after[0] or (r.created_at == after[0] and r.id > after[1])


class ListIgnoresIdTies(_ListBy):
    """Ordered by created_at only; ties in insertion order (`ORDER BY created_at DESC`)."""

    def _key(self, r: MemoryRecord) -> tuple[object, ...]:
        return (r.created_at,)


class CursorSkipsTies(_ListBy):
    """The keyset cursor compares created_at alone (`WHERE created_at < :c`): a
    record sharing created_at with the last of a page is skipped."""

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return r.created_at < after[0]


class CursorRepeatsTies(_ListBy):
    """`WHERE created_at <= :c AND id != :id`: ties before the cursor come again."""

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return r.created_at <= after[0] and r.id != after[1]


class CursorOnFullLastPage(_ListBy):
    """`has_more = len(page) == limit`: a last page that happens to be full
    still hands out a cursor (to an empty page)."""

    def _more(self, rows: int, limit: int) -> bool:
        return rows >= limit


class ListSortsBySecond(_ListBy):
    """created_at truncated to the second for ordering (a seconds column)."""

    def _key(self, r: MemoryRecord) -> tuple[object, ...]:
        return (r.created_at.replace(microsecond=0), r.id)

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return (r.created_at.replace(microsecond=0), r.id) < (
            after[0].replace(microsecond=0),
            after[1],
        )


class ListSortsByUpdatedAt(_ListBy):
    """Ordered by updated_at (the column the author thought "recency" meant)."""

    def _key(self, r: MemoryRecord) -> tuple[object, ...]:
        return (r.updated_at, r.id)

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return True


class _SearchPost(InMemoryMemoryStore):
    """`search` that asks the real one for everything, then misapplies a rule."""

    async def _all(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        namespace: str | None,
        kinds: Sequence[str] | None,
        min_score: float | None,
        limit: int,
    ) -> list[ScoredRecord]:
        await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
        )  # the argument checks
        return await super().search(
            owner, vector, limit=10_000, namespace=namespace, kinds=kinds, min_score=None
        )


class SearchIgnoresMinScore(InMemoryMemoryStore):
    """min_score is accepted and dropped on the floor."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        return await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=None
        )


class SearchMinScoreExclusive(_SearchPost):
    """`score > min_score` where the rule keeps records scoring exactly min_score."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        hits = await self._all(owner, vector, namespace, kinds, min_score, limit)
        if min_score is not None:
            hits = [h for h in hits if h.score > min_score]
        return hits[:limit]


class SearchIgnoresKinds(InMemoryMemoryStore):
    """The kinds filter is accepted and ignored."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        if kinds is not None:
            await super().search(owner, vector, limit=limit, kinds=kinds)  # argument checks
        return await super().search(
            owner, vector, limit=limit, namespace=namespace, min_score=min_score
        )


class SearchKindsAfterLimit(_SearchPost):
    """The kinds filter applied after the limit cut (post-filtering an ANN page)."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        hits = await self._all(owner, vector, namespace, None, None, limit)
        hits = [h for h in hits if min_score is None or h.score >= min_score][:limit]
        return [h for h in hits if kinds is None or h.record.kind in kinds]


class SearchTiesByIdDescending(_SearchPost):
    """Equal scores ordered by id descending."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        hits = await self._all(owner, vector, namespace, kinds, min_score, limit)
        hits = [h for h in hits if min_score is None or h.score >= min_score]
        hits.sort(key=lambda h: (-h.score, tuple(-ord(c) for c in h.record.id)))
        return hits[:limit]


class SearchDotProduct(_SearchPost):
    """Scores by raw dot product (forgot to normalise the stored vectors)."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        hits = await self._all(owner, vector, namespace, kinds, min_score, limit)
        q = np.asarray(vector, dtype=np.float64)
        q = q / (np.linalg.norm(q) or 1.0)
        scored = [
            ScoredRecord(record=h.record, score=float(q @ h.record.vector.astype(np.float64)))
            for h in hits
        ]
        scored = [h for h in scored if min_score is None or h.score >= min_score]
        scored.sort(key=lambda h: (-h.score, h.record.id))
        return scored[:limit]


class DeleteScopeIgnoresNamespace(InMemoryMemoryStore):
    """delete_scope with a namespace deletes every namespace of the owner
    (the namespace clause forgotten in the DELETE)."""

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        if namespace is not None:
            await super().delete_scope(owner, namespace=namespace, kinds=[])  # checks only
        return await super().delete_scope(owner, kinds=kinds)


class DeleteScopeIgnoresKinds(InMemoryMemoryStore):
    """delete_scope with kinds deletes every kind of the namespace."""

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        if kinds is not None:
            await super().delete_scope(owner, namespace=namespace, kinds=[])  # checks only
        return await super().delete_scope(owner, namespace=namespace)


class DeleteScopeOtherOwners(InMemoryMemoryStore):
    """delete_scope(owner, namespace) deletes that namespace of EVERY owner
    (`DELETE ... WHERE namespace = :ns`, the owner clause forgotten)."""

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        count = await super().delete_scope(owner, namespace=namespace, kinds=kinds)
        if namespace is not None:
            for other in list(self._owners()):
                if other != owner:
                    await super().delete_scope(other, namespace=namespace, kinds=kinds)
        return count


class DeleteScopeEmptyKindsAll(InMemoryMemoryStore):
    """An empty kinds list treated as "no filter" (`if kinds:`): deletes all."""

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        return await super().delete_scope(owner, namespace=namespace, kinds=kinds or None)


class ListEmptyKindsAll(_ListBy):
    """An empty kinds list treated as "no filter" in list (`if kinds:`)."""

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        return await super().list(
            owner, namespace=namespace, kinds=kinds or None, limit=limit, cursor=cursor
        )


class SearchEmptyKindsAll(InMemoryMemoryStore):
    """An empty kinds list treated as "no filter" in search (`if kinds:`)."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        return await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds or None,
            min_score=min_score,
        )  # fmt: skip


class UpdateUpserts(InMemoryMemoryStore):
    """update of a missing record creates it (an UPSERT where UPDATE was meant)."""

    async def update(self, record: MemoryRecord) -> None:
        try:
            await super().update(record)
        except NotFound:
            await self.add([record])


class UpdateMissingSilent(InMemoryMemoryStore):
    """update of a missing record is a silent no-op (`UPDATE ... ` matching 0 rows
    with the row count never read)."""

    async def update(self, record: MemoryRecord) -> None:
        try:
            await super().update(record)
        except NotFound:
            return


class UpdateKeepsVector(InMemoryMemoryStore):
    """update rewrites the row but leaves the vector index (built by an earlier
    search) at the old vector: search ranks by what the record no longer holds."""

    async def update(self, record: MemoryRecord) -> None:
        index = self._owners().get(record.owner)
        old = None if index is None else index.records.get(record.id)
        await super().update(record)
        index = self._owners().get(record.owner)
        if old is not None and index is not None and index._vectors is not None:
            index._vectors.update(record.id, old.vector)


class DuplicateInBatchLastWins(InMemoryMemoryStore):
    """An id twice in one batch: the last one silently wins (`INSERT OR REPLACE`
    within the batch); an id already stored is still rejected."""

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        last: dict[tuple[str, str], MemoryRecord] = {}
        for r in records:
            last[(getattr(r, "owner", ""), getattr(r, "id", ""))] = r
        await super().add(list(last.values()) if len(last) < len(records) else records)


class DeleteReturnsTrue(InMemoryMemoryStore):
    """delete returns True whether or not something was deleted."""

    async def delete(self, owner: str, id: str) -> bool:
        await super().delete(owner, id)
        return True


class DeleteScopeCountsAll(InMemoryMemoryStore):
    """delete_scope returns the owner's record count, not the deleted count."""

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        index = self._owners().get(owner)
        total = 0 if index is None else len(index.records)
        got = await super().delete_scope(owner, namespace=namespace, kinds=kinds)
        return total if got else 0


class GlobOwnerList(_ListBy):
    """list matches the owner as a glob pattern (a Redis `SCAN MATCH mem:{owner}:*`)."""

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        page = await super().list(owner, namespace=namespace, kinds=kinds, limit=10_000)
        rows = list(page.records)
        for other, index in self._owners().items():
            if other != owner and fnmatch.fnmatchcase(other, owner):
                rows += [
                    r
                    for r in index.records.values()
                    if (namespace is None or r.namespace == namespace)
                    and (kinds is None or r.kind in kinds)
                ]
        if cursor is not None:
            from agent_memory.domain.ranking import decode_cursor

            after = decode_cursor(cursor)
            rows = [r for r in rows if (r.created_at, r.id) < after]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        out = tuple(rows[:limit])
        more = len(rows) > limit
        return Page(
            records=out, next_cursor=encode_cursor(out[-1].created_at, out[-1].id) if more else None
        )


class GlobOwnerSearch(InMemoryMemoryStore):
    """search matches the owner as a glob pattern (`@owner:{...*}` unescaped)."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        hits = await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
        )
        for other in list(self._owners()):
            if other != owner and fnmatch.fnmatchcase(other, owner):
                hits += await super().search(
                    other, vector, limit=limit, namespace=namespace, kinds=kinds,
                    min_score=min_score,
                )  # fmt: skip
        hits.sort(key=lambda h: (-h.score, h.record.id))
        return hits[:limit]


class GlobOwnerDeleteScope(InMemoryMemoryStore):
    """delete_scope matches the owner as a glob pattern (`DEL` over `SCAN MATCH`)."""

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        count = await super().delete_scope(owner, namespace=namespace, kinds=kinds)
        for other in list(self._owners()):
            if other != owner and fnmatch.fnmatchcase(other, owner):
                count += await super().delete_scope(other, namespace=namespace, kinds=kinds)
        return count


class CloseIgnored(InMemoryMemoryStore):
    """close() releases nothing and rejects nothing afterwards."""

    async def close(self) -> None:
        return None


class CloseRejectsOnlyWrites(InMemoryMemoryStore):
    """After close, writes raise StoreClosed but reads still answer (a read
    path that never checks the closed flag)."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        if self._life.closed:
            index = self._owners().get(owner)
            return None if index is None else index.records.get(id)
        return await super().get(owner, id)

    async def ping(self) -> None:
        if not self._life.closed:
            await super().ping()


class PingAfterClose(InMemoryMemoryStore):
    """ping() answers after close (it pings the server, not the handle)."""

    async def ping(self) -> None:
        return None


class ContextDropped(InMemoryMemoryStore):
    """The indexing context is stored for search but read back empty."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        import attrs

        got = await super().get(owner, id)
        return None if got is None else attrs.evolve(got, context="")


class AttributesIntsAsFloats(InMemoryMemoryStore):
    """Attributes go through a JSON codec that reads every number as a float
    (`parse_int=float`): 1 comes back as 1.0 (equal in Python, not in JSON)."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        import json

        import attrs

        got = await super().get(owner, id)
        if got is None:
            return None
        attributes = json.loads(json.dumps(got.attributes), parse_int=float)
        return attrs.evolve(got, attributes=attributes)


class ImportanceRounded(InMemoryMemoryStore):
    """importance stored as a NUMERIC(3, 2)."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        import attrs

        got = await super().get(owner, id)
        return None if got is None else attrs.evolve(got, importance=round(got.importance, 2))


class VectorNormalised(InMemoryMemoryStore):
    """Vectors stored unit-normalised (cosine-only index), read back that way."""

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        import attrs

        got = await super().get(owner, id)
        if got is None:
            return None
        v = got.vector.astype(np.float64)
        n = np.linalg.norm(v)
        return attrs.evolve(got, vector=(v / n if n else v).astype(np.float32))


class OwnersKeepsEmptied(InMemoryMemoryStore):
    """owners() also lists owners whose records were all deleted."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._ever: set[str] = set()

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await super().add(records)
        self._ever.update(r.owner for r in records)

    async def owners(self) -> list[str]:
        live = await super().owners()
        return sorted(set(live) | self._ever)


# --------------------------------------------------------------------------
# EventLog mutants
# --------------------------------------------------------------------------


class _Window(InMemoryEventLog):
    def _limited(self, matched: int, limit: int) -> bool:
        return matched > limit

    def _order(self, e: Event) -> tuple[object, ...]:
        return (e.occurred_at, e.id)

    def _keep(self, e: Event, cutoff: datetime) -> bool:
        return e.recorded_at >= cutoff

    def _since_ok(self, e: Event, since: datetime) -> bool:
        return e.occurred_at >= since

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        from agent_memory.adapters._common.validation import check_window_args
        from agent_memory.domain.validation import require_utc

        self._life.check()
        since = check_window_args(domain, since, limit, entity)
        until = None if until is None else require_utc(until, "until")
        cutoff = self._cutoff()
        rows = [
            e
            for e in self._backend.events.values()
            if (e.domain == domain or e.is_global)
            and self._since_ok(e, since)
            and (until is None or e.occurred_at < until)
            and self._keep(e, cutoff)
            and (entity is None or entity in e.entities)
        ]
        rows.sort(key=self._order, reverse=True)
        return EventWindow(events=tuple(rows[:limit]), limited=self._limited(len(rows), limit))


class LimitedWhenFull(_Window):
    """`limited = len(page) == limit`: a window holding exactly `limit` events
    claims it was cut."""

    def _limited(self, matched: int, limit: int) -> bool:
        return matched >= limit


class NeverLimited(_Window):
    """`limited` is always False (coverage never reported)."""

    def _limited(self, matched: int, limit: int) -> bool:
        return False


class RetentionNotApplied(_Window):
    """window shows events past retention (the cutoff forgotten)."""

    def _keep(self, e: Event, cutoff: datetime) -> bool:
        return True


class SinceExclusive(_Window):
    """`occurred_at > since` where the rule is inclusive."""

    def _since_ok(self, e: Event, since: datetime) -> bool:
        return e.occurred_at > since


class WindowTiesByIdAscending(_Window):
    """Equal occurred_at ordered by id ascending."""

    def _order(self, e: Event) -> tuple[object, ...]:
        return (e.occurred_at, tuple(-ord(c) for c in e.id))


class WindowByRecordedAt(_Window):
    """Ordered by recorded_at (arrival), not the event's own time."""

    def _order(self, e: Event) -> tuple[object, ...]:
        return (e.recorded_at, e.id)


class EntityFilterIgnoresGlobals(InMemoryEventLog):
    """With an entity filter, global events are returned whatever their entities."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        got = await super().window(domain, since=since, limit=limit, entity=entity, until=until)
        if entity is None:
            return got
        allg = await super().window(domain, since=since, limit=limit, until=until)
        extra = [e for e in allg.events if e.is_global and e not in got.events]
        rows = sorted([*got.events, *extra], key=lambda e: (e.occurred_at, e.id), reverse=True)
        return EventWindow(events=tuple(rows[:limit]), limited=got.limited or len(rows) > limit)


class AppendCountsBatch(InMemoryEventLog):
    """append returns the batch size, not the number newly stored."""

    async def append(self, events: Sequence[Event]) -> int:
        await super().append(events)
        return len(events)


class AppendLastWins(InMemoryEventLog):
    """append overwrites an id already stored (`INSERT OR REPLACE`)."""

    async def append(self, events: Sequence[Event]) -> int:
        fresh = [e for e in events if (e.domain, e.id) not in self._backend.events]
        for e in events:
            self._backend.events.pop((e.domain, e.id), None)
        await super().append(events)
        return len({(e.domain, e.id) for e in fresh})


class PurgeNothing(InMemoryEventLog):
    """purge_expired counts the expired events but deletes none."""

    async def purge_expired(self) -> int:
        self._life.check()
        cutoff = self._cutoff()
        return sum(1 for e in self._backend.events.values() if e.recorded_at < cutoff)


class UserEventsHideExpired(InMemoryEventLog):
    """user_events applies retention (an erasure request then misses expired,
    unpurged events)."""

    async def user_events(self, user_id: str) -> list[Event]:
        got = await super().user_events(user_id)
        cutoff = self._cutoff()
        return [e for e in got if e.recorded_at >= cutoff]


class EraseUserSkipsGlobals(InMemoryEventLog):
    """erase_user leaves the user's global events."""

    async def erase_user(self, user_id: str) -> int:
        self._life.check()
        from agent_memory.domain.validation import require_id

        require_id(user_id, "user_id")
        doomed = [
            k for k, e in self._backend.events.items() if e.user_id == user_id and not e.is_global
        ]
        for k in doomed:
            del self._backend.events[k]
        return len(doomed)


class EventCloseIgnored(InMemoryEventLog):
    """close() rejects nothing afterwards."""

    async def close(self) -> None:
        return None


# --------------------------------------------------------------------------
# LeaseStore mutants
# --------------------------------------------------------------------------


class AcquireIgnoresExpiry(InMemoryLeaseStore):
    """acquire treats an expired lease of another owner as held (checks the row,
    not its expiry)."""

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        held = self._backend.leases.get((scope, key)) if isinstance(scope, str) else None
        if held is not None and held.owner != owner:
            await super().get(scope, key)  # argument checks
            return None
        return await super().acquire(scope, key, owner, ttl, payload)


class TokenNotIncreasing(InMemoryLeaseStore):
    """Every fresh acquisition gets token 1 (no per-key counter kept)."""

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        got = await super().acquire(scope, key, owner, ttl, payload)
        if got is None:
            return None
        import attrs

        lease = attrs.evolve(got, token=1)
        self._backend.leases[(scope, key)] = lease
        return lease


class TokenBumpedByRenew(InMemoryLeaseStore):
    """renew mints a new token (fencing tokens change under a holder)."""

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        import attrs

        got = await super().renew(scope, key, owner, ttl, payload)
        token = self._backend.counters.get((scope, key), got.token) + 1
        self._backend.counters[(scope, key)] = token
        lease = attrs.evolve(got, token=token)
        self._backend.leases[(scope, key)] = lease
        return lease


class ReleaseIgnoresOwner(InMemoryLeaseStore):
    """release by anyone frees the lease."""

    async def release(self, scope: str, key: str, owner: str) -> bool:
        held = await self.get(scope, key)
        if held is not None:
            return await super().release(scope, key, held.owner)
        return await super().release(scope, key, owner)


class RenewDropsPayload(InMemoryLeaseStore):
    """renew without a payload resets it to b"" (instead of keeping it)."""

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        return await super().renew(scope, key, owner, ttl, b"" if payload is None else payload)


class ScanGlobPrefix(InMemoryLeaseStore):
    """scan matches `prefix*` as a glob (a Redis `SCAN MATCH`)."""

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        await super().scan(scope, prefix)  # checks
        everything = await super().scan(scope, "")
        return [lease for lease in everything if fnmatch.fnmatchcase(lease.key, prefix + "*")]


class LeaseCloseIgnored(InMemoryLeaseStore):
    """close() rejects nothing afterwards."""

    async def close(self) -> None:
        return None


# --------------------------------------------------------------------------
# Cache mutants
# --------------------------------------------------------------------------


class CacheTtlIgnoredOnGet(InMemoryCache):
    """get returns expired entries (the expiry kept, checked only by entries())."""

    async def get(self, scope: str, key: str) -> bytes | None:
        self._life.check()
        from agent_memory.domain.validation import require_id, require_scope

        require_scope(scope, "scope")
        require_id(key, "key")
        entry = self._backend.entries.get((scope, key))
        return None if entry is None else entry[0]


class RegexPrefixCache(InMemoryCache):
    """delete_prefix matches the prefix as a regular expression (`re.match`)."""

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        from agent_memory.adapters._common.validation import check_prefix
        from agent_memory.domain.validation import require_scope

        self._life.check()
        require_scope(scope, "scope")
        prefix = check_prefix(prefix)
        try:
            pattern = re.compile(prefix)
        except re.error:
            pattern = re.compile(re.escape(prefix))
        doomed = [k for k in self._backend.entries if k[0] == scope and pattern.match(k[1])]
        live = sum(1 for k in doomed if self._live(*k) is not None)
        for k in doomed:
            self._backend.entries.pop(k, None)
        return live


class DeletePrefixAllScopes(InMemoryCache):
    """delete_prefix deletes matching keys of every scope."""

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        count = await super().delete_prefix(scope, prefix)
        for s in {s for s, _ in self._backend.entries}:
            if s != scope:
                await super().delete_prefix(s, prefix)
        return count


class DeletePrefixCountsExpired(InMemoryCache):
    """delete_prefix counts expired entries too."""

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        matched = sum(
            1
            for s, k in self._backend.entries
            if isinstance(prefix, str) and s == scope and k.startswith(prefix)
        )
        await super().delete_prefix(scope, prefix)
        return matched


class EmptyValueIsMissing(InMemoryCache):
    """b"" is read back as a miss (`if value:` instead of `is not None`)."""

    async def get(self, scope: str, key: str) -> bytes | None:
        return (await super().get(scope, key)) or None


class DeleteCountsExpired(InMemoryCache):
    """delete returns True for an expired entry still in storage."""

    async def delete(self, scope: str, key: str) -> bool:
        present = (scope, key) in self._backend.entries if isinstance(scope, str) else False
        got = await super().delete(scope, key)
        return got or present


class EntriesShowExpired(InMemoryCache):
    """entries() lists expired entries (the listing forgets the expiry check)."""

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        listed = sorted(
            (
                CacheEntry(key=k, value=v, expires_at=exp)
                for (s, k), (v, exp) in self._backend.entries.items()
                if s == scope and isinstance(prefix, str) and k.startswith(prefix)
            ),
            key=lambda e: e.key,
        )
        await super().entries(scope, prefix)  # the argument checks
        return listed


class CacheCloseIgnored(InMemoryCache):
    """close() rejects nothing afterwards."""

    async def close(self) -> None:
        return None


# --------------------------------------------------------------------------
# Falsy-value bugs (`if x:` where `if x is not None:` was meant) and more
# --------------------------------------------------------------------------


class SearchFalsyMinScore(InMemoryMemoryStore):
    """`if min_score:` drops min_score=0.0 (keep only non-negative scores)."""

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        return await super().search(
            owner, vector, limit=limit, namespace=namespace, kinds=kinds,
            min_score=min_score or None,
        )  # fmt: skip


class RenewEmptyPayloadKeepsOld(InMemoryLeaseStore):
    """`payload or current.payload`: renewing with b"" keeps the old payload."""

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        return await super().renew(scope, key, owner, ttl, payload or None)


class ListFilterFirstPageOnly(_ListBy):
    """The namespace/kinds filters are applied to the first page only (the
    continuation query was written without them)."""

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        if cursor is not None:
            await super().list(owner, namespace=namespace, kinds=kinds, limit=limit)  # checks
            return await super().list(owner, limit=limit, cursor=cursor)
        return await super().list(owner, namespace=namespace, kinds=kinds, limit=limit)


class LimitedCountsExpired(_Window):
    """`limited` counted over every matching event, expired ones included (the
    COUNT query lacks the retention predicate)."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        got = await super().window(domain, since=since, limit=limit, entity=entity, until=until)
        matched = [
            e
            for e in self._backend.events.values()
            if (e.domain == domain or e.is_global)
            and e.occurred_at >= since
            and (until is None or e.occurred_at < until)
            and (entity is None or entity in e.entities)
        ]
        return EventWindow(events=got.events, limited=len(matched) > limit)


class DomainsKeepPurged(InMemoryEventLog):
    """domains() lists every domain ever written (a set never pruned by purge/erase)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._ever: set[str] = set()

    async def append(self, events: Sequence[Event]) -> int:
        count = await super().append(events)
        self._ever.update(e.domain for e in events)
        return count

    async def domains(self) -> list[str]:
        return sorted(set(await super().domains()) | self._ever)


class EntityMatchesIdOnly(InMemoryEventLog):
    """The entity filter compares the id only (the type forgotten)."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        if entity is None:
            return await super().window(domain, since=since, limit=limit, until=until)
        await super().window(domain, since=since, limit=limit, entity=entity, until=until)
        every = await super().window(domain, since=since, limit=MAX_LIMIT, until=until)
        rows = [e for e in every.events if any(x.id == entity.id for x in e.entities)]
        return EventWindow(events=tuple(rows[:limit]), limited=len(rows) > limit)


class RenewExpiredLease(InMemoryLeaseStore):
    """renew revives the owner's expired lease (checks the row's owner, not its expiry)."""

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        held = self._backend.leases.get((scope, key)) if isinstance(scope, str) else None
        if held is not None and held.owner == owner and isinstance(ttl, timedelta):
            import attrs

            lease = attrs.evolve(
                held,
                expires_at=self._clock.now() + ttl,
                payload=held.payload if payload is None else payload,
            )
            await super().get(scope, key)  # argument checks
            self._backend.leases[(scope, key)] = lease
            return lease
        return await super().renew(scope, key, owner, ttl, payload)


class ScanOtherScopes(InMemoryLeaseStore):
    """scan lists matching keys of every scope."""

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        got = await super().scan(scope, prefix)
        for other in sorted({s for s, _ in self._backend.leases} - {scope}):
            got += await super().scan(other, prefix)
        return sorted(got, key=lambda x: x.key)


class CacheGetIgnoresScope(InMemoryCache):
    """get falls back to the key in any scope (the key alone indexed)."""

    async def get(self, scope: str, key: str) -> bytes | None:
        got = await super().get(scope, key)
        if got is not None:
            return got
        for other in sorted({s for s, k in self._backend.entries if k == key}):
            value = await super().get(other, key)
            if value is not None:
                return value
        return None


class TriplesDeleteAllLoops(InMemoryTripleStore):
    """delete_scope(owner, loop=...) deletes every loop of the owner."""

    async def delete_scope(self, owner: str, *, loop: str | None = None) -> int:
        if loop is not None:
            await super().delete_scope(owner, loop="\x01never")  # the checks
        return await super().delete_scope(owner)


class TriplesAddCountsBatch(InMemoryTripleStore):
    """add returns the batch size, duplicates included."""

    async def add(self, triples: Sequence[Triple]) -> int:
        await super().add(triples)
        return len(triples)


class TriplesLimitBeforeOrder(InMemoryTripleStore):
    """query cuts at `limit` in storage order, then sorts the page."""

    async def query(
        self,
        owner: str,
        *,
        loop: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 100,
    ) -> list[Triple]:
        every = await super().query(
            owner, loop=loop, subject=subject, predicate=predicate, object=object,
            limit=MAX_LIMIT,
        )  # fmt: skip
        await super().query(owner, loop=loop, limit=limit)  # the limit check
        wanted = set(every)
        stored = [t for t in self._backend.triples.values() if t in wanted][:limit]
        return sorted(stored, key=lambda t: every.index(t))


class NeighboursOneHop(InMemoryTripleStore):
    """neighbours ignores `hops` (always one hop)."""

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        await super().neighbours(owner, node, hops=hops, loop=loop, limit=limit)  # checks
        return await super().neighbours(owner, node, hops=1, loop=loop, limit=limit)


# --------------------------------------------------------------------------
# Cursors that never advance: the contract must fail them, not page forever
# --------------------------------------------------------------------------


class CursorIgnored(_ListBy):
    """The cursor is accepted and ignored: every page is the first page, and a
    `next_cursor` is handed out while more records exist."""

    def _after(self, r: MemoryRecord, after: tuple[datetime, str]) -> bool:
        return True


class AuditCursorIgnored(InMemoryAuditLog):
    """The audit listing accepts a cursor and ignores it (every page is the first)."""

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        first = await super().list(tenant=tenant, since=since, limit=limit)
        if cursor is not None:
            await super().list(tenant=tenant, since=since, limit=limit, cursor=cursor)  # checks
        return first


# --------------------------------------------------------------------------
# Ordering mutants: listings that sort by the wrong key or not at all
# --------------------------------------------------------------------------


def _micros(at: datetime) -> int:
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _collated(text: str) -> tuple[str, str]:
    """A case-insensitive collation (a SQL default one): case folded first."""
    return (text.casefold(), text)


class OwnersInInsertionOrder(InMemoryMemoryStore):
    """owners() in the order the owners were first written (no ORDER BY)."""

    async def owners(self) -> list[str]:
        await super().owners()
        return [o for o, index in self._owners().items() if index.records]


class DomainsInInsertionOrder(InMemoryEventLog):
    """domains() in the order the domains were first written."""

    async def domains(self) -> list[str]:
        await super().domains()
        return list(dict.fromkeys(d for d, _ in self._backend.events))


class ScanCollatedOrder(InMemoryLeaseStore):
    """scan sorts keys case-insensitively (a non-binary collation)."""

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        return sorted(await super().scan(scope, prefix), key=lambda x: _collated(x.key))


class ScanInsertionOrder(InMemoryLeaseStore):
    """scan lists leases in acquisition order (no sort)."""

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        got = {x.key: x for x in await super().scan(scope, prefix)}
        return [got[k] for s, k in self._backend.leases if s == scope and k in got]


class EntriesCollatedOrder(InMemoryCache):
    """entries() sorts keys case-insensitively (a non-binary collation)."""

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        return sorted(await super().entries(scope, prefix), key=lambda e: _collated(e.key))


class EntriesInsertionOrder(InMemoryCache):
    """entries() in put order (no sort)."""

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        got = {e.key: e for e in await super().entries(scope, prefix)}
        return [got[k] for s, k in self._backend.entries if s == scope and k in got]


class _OrderedTriples(InMemoryTripleStore):
    """query with another sort key (the limit cut after it)."""

    def _order(self, t: Triple) -> tuple[object, ...]:
        raise NotImplementedError

    async def query(
        self,
        owner: str,
        *,
        loop: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 100,
    ) -> list[Triple]:
        every = await super().query(
            owner, loop=loop, subject=subject, predicate=predicate, object=object,
            limit=MAX_LIMIT,
        )  # fmt: skip
        await super().query(owner, loop=loop, limit=limit)  # the limit check
        return sorted(every, key=self._order)[:limit]


class TriplesTiesBySubjectFirst(_OrderedTriples):
    """`ORDER BY created_at DESC, subject, loop, predicate, object`."""

    def _order(self, t: Triple) -> tuple[object, ...]:
        return (-_micros(t.created_at), t.subject, t.loop, t.predicate, t.object)


class TriplesOldestFirst(_OrderedTriples):
    """`ORDER BY created_at` (ascending), then the right tie keys."""

    def _order(self, t: Triple) -> tuple[object, ...]:
        return (t.created_at, t.loop, t.subject, t.predicate, t.object)


class TriplesCollatedTies(_OrderedTriples):
    """Ties compared case-insensitively (a non-binary collation)."""

    def _order(self, t: Triple) -> tuple[object, ...]:
        return (
            -_micros(t.created_at),
            *(_collated(x) for x in (t.loop, t.subject, t.predicate, t.object)),
        )


class TriplesBySecond(_OrderedTriples):
    """created_at compared to the second for ordering (the tie keys decide within it)."""

    def _order(self, t: Triple) -> tuple[object, ...]:
        return (-(_micros(t.created_at) // 1_000_000), t.loop, t.subject, t.predicate, t.object)


class TripleOwnersUnsorted(InMemoryTripleStore):
    """owners() in insertion order."""

    async def owners(self) -> list[str]:
        await super().owners()
        return list(dict.fromkeys(t.owner for t in self._backend.triples.values()))


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

#: mutant -> (contract class, clause ids at least one of which a failure must name)
MUTANTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "ListTiesByIdAscending": (
        "MemoryStoreContract",
        ("MS-LIST-1",),
        "list_orders_by_created_desc_then_id_desc",
    ),
    "ListIgnoresIdTies": (
        "MemoryStoreContract",
        ("MS-LIST-1",),
        "list_orders_by_created_desc_then_id_desc",
    ),
    "CursorSkipsTies": ("MemoryStoreContract", ("MS-LIST-2",), "list_pagination"),
    "CursorRepeatsTies": ("MemoryStoreContract", ("MS-LIST-2",), "list_pagination"),
    "CursorOnFullLastPage": ("MemoryStoreContract", ("MS-LIST-2",), "list_pagination"),
    "ListSortsBySecond": ("MemoryStoreContract", ("MS-LIST-1",), "list_filters"),
    "ListSortsByUpdatedAt": ("MemoryStoreContract", ("MS-LIST-1",), "list_filters"),
    "SearchIgnoresMinScore": ("MemoryStoreContract", ("MS-SEARCH-4",), "search_min_score"),
    "SearchMinScoreExclusive": ("MemoryStoreContract", ("MS-SEARCH-4",), "search_min_score"),
    "SearchIgnoresKinds": ("MemoryStoreContract", ("MS-SEARCH-8",), "search_filters_inside_query"),
    "SearchKindsAfterLimit": (
        "MemoryStoreContract",
        ("MS-SEARCH-8",),
        "search_filters_inside_query",
    ),
    "SearchTiesByIdDescending": (
        "MemoryStoreContract",
        ("MS-SEARCH-3",),
        "search_ties_by_id_ascending",
    ),
    "SearchDotProduct": ("MemoryStoreContract", ("MS-SEARCH-1",), "search_orders_by_cosine_score"),
    "DeleteScopeIgnoresNamespace": (
        "MemoryStoreContract",
        ("MS-DEL-4",),
        "delete_scope_filtered_leaves_nothing_of_scope",
    ),
    "DeleteScopeIgnoresKinds": (
        "MemoryStoreContract",
        ("MS-DEL-4",),
        "delete_scope_filtered_leaves_nothing_of_scope",
    ),
    "DeleteScopeOtherOwners": (
        "MemoryStoreContract",
        ("MS-DEL-4",),
        "delete_scope_filtered_leaves_nothing_of_scope",
    ),
    "DeleteScopeEmptyKindsAll": (
        "MemoryStoreContract",
        ("MS-SCOPE-2",),
        "empty_kinds_matches_nothing",
    ),
    "ListEmptyKindsAll": ("MemoryStoreContract", ("MS-SCOPE-2",), "empty_kinds_matches_nothing"),
    "SearchEmptyKindsAll": ("MemoryStoreContract", ("MS-SCOPE-2",), "empty_kinds_matches_nothing"),
    "UpdateUpserts": ("MemoryStoreContract", ("MS-UPD-2",), "update_missing_raises_not_found"),
    "UpdateMissingSilent": (
        "MemoryStoreContract",
        ("MS-UPD-2",),
        "update_missing_raises_not_found",
    ),
    "UpdateKeepsVector": ("MemoryStoreContract", ("MS-UPD-1",), "update_replaces_every_field"),
    "DuplicateInBatchLastWins": (
        "MemoryStoreContract",
        ("MS-ADD-3",),
        "add_duplicate_within_batch_is_rejected",
    ),
    "DeleteReturnsTrue": (
        "MemoryStoreContract",
        ("MS-DEL-1", "MS-DEL-5"),
        "delete_missing_returns_false",
    ),
    "DeleteScopeCountsAll": (
        "MemoryStoreContract",
        ("MS-DEL-4",),
        "delete_scope_filtered_leaves_nothing_of_scope",
    ),
    "GlobOwnerList": ("MemoryStoreContract", ("MS-ISO-3",), "owner_isolation_with_hostile_names"),
    "GlobOwnerSearch": ("MemoryStoreContract", ("MS-ISO-2",), "owner_isolation_with_hostile_names"),
    "GlobOwnerDeleteScope": (
        "MemoryStoreContract",
        ("MS-ISO-6",),
        "owner_isolation_with_hostile_names",
    ),
    "CloseIgnored": ("MemoryStoreContract", ("MS-CLOSE-1",), "operation_after_close_raises"),
    "CloseRejectsOnlyWrites": (
        "MemoryStoreContract",
        ("MS-CLOSE-1",),
        "operation_after_close_raises",
    ),
    "PingAfterClose": ("MemoryStoreContract", ("MS-CLOSE-1",), "operation_after_close_raises"),
    "ContextDropped": ("MemoryStoreContract", ("MS-ADD-1",), "add_round_trips_every_field"),
    "AttributesIntsAsFloats": ("MemoryStoreContract", ("MS-ADD-1",), "add_round_trips_every_field"),
    "ImportanceRounded": ("MemoryStoreContract", ("MS-ADD-1",), "add_round_trips_every_field"),
    "VectorNormalised": ("MemoryStoreContract", ("MS-ADD-1",), "add_round_trips_every_field"),
    "OwnersKeepsEmptied": ("MemoryStoreContract", ("MS-OWN-1",), "owners_lists_every_owner_sorted"),
    "LimitedWhenFull": ("EventLogContract", ("EL-LIM-1",), "limited_flag"),
    "NeverLimited": ("EventLogContract", ("EL-LIM-1",), "limited_flag"),
    "RetentionNotApplied": ("EventLogContract", ("EL-RET-1",), "retention_hides_expired"),
    "SinceExclusive": ("EventLogContract", ("EL-SINCE-1",), "since_filter"),
    "WindowTiesByIdAscending": ("EventLogContract", ("EL-ORD-2",), "window_ties_by_id_desc"),
    "WindowByRecordedAt": (
        "EventLogContract",
        ("EL-ORD-1",),
        "window_orders_by_event_time_not_arrival",
    ),
    "EntityFilterIgnoresGlobals": (
        "EventLogContract",
        ("EL-GLOB-3",),
        "entity_filter_applies_to_global_events",
    ),
    "AppendCountsBatch": ("EventLogContract", ("EL-IDEM-2",), "same_id_across_batches"),
    "AppendLastWins": ("EventLogContract", ("EL-IDEM-2",), "same_id_across_batches"),
    "PurgeNothing": ("EventLogContract", ("EL-RET-2",), "purge_expired"),
    "UserEventsHideExpired": (
        "EventLogContract",
        ("EL-USER-2",),
        "user_events_include_expired_unpurged",
    ),
    "EraseUserSkipsGlobals": ("EventLogContract", ("EL-ERASE-1",), "erase_user"),
    "EventCloseIgnored": ("EventLogContract", ("EL-CLOSE-1",), "operations_after_close"),
    "AcquireIgnoresExpiry": ("LeaseStoreContract", ("LS-EXP-1",), "expired_lease_taken_by_another"),
    "TokenNotIncreasing": ("LeaseStoreContract", ("LS-FENCE-1",), "tokens_only_grow"),
    "TokenBumpedByRenew": ("LeaseStoreContract", ("LS-RENEW-3",), "renew_extends"),
    "ReleaseIgnoresOwner": ("LeaseStoreContract", ("LS-REL-1",), "release_by_non_owner"),
    "RenewDropsPayload": ("LeaseStoreContract", ("LS-RENEW-3",), "renew_extends"),
    "ScanGlobPrefix": ("LeaseStoreContract", ("LS-SCAN-2",), "scan_prefix_is_literal"),
    "LeaseCloseIgnored": ("LeaseStoreContract", ("LS-CLOSE-1",), "operations_after_close"),
    "CacheTtlIgnoredOnGet": ("CacheContract", ("C-TTL-1",), "ttl_expiry"),
    "RegexPrefixCache": ("CacheContract", ("C-DELP-2",), "delete_prefix_is_literal"),
    "DeletePrefixAllScopes": ("CacheContract", ("C-ISO-1",), "scopes_isolated"),
    "DeletePrefixCountsExpired": ("CacheContract", ("C-TTL-1",), "ttl_expiry"),
    "EmptyValueIsMissing": ("CacheContract", ("C-RT-1",), "round_trip"),
    "DeleteCountsExpired": ("CacheContract", ("C-TTL-1",), "ttl_expiry"),
    "EntriesShowExpired": ("CacheContract", ("C-LIST-1",), "entries_lists_live_entries_by_key"),
    "CacheCloseIgnored": ("CacheContract", ("C-CLOSE-1",), "operations_after_close"),
    "OwnersInInsertionOrder": (
        "MemoryStoreContract",
        ("MS-OWN-1",),
        "owners_lists_every_owner_sorted",
    ),
    "DomainsInInsertionOrder": ("EventLogContract", ("EL-USER-1",), "erase_user"),
    "ScanCollatedOrder": (
        "LeaseStoreContract",
        ("LS-SCAN-1",),
        "scan_prefix_ordered_with_payloads",
    ),
    "ScanInsertionOrder": (
        "LeaseStoreContract",
        ("LS-SCAN-1",),
        "scan_prefix_ordered_with_payloads",
    ),
    "EntriesCollatedOrder": ("CacheContract", ("C-LIST-1",), "entries_lists_live_entries_by_key"),
    "EntriesInsertionOrder": ("CacheContract", ("C-LIST-1",), "entries_lists_live_entries_by_key"),
    "TriplesTiesBySubjectFirst": ("TripleStoreContract", ("TS-Q-2",), "query_order_and_limit"),
    "TriplesOldestFirst": ("TripleStoreContract", ("TS-Q-2",), "query_order_and_limit"),
    "TriplesCollatedTies": ("TripleStoreContract", ("TS-Q-2",), "query_order_and_limit"),
    "TriplesBySecond": ("TripleStoreContract", ("TS-Q-2",), "query_order_and_limit"),
    "TripleOwnersUnsorted": (
        "TripleStoreContract",
        ("TS-OWN-1",),
        "owners_lists_every_owner_sorted",
    ),
    # cursors that never advance
    "CursorIgnored": ("MemoryStoreContract", ("MS-LIST-3",), "stable_while_adding"),
    "AuditCursorIgnored": ("AuditLogContract", ("AL-PAGE-2",), "paging_under_appends"),
    # batch 2
    "SearchFalsyMinScore": ("MemoryStoreContract", ("MS-SEARCH-4",), "search_min_score"),
    "RenewEmptyPayloadKeepsOld": ("LeaseStoreContract", ("LS-RENEW-3",), "renew_extends"),
    "ListFilterFirstPageOnly": ("MemoryStoreContract", ("MS-LIST-4",), "list_filters"),
    "LimitedCountsExpired": ("EventLogContract", ("EL-RET-4",), "retention_counts_from_recording"),
    "DomainsKeepPurged": ("EventLogContract", ("EL-RET-2",), "purge_expired"),
    "EntityMatchesIdOnly": ("EventLogContract", ("EL-ENT-1",), "entity_filter"),
    "RenewExpiredLease": ("LeaseStoreContract", ("LS-RENEW-2",), "renew_not_held"),
    "ScanOtherScopes": ("LeaseStoreContract", ("LS-ISO-1",), "scopes_isolated"),
    "CacheGetIgnoresScope": ("CacheContract", ("C-ISO-1",), "scopes_isolated"),
    "TriplesDeleteAllLoops": ("TripleStoreContract", ("TS-DEL-1",), "test_delete_scope"),
    "TriplesAddCountsBatch": ("TripleStoreContract", ("TS-ADD-1",), "add_counts_new"),
    "TriplesLimitBeforeOrder": ("TripleStoreContract", ("TS-Q-2",), "query_order_and_limit"),
    "NeighboursOneHop": ("TripleStoreContract", ("TS-WALK-2",), "walk_k_hops"),
}

#: contract class -> (port fixture, backend class, constructor call, control adapter)
_PORTS = {
    "MemoryStoreContract": (
        "store",
        "MemoryBackend",
        "{cls}(SPACE, backend)",
        "InMemoryMemoryStore",
    ),
    "EventLogContract": (
        "event_log",
        "MemoryEventBackend",
        "{cls}(backend=backend)",
        "InMemoryEventLog",
    ),
    "LeaseStoreContract": (
        "leases",
        "MemoryLeaseBackend",
        "{cls}(backend=backend)",
        "InMemoryLeaseStore",
    ),
    "CacheContract": ("cache", "MemoryCacheBackend", "{cls}(backend=backend)", "InMemoryCache"),
    "TripleStoreContract": (
        "triples",
        "MemoryTripleBackend",
        "{cls}(backend)",
        "InMemoryTripleStore",
    ),
    "AuditLogContract": (
        "audit_log",
        "MemoryAuditBackend",
        "{cls}(backend=backend)",
        "InMemoryAuditLog",
    ),
}

_HEADER = """
import pytest
from hypothesis import Phase, settings

from agent_memory.adapters.memory import *  # noqa: F403
from agent_memory.contract_tests import *  # noqa: F403
from agent_memory.domain.records import EmbeddingSpace
from broken.test_mutants_hunt import {names}

# Finding the failure is the point; shrinking it would only cost time. The same
# examples on every run, so a bug found is found every time.
settings.register_profile(
    "mutants", max_examples=50, deadline=None, phases=[Phase.explicit, Phase.generate],
    derandomize=True, database=None,
)
settings.load_profile("mutants")
SPACE = EmbeddingSpace(model="mutant-test", dimension=8)
CAPS = Capabilities(
    atomic_batches=True, concurrent_duplicate_rejection=True, reopen=True,
    keyword_search=True, versioned_writes=True, ttl_resolution_ms=10,
)


# Keep the contract tests whose name holds one of `keywords` and hide the rest
# (a non-callable is not collected): collecting some 12,000 tests only to
# deselect them would cost more than running the kept ones.
def _only(*keywords):
    def narrow(cls):
        for name in dir(cls):
            if name.startswith("test") and not any(k in name for k in keywords):
                setattr(cls, name, None)
        return cls

    return narrow
"""

_CLASS = """
@_only({keywords})
class Test{name}({contract}):
    capabilities = CAPS

    @pytest.fixture
    def backend(self):
        return {backend}()

    @pytest.fixture
    async def {fixture}(self, backend):
        port = {make}
        yield port
        await port.close()

    @pytest.fixture
    def reopen(self, backend):
        async def _open():
            return {reopen}

        return _open
"""

#: the audit contract also erases users through an event log and a store
_AUDIT_EXTRA = """
    @pytest.fixture
    def neighbours(self):
        return AuditNeighbours(events=InMemoryEventLog(), store=InMemoryMemoryStore(SPACE))
"""


def _class_source(name: str, adapter: str, contract: str, keywords: Sequence[str]) -> str:
    fixture, backend, make, control = _PORTS[contract]
    source = _CLASS.format(
        name=name,
        keywords=", ".join(repr(k) for k in sorted(keywords)),
        contract=contract,
        backend=backend,
        fixture=fixture,
        make=make.format(cls=adapter),
        reopen=make.format(cls=control),
    )
    return source + (_AUDIT_EXTRA if contract == "AuditLogContract" else "")


def generated_source(mutants: Sequence[str]) -> str:
    """A test module with a class per mutant, running the tests of the clause
    that must catch it, and a class per genuine memory adapter (the control),
    running the same tests of its contract (the whole suite runs on the genuine
    adapters in tests/contract already)."""
    per_contract: dict[str, set[str]] = defaultdict(set)
    for name in mutants:
        contract, _, test = MUTANTS[name]
        per_contract[contract].add(test)
    parts = [_HEADER.format(names=", ".join(sorted(mutants)))]
    for contract, tests in per_contract.items():
        control = _PORTS[contract][3]
        parts.append(_class_source(f"Control{control}", control, contract, sorted(tests)))
    for name in mutants:
        contract, _, test = MUTANTS[name]
        parts.append(_class_source(name, name, contract, [test]))
    return "\n".join(textwrap.dedent(p) for p in parts)


@background.job("mutants-hunt")
def _mutants_job(work: Path) -> background.Command:
    (work / "pytest.ini").write_text(PYTEST_INI)
    (work / "test_generated_mutants.py").write_text(generated_source(list(MUTANTS)))
    argv = [
        sys.executable, "-m", "pytest", "test_generated_mutants.py", "-q", "--tb=line",
        "-p", "no:cacheprovider", "-p", "agent_memory.contract_tests.plugin",
        f"--junitxml={work / 'report.xml'}",
    ]  # fmt: skip
    environment = env()
    environment.pop("HYPOTHESIS_PROFILE", None)
    return background.Command(argv, cwd=work, env=environment, timeout=300)


def failures_by_class(report: Path) -> tuple[set[str], dict[str, list[str]]]:
    """The classes that ran, and the failure messages per class."""
    failures: dict[str, list[str]] = defaultdict(list)
    collected: set[str] = set()
    for case in ET.parse(report).iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1].removeprefix("Test")
        collected.add(cls)
        for bad in (*case.iter("failure"), *case.iter("error")):
            failures[cls].append(f"{case.get('name')}: {bad.get('message', '')}")
    return collected, failures


Run = tuple[set[str], dict[str, list[str]], str]


@pytest.fixture(scope="module")
def run() -> Run:
    result = background.result("mutants-hunt")
    report = result.workdir / "report.xml"
    assert result.returncode is not None, f"the run timed out (a hang):\n{result.stdout[-4000:]}"
    assert report.exists(), f"the run produced no report:\n{result.stdout[-4000:]}"
    collected, failures = failures_by_class(report)
    controls = {f"Control{_PORTS[c][3]}" for c, _, _ in MUTANTS.values()}
    wanted = {*MUTANTS, *controls}
    assert collected >= wanted, f"missing classes {wanted - collected}:\n{result.stdout[-3000:]}"
    return collected, failures, result.stdout


@pytest.mark.background("mutants-hunt")
@pytest.mark.parametrize("contract", list(_PORTS))
def test_control_passes(run: Run, contract: str) -> None:
    """When this fails, the harness is broken: the genuine memory adapter must
    pass the very tests each mutant is judged by."""
    _, failures, _ = run
    control = f"Control{_PORTS[contract][3]}"
    assert not failures.get(control), "\n".join(failures[control])


@pytest.mark.background("mutants-hunt")
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_contract_catches_mutant(run: Run, mutant: str) -> None:
    """When this fails, the shipped contract passes a backend with this one bug
    (see the mutant's docstring), or no longer names the clause it breaks."""
    _, failures, _ = run
    got = failures.get(mutant, [])
    assert got, f"the contract passed the mutant {mutant}"
    clause_ids = MUTANTS[mutant][1]
    text = "\n".join(got)
    assert any(f"[{cid}]" in text for cid in clause_ids), (
        f"no failure of {mutant} names any of {clause_ids}:\n{text[:4000]}"
    )


# --------------------------------------------------------------------------
# A bug the strengthened EL-RET-2 found in a shipped backend
# --------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLog]:
    if request.param == "memory":
        log: EventLog = InMemoryEventLog()
    elif request.param == "sqlite":
        from agent_memory.adapters.sqlite import SqliteEventLog

        log = SqliteEventLog(tmp_path / "events.db")
    else:
        from agent_memory.adapters.redis import RedisEventLog

        url = request.getfixturevalue("redis_url")
        log = RedisEventLog.from_url(url, deployment="m" + uuid.uuid4().hex[:12])
    yield log
    await log.close()


async def test_domains_drop_a_domain_left_without_events(event_log: EventLog) -> None:
    """`domains()` lists a domain while it holds an event, expired-but-unpurged
    ones included, and not once purge_expired or erase_user left it empty (the
    Redis log listed every domain ever written: its set of known domains was
    never pruned)."""
    now = datetime.now(UTC)
    old = now - event_log.retention - timedelta(days=1)

    def event(domain: str, id: str, at: datetime, user: str | None = None) -> Event:
        return Event(
            id=id, domain=domain, agent="a", action="x", outcome="ok", summary="s",
            occurred_at=at, recorded_at=at, user_id=user,
        )  # fmt: skip

    await event_log.append(
        [
            event("d:purged", "e1", old),
            event("d:erased", "e2", now, user="u-1"),
            event("d:kept", "e3", now, user="u-2"),
        ]
    )
    assert await event_log.domains() == ["d:erased", "d:kept", "d:purged"]
    assert await event_log.purge_expired() == 1
    assert await event_log.domains() == ["d:erased", "d:kept"]
    assert await event_log.erase_user("u-1") == 1
    assert await event_log.domains() == ["d:kept"]

"""Deliberately broken EventLog, LeaseStore and Cache adapters.

Each one is the in-process reference adapter with exactly one realistic bug.
`tests/broken/test_broken_port_adapters.py` runs the shipped contract classes
against them and asserts that the suite fails, naming the expected clause.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from agent_memory.adapters.memory import (
    InMemoryCache,
    InMemoryEventLog,
    InMemoryLeaseStore,
    MemoryEventBackend,
)
from agent_memory.domain.errors import LeaseNotHeld
from agent_memory.domain.records import Entity, Event, EventWindow, Lease
from agent_memory.ports.storage import CacheEntry
from agent_memory.validation import (
    check_events,
    check_lease_args,
    check_prefix,
    check_window_args,
    require_id,
    require_positive,
    require_scope,
    require_utc,
)

__all__ = [
    "AnyoneRenewsLeaseStore",
    "ArrivalOrderEventLog",
    "CaseFoldOwnerLeaseStore",
    "CaseFoldUserEventLog",
    "DomainlessTiesUserEventsEventLog",
    "DuplicatingEventLog",
    "EventTimePurgeEventLog",
    "EventTimeRetentionEventLog",
    "ExpiredReleaseLeaseStore",
    "FilterAfterCutEventLog",
    "GlobPrefixCache",
    "GlobalsIgnoreUntilEventLog",
    "GlobalsReserveRoomEventLog",
    "InclusiveUntilEventLog",
    "IndexDroppingEraseEventLog",
    "KeepTtlOnOverwriteCache",
    "LazyExpiryScanLeaseStore",
    "LikePrefixEntriesCache",
    "ListingTimeExpiryCache",
    "LiveDomainsEventLog",
    "LiveUserEventsEventLog",
    "NestedFloatsEventLog",
    "OldestFirstUserEventsEventLog",
    "PagedUserEventsEventLog",
    "PrefixEraseEventLog",
    "RacyAcquireLeaseStore",
    "ReacquireFromOldExpiryLeaseStore",
    "RenewFromOldExpiryLeaseStore",
    "StaleTokenReacquireLeaseStore",
    "TokenResetLeaseStore",
    "TrimmedKeyCache",
    "TrimmedOwnerLeaseStore",
    "TtlIgnoringCache",
    "UncheckedUntilEventLog",
    "UntilReplacesSinceEventLog",
    "WallClockSinceEventLog",
]

_MICROSECOND = timedelta(microseconds=1)
_BIG = 10_000


class ArrivalOrderEventLog(InMemoryEventLog):
    """Bug: the window is newest-ARRIVAL first (like reading a stream backwards)."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        self._life.check()
        since = check_window_args(domain, since, limit, entity)
        floor = max(since, self._cutoff())
        rows = [
            e
            for e in reversed(list(self.backend.events.values()))
            if (e.domain == domain or e.is_global)
            and e.occurred_at >= floor
            and (entity is None or entity in e.entities)
        ]
        return EventWindow(events=tuple(rows[:limit]), limited=len(rows) > limit)


class DuplicatingEventLog(InMemoryEventLog):
    """Bug: append is not idempotent; every event is stored again (like XADD)."""

    _serial = 0

    async def append(self, events: Sequence[Event]) -> int:
        self._life.check()
        batch = list(events)
        for e in batch:
            DuplicatingEventLog._serial += 1
            self.backend.events[(e.domain, f"{e.id}\x00{self._serial}")] = e
        return len(batch)


class GlobalsReserveRoomEventLog(InMemoryEventLog):
    """Bug: the page is `limit` domain events first, then globals appended after."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        require_positive(limit, "limit")
        full = await super().window(domain, since=since, limit=10_000, entity=entity)
        own = [e for e in full.events if e.domain == domain and not e.is_global]
        glob = [e for e in full.events if e.is_global]
        page = (own[:limit] + glob)[:limit]
        return EventWindow(events=tuple(page), limited=len(own) > limit)


class InclusiveUntilEventLog(InMemoryEventLog):
    """Bug: `until` is inclusive (occurred_at <= until), so paging back by the
    oldest instant repeats it."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        bound = None if until is None else require_utc(until, "until") + _MICROSECOND
        return await super().window(domain, since=since, limit=limit, entity=entity, until=bound)


class FilterAfterCutEventLog(InMemoryEventLog):
    """Bug: `until` filters the newest `limit` events instead of bounding the
    range before the cut (the old reflection fallback), so pages come up short."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        full = await super().window(domain, since=since, limit=limit, entity=entity)
        rows = [e for e in full.events if until is None or e.occurred_at < until]
        return EventWindow(events=tuple(rows), limited=full.limited)


class GlobalsIgnoreUntilEventLog(InMemoryEventLog):
    """Bug: `until` bounds the domain's own events only; global ones (another
    index or set) are merged in unbounded."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        full = await super().window(domain, since=since, limit=_BIG, entity=entity)
        rows = [e for e in full.events if e.is_global or until is None or e.occurred_at < until]
        return EventWindow(events=tuple(rows[:limit]), limited=len(rows) > limit)


class UncheckedUntilEventLog(InMemoryEventLog):
    """Bug: `until` goes to the comparison unchecked (a naive datetime or a
    string fails there with TypeError, or is read in another time zone)."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        full = await super().window(domain, since=since, limit=_BIG, entity=entity)
        rows = [e for e in full.events if until is None or e.occurred_at < until]
        return EventWindow(events=tuple(rows[:limit]), limited=len(rows) > limit)


class UntilReplacesSinceEventLog(InMemoryEventLog):
    """Bug: with `until` given, the range is read from until downwards and
    `since` is dropped, so `until <= since` is not empty."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        if until is not None:
            since = datetime(1, 1, 1, tzinfo=UTC)
        return await super().window(domain, since=since, limit=limit, entity=entity, until=until)


class EventTimeRetentionEventLog(InMemoryEventLog):
    """Bug: the window's retention floor is by event time (occurred_at), so an
    old event recorded now is hidden and a stale recent one shown."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        self._life.check()
        since = check_window_args(domain, since, limit, entity)
        floor = max(since, self._cutoff())
        rows = [
            e
            for e in self.backend.events.values()
            if (e.domain == domain or e.is_global)
            and e.occurred_at >= floor
            and (until is None or e.occurred_at < until)
            and (entity is None or entity in e.entities)
        ]
        rows.sort(key=lambda e: (e.occurred_at, e.id), reverse=True)
        return EventWindow(events=tuple(rows[:limit]), limited=len(rows) > limit)


class EventTimePurgeEventLog(InMemoryEventLog):
    """Bug: `purge_expired` deletes by event time (occurred_at), not recorded_at."""

    async def purge_expired(self) -> int:
        self._life.check()
        cutoff = self._cutoff()
        doomed = [k for k, e in self.backend.events.items() if e.occurred_at < cutoff]
        for k in doomed:
            del self.backend.events[k]
        return len(doomed)


class PrefixEraseEventLog(InMemoryEventLog):
    """Bug: `erase_user` matches user ids as a prefix (LIKE 'u1%'), so erasing
    `u1` also erases `u10`'s events."""

    async def erase_user(self, user_id: str) -> int:
        self._life.check()
        events = self.backend.events
        doomed = [k for k, e in events.items() if (e.user_id or "").startswith(user_id)]
        for k in doomed:
            del events[k]
        return len(doomed)


class LiveUserEventsEventLog(InMemoryEventLog):
    """Bug: `user_events` applies the window's retention floor, so a forget does
    not see expired events that are not purged yet."""

    async def user_events(self, user_id: str) -> list[Event]:
        cutoff = self._cutoff()
        return [e for e in await super().user_events(user_id) if e.recorded_at >= cutoff]


class PagedUserEventsEventLog(InMemoryEventLog):
    """Bug: `user_events` returns only the newest 100 (a page, like a default LIMIT)."""

    async def user_events(self, user_id: str) -> list[Event]:
        return (await super().user_events(user_id))[:100]


class OldestFirstUserEventsEventLog(InMemoryEventLog):
    """Bug: `user_events` returns the user's events oldest first (an ascending
    ORDER BY), though the port promises newest first."""

    async def user_events(self, user_id: str) -> list[Event]:
        return list(reversed(await super().user_events(user_id)))


class LiveDomainsEventLog(InMemoryEventLog):
    """Bug: `domains` lists only domains with an unexpired event, so a domain whose
    only events expired (not purged) is left out."""

    async def domains(self) -> list[str]:
        self._life.check()
        cutoff = self._cutoff()
        return sorted({e.domain for e in self.backend.events.values() if e.recorded_at >= cutoff})


def _floats_inside(value: Any) -> Any:
    """A nested list or object as a decoder with one number type reads it back."""
    if isinstance(value, dict | list):
        return json.loads(json.dumps(value), parse_int=float)
    return value


class NestedFloatsEventLog(InMemoryEventLog):
    """Bug: top-level metadata values keep their types (one field per key, with
    a type tag), but nested lists and objects are stored as JSON read back by a
    decoder with one number type (like Lua's cjson or JavaScript), so a nested
    int comes back a float: `1 == 1.0`, and a plain `==` does not notice."""

    async def append(self, events: Sequence[Event]) -> int:
        self._life.check()
        stored = [
            attrs.evolve(e, metadata={k: _floats_inside(v) for k, v in e.metadata.items()})
            for e in check_events(events)
        ]
        return await super().append(stored)


_USER_INDEX: weakref.WeakKeyDictionary[MemoryEventBackend, dict[str, set[tuple[str, str]]]] = (
    weakref.WeakKeyDictionary()
)


class IndexDroppingEraseEventLog(InMemoryEventLog):
    """Bug: a per-user index, and `erase_user` reads it, deletes those events a
    turn of the event loop later, then drops the whole index: an append landing
    in between keeps its event and loses its index entry, so no forget finds it."""

    def _index(self) -> dict[str, set[tuple[str, str]]]:
        return _USER_INDEX.setdefault(self.backend, {})

    async def append(self, events: Sequence[Event]) -> int:
        stored = await super().append(events)
        for e in events:
            if e.user_id is not None:
                self._index().setdefault(e.user_id, set()).add((e.domain, e.id))
        return stored

    async def user_events(self, user_id: str) -> list[Event]:
        found = await super().user_events(user_id)
        listed = self._index().get(user_id, set())
        return [e for e in found if (e.domain, e.id) in listed]

    async def erase_user(self, user_id: str) -> int:
        self._life.check()
        refs = set(self._index().get(user_id, set()))
        await asyncio.sleep(0)
        events = self.backend.events
        doomed = [k for k in refs if k in events and events[k].user_id == user_id]
        for k in doomed:
            del events[k]
        self._index().pop(user_id, None)
        return len(doomed)


class RacyAcquireLeaseStore(InMemoryLeaseStore):
    """Bug: acquire is check-then-act across an await (GET, then SET)."""

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        self._life.check()
        check_lease_args(scope, key, owner, ttl)
        current = self._live(scope, key)
        await asyncio.sleep(0)  # the round trip between the read and the write
        if current is not None and current.owner != owner:
            return None
        if current is not None:
            token = current.token
        else:
            token = self._backend.counters.get((scope, key), 0) + 1
            self._backend.counters[(scope, key)] = token
        lease = Lease(
            scope=scope,
            key=key,
            owner=owner,
            token=token,
            expires_at=self._clock.now() + ttl,
            payload=payload,
        )
        self._backend.leases[(scope, key)] = lease
        return lease


class StaleTokenReacquireLeaseStore(InMemoryLeaseStore):
    """Bug: acquire's 'already ours' branch reads the stored record without its
    expiry, so the last owner re-acquiring its expired lease keeps the old token
    (another owner still gets a fresh one)."""

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        self._life.check()
        check_lease_args(scope, key, owner, ttl)
        stored = self._backend.leases.get((scope, key))
        if stored is None or stored.owner != owner:
            return await super().acquire(scope, key, owner, ttl, payload)
        lease = Lease(
            scope=scope,
            key=key,
            owner=owner,
            token=stored.token,
            expires_at=self._clock.now() + ttl,
            payload=payload,
        )
        self._backend.leases[(scope, key)] = lease
        return lease


class ExpiredReleaseLeaseStore(InMemoryLeaseStore):
    """Bug: release deletes the stored record when the owner matches, without
    checking its expiry (`DELETE ... WHERE owner = ?`, no `expires_at > now`), so
    the last owner of an expired lease 'releases' it and gets True."""

    async def release(self, scope: str, key: str, owner: str) -> bool:
        self._life.check()
        require_scope(scope, "scope")
        require_id(key, "key")
        require_id(owner, "owner")
        stored = self._backend.leases.get((scope, key))
        if stored is None or stored.owner != owner:
            return False
        del self._backend.leases[(scope, key)]
        return True


class AnyoneRenewsLeaseStore(InMemoryLeaseStore):
    """Bug: renew checks that the lease exists, not who holds it."""

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        self._life.check()
        check_lease_args(scope, key, owner, ttl)
        current = self._live(scope, key)
        if current is None:
            raise LeaseNotHeld(key, owner, None)
        return await super().renew(scope, key, current.owner, ttl, payload)


class TokenResetLeaseStore(InMemoryLeaseStore):
    """Bug: the fencing counter lives in the lease and is lost on release."""

    async def release(self, scope: str, key: str, owner: str) -> bool:
        released = await super().release(scope, key, owner)
        if released:
            self._backend.counters.pop((scope, key), None)
        return released


class TtlIgnoringCache(InMemoryCache):
    """Bug: put validates the ttl, then stores the value without it."""

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        await super().put(scope, key, value, ttl)
        await super().put(scope, key, value, None)


class GlobPrefixCache(InMemoryCache):
    """Bug: delete_prefix matches `prefix*` as a glob (like Redis SCAN MATCH)."""

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        self._life.check()
        require_scope(scope, "scope")
        doomed = [
            k
            for k in self._backend.entries
            if k[0] == scope and fnmatch.fnmatchcase(k[1], prefix + "*")
        ]
        live = sum(1 for k in doomed if self._live(*k) is not None)
        for k in doomed:
            self._backend.entries.pop(k, None)
        return live


class LazyExpiryScanLeaseStore(InMemoryLeaseStore):
    """Bug: expiry is lazy (only `get`/`acquire` drop an expired lease) and scan
    lists what is stored, expired or not."""

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        self._life.check()
        require_scope(scope, "scope")
        prefix = check_prefix(prefix)
        keys = sorted(k for (s, k) in self._backend.leases if s == scope and k.startswith(prefix))
        return [self._backend.leases[(scope, k)] for k in keys]


class CaseFoldUserEventLog(InMemoryEventLog):
    """Bug: user ids are matched case-insensitively (`LOWER(user_id) = LOWER(?)`,
    a case-insensitive collation), so forgetting `u1` also erases `U1`'s events."""

    def _same(self, stored: str | None, user_id: str) -> bool:
        return stored is not None and stored.casefold() == user_id.casefold()

    async def erase_user(self, user_id: str) -> int:
        self._life.check()
        require_id(user_id, "user_id")
        events = self.backend.events
        doomed = [k for k, e in events.items() if self._same(e.user_id, user_id)]
        for k in doomed:
            del events[k]
        return len(doomed)

    async def user_events(self, user_id: str) -> list[Event]:
        self._life.check()
        require_id(user_id, "user_id")
        rows = [e for e in self.backend.events.values() if self._same(e.user_id, user_id)]
        rows.sort(key=lambda e: (e.occurred_at, e.domain, e.id), reverse=True)
        return rows


class DomainlessTiesUserEventsEventLog(InMemoryEventLog):
    """Bug: `user_events` breaks occurred_at ties by id alone (`ORDER BY
    occurred_at DESC, id DESC`, the domain left out), so ties across domains
    come back in another order than the port's (domain, id) descending."""

    async def user_events(self, user_id: str) -> list[Event]:
        rows = await super().user_events(user_id)
        rows.sort(key=lambda e: (e.occurred_at, e.id), reverse=True)
        return rows


class WallClockSinceEventLog(InMemoryEventLog):
    """Bug: an aware `since`/`until` with another offset is read as UTC wall-clock
    time (`replace(tzinfo=UTC)`, or its text compared with stored UTC text), so
    the window is shifted by the offset."""

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        def wall(value: datetime | None) -> datetime | None:
            if isinstance(value, datetime) and value.tzinfo is not None:
                return value.replace(tzinfo=UTC)
            return value

        return await super().window(
            domain,
            since=wall(since),  # type: ignore[arg-type]
            limit=limit,
            entity=entity,
            until=wall(until),
        )


class RenewFromOldExpiryLeaseStore(InMemoryLeaseStore):
    """Bug: renew extends the lease from its old expiry (`expires_at = expires_at
    + ttl`) instead of from now, so every renew pushes it further out."""

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        current = self._live(scope, key)
        lease = await super().renew(scope, key, owner, ttl, payload)
        if current is not None:
            lease = attrs.evolve(lease, expires_at=current.expires_at + ttl)
            self._backend.leases[(scope, key)] = lease
        return lease


class ReacquireFromOldExpiryLeaseStore(InMemoryLeaseStore):
    """Bug: the holder re-acquiring its unexpired lease extends it from the old
    expiry (`expires_at + ttl`), not from now."""

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        check_lease_args(scope, key, owner, ttl)
        current = self._live(scope, key)
        lease = await super().acquire(scope, key, owner, ttl, payload)
        if lease is not None and current is not None and current.owner == owner:
            lease = attrs.evolve(lease, expires_at=current.expires_at + ttl)
            self._backend.leases[(scope, key)] = lease
        return lease


class _NormalisedOwnerLeaseStore(InMemoryLeaseStore):
    """Owners are compared after `norm` (the bug of the subclasses): an owner
    equal to the holder after it acts as the holder."""

    @staticmethod
    def norm(owner: str) -> str:
        raise NotImplementedError

    def _as_holder(self, scope: str, key: str, owner: str) -> str:
        current = self._live(scope, key)
        if current is not None and self.norm(current.owner) == self.norm(owner):
            return current.owner
        return owner

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        check_lease_args(scope, key, owner, ttl)
        return await super().acquire(scope, key, self._as_holder(scope, key, owner), ttl, payload)

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        check_lease_args(scope, key, owner, ttl)
        return await super().renew(scope, key, self._as_holder(scope, key, owner), ttl, payload)

    async def release(self, scope: str, key: str, owner: str) -> bool:
        require_scope(scope, "scope")
        require_id(key, "key")
        require_id(owner, "owner")
        return await super().release(scope, key, self._as_holder(scope, key, owner))


class CaseFoldOwnerLeaseStore(_NormalisedOwnerLeaseStore):
    """Bug: owners compared case-insensitively (a case-insensitive collation on
    the owner column), so `Ana` can take, renew and release `ana`'s lease."""

    @staticmethod
    def norm(owner: str) -> str:
        return owner.casefold()


class TrimmedOwnerLeaseStore(_NormalisedOwnerLeaseStore):
    """Bug: owners compared trimmed (`.strip()` on the way in, or a CHAR column
    that pads), so `ana ` is taken for `ana`."""

    @staticmethod
    def norm(owner: str) -> str:
        return owner.strip()


class KeepTtlOnOverwriteCache(InMemoryCache):
    """Bug: an overwrite with a ttl of an entry that has one keeps the first
    expiry (`SET ... KEEPTTL`, or `expires = COALESCE(expires, ?)`): the ttl is
    counted from the first put."""

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        old = self._backend.entries.get((scope, key))
        live = self._live(scope, key) is not None
        await super().put(scope, key, value, ttl)
        if ttl is not None and live and old is not None and old[1] is not None:
            self._backend.entries[(scope, key)] = (self._backend.entries[(scope, key)][0], old[1])


class LikePrefixEntriesCache(InMemoryCache):
    """Bug: `entries` matches the prefix with SQL LIKE unescaped (`key LIKE ?
    || '%'`): `%` and `_` in the prefix are wildcards."""

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        every = await super().entries(scope, "")
        like = "".join(
            ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in check_prefix(prefix)
        )
        return [e for e in every if re.match(like, e.key, re.S)]


class TrimmedKeyCache(InMemoryCache):
    """Bug: keys are trimmed on the way in, so `k ` and `k` are one entry."""

    @staticmethod
    def _n(key: str) -> str:
        return key.strip() if isinstance(key, str) and key.strip() else key

    async def get(self, scope: str, key: str) -> bytes | None:
        return await super().get(scope, self._n(key))

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        await super().put(scope, self._n(key), value, ttl)

    async def delete(self, scope: str, key: str) -> bool:
        return await super().delete(scope, self._n(key))


_TTLS: weakref.WeakKeyDictionary[object, dict[tuple[str, str], timedelta | None]] = (
    weakref.WeakKeyDictionary()
)


class ListingTimeExpiryCache(InMemoryCache):
    """Bug: `entries` reports expires_at as the listing time + the entry's ttl
    (the stored ttl, not its deadline), so an export re-creates entries that
    live longer than they had left."""

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        await super().put(scope, key, value, ttl)
        _TTLS.setdefault(self._backend, {})[(scope, key)] = ttl

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        listed = await super().entries(scope, prefix)
        ttls = _TTLS.get(self._backend, {})
        now = datetime.now(UTC)
        out = []
        for e in listed:
            ttl = ttls.get((scope, e.key))
            out.append(attrs.evolve(e, expires_at=None if ttl is None else now + ttl))
        return out

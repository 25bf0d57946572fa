"""Storage ports. Semantics every backend must honour (the contract suite checks them).

Common rules:
- every operation takes an explicit scope (owner, domain or lease/cache scope);
  an empty or whitespace-only scope raises `ScopeRequired`;
- scopes and ids are opaque: no character may widen a query or collide keys;
- `close()` is idempotent; afterwards every operation raises `StoreClosed`; a
  write racing `close()` either completes before `close()` returns or is
  rejected, and is never persisted after;
- backend failures raise `BackendUnavailable`, never a raw client exception.

Bad input: one rule, one typed error on every backend, raised before any I/O
(`InvalidInput` or a subclass, whose `field` and message name the argument;
never a builtin such as `AttributeError` or `OverflowError`). The bounds live
in `agent_memory.domain.validation`:
- text (scopes, ids, keys, prefixes, record and event text, JSON attribute and
  metadata strings, keyword queries) must not contain NUL (U+0000): PostgreSQL
  cannot store it, so no backend accepts it;
- every scope and id (owners, namespaces, record ids, kinds, event ids, domains,
  user ids, entity types and ids, lease scopes/keys/owners, cache scopes/keys,
  triple owners/loops/terms) is at most MAX_ID_BYTES (512) bytes of UTF-8:
  every backend can then store the maximum in every id field of one row (a
  PostgreSQL index entry holds at most 2,704 bytes);
- every `limit` is an int, not a bool, in [1, MAX_LIMIT] (10,000), the same on
  every backend: a larger limit would be accepted by some engines and overflow
  others' 64-bit LIMIT, and no service needs more in one call;
- every ttl is a `timedelta` in (0, MAX_TTL] (3650 days): `now + ttl` stays a
  valid timestamp in every backend's encoding;
- a `cursor` is None or a string returned as `next_cursor` by `list`;
- `min_score` is None or a finite number; query vectors are finite, 1-D, of the
  store's dimension (`DimensionMismatch` otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from attrs import frozen

from agent_memory.domain.audit import AuditEntry, AuditPage
from agent_memory.domain.records import (
    EmbeddingSpace,
    Entity,
    Event,
    EventWindow,
    Lease,
    MemoryRecord,
    Page,
    ScoredRecord,
)
from agent_memory.domain.triples import Triple, WalkStep

__all__ = [
    "AuditLog",
    "Cache",
    "CacheEntry",
    "CacheListing",
    "EventLog",
    "KeywordSearch",
    "LeaseStore",
    "MemoryStore",
    "OwnerListing",
    "TripleStore",
    "VersionedWrites",
]


@runtime_checkable
class MemoryStore(Protocol):
    """Records with embedding vectors, addressed by `(owner, id)`, bound to one space."""

    @property
    def space(self) -> EmbeddingSpace:
        """The embedding space this store is bound to."""
        ...

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        """Add a batch. An id already stored for that owner (or twice in the batch)
        raises `DuplicateRecord`; a vector of another dimension `DimensionMismatch`."""
        ...

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        """The record, or None when the owner has no record with that id."""
        ...

    async def update(self, record: MemoryRecord) -> None:
        """Replace a stored record (same owner and id); `NotFound` when missing."""
        ...

    async def delete(self, owner: str, id: str) -> bool:
        """Delete one record; False when it did not exist."""
        ...

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
        """Cosine similarity, score descending, ties by id ascending, at most `limit`."""
        ...

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Records by created_at desc, id desc; keyset-paginated by an opaque cursor.
        Each page is read from one consistent view (or continued by key, never by
        position): paging while other tasks add, update and delete records returns
        every record stored for the whole run exactly once and none twice."""
        ...

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        """Delete every matching record of the owner; the count (0 when none matched)."""
        ...

    async def ping(self) -> None:
        """Raise `BackendUnavailable` when the backend cannot be reached."""
        ...

    async def close(self) -> None:
        """Idempotent; afterwards every operation raises `StoreClosed`."""
        ...


@runtime_checkable
class KeywordSearch(Protocol):
    """Optional MemoryStore capability: BM25-style full-text search over content
    and indexing context, with owner and filters applied inside the query."""

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        """Records matching the query's terms, best first (higher score is better).

        `query` is a string of at most MAX_QUERY_BYTES (64 KiB) of UTF-8, else
        `InvalidInput` naming `query`. Every word of such a query counts on every
        backend (no backend keeps only the first few terms; about 16,000
        distinct words were measured to work on each), except that a word (run of
        letters and digits) longer than MAX_QUERY_WORD_BYTES (64) is ignored
        everywhere: engines index only bounded tokens (RediSearch truncates at
        128 bytes, PostgreSQL drops words over 2047), so such words would match
        on some backends and not on others."""
        ...


@runtime_checkable
class VersionedWrites(Protocol):
    """Optional MemoryStore capability: writes conditional on the stored record's
    version (its `updated_at`), each atomic against every other write to that
    record. A copy between two stores while writers use them (a re-embed
    completing after reads switched, `--drop-old` deleting the old space) needs
    them: a version a writer stores meanwhile is then never replaced by an older
    copy, nor deleted unseen. Without them those steps read, then write, and a
    write landing between the two is lost (docs/portability.md)."""

    async def update_if_older(self, record: MemoryRecord) -> bool:
        """Replace the stored record (same owner and id) with `record` when the
        stored one's `updated_at` is earlier than `record`'s; True when replaced,
        False when the stored one is as late or later, or there is none."""
        ...

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        """Delete the record when its stored `updated_at` is `updated_at` (to the
        microsecond); True when deleted, False when it is missing or another
        version. `updated_at` must be an aware datetime (`InvalidInput`)."""
        ...


@runtime_checkable
class OwnerListing(Protocol):
    """Optional capability of a MemoryStore (in its own space) or a TripleStore:
    enumerate owners, so a whole deployment can be exported (`agent-memory export`)."""

    async def owners(self) -> list[str]:
        """Every owner with at least one stored record (triple), sorted by code point."""
        ...


@runtime_checkable
class EventLog(Protocol):
    """Episodic events, newest first by event time, with retention."""

    @property
    def retention(self) -> timedelta:
        """Counted from ingestion: an event expires at `recorded_at + retention`,
        whatever its occurred_at; expired events are never returned, and purged."""
        ...

    async def append(self, events: Sequence[Event]) -> int:
        """Append a batch, idempotent by `(domain, id)`; the number newly stored."""
        ...

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        """The domain's events (and global ones) with occurred_at >= since, newest
        first by occurred_at (then id desc); `entity` narrows to events that carry
        it; `until`, when given, keeps only events with occurred_at < until, so a
        caller can page back in event time (`until <= since` is empty; a naive
        or non-datetime `until` raises InvalidInput). `until` is a bare instant:
        paging back with until=<oldest instant t of the last page> repeats
        nothing, and events at t that the limit cut off are left out too, so a
        pager reads t whole (since=t, until=t + 1 µs). Expired events (see
        `retention`) never count. `limited` is True when more events matched
        than `limit`."""
        ...

    async def erase_user(self, user_id: str) -> int:
        """Delete every event carrying exactly this user id (never a prefix or
        pattern match), in every domain, expired ones not yet purged included;
        the count. Atomic with respect to appends: an append racing the erase is
        either erased or keeps everything a later `erase_user` needs to find it,
        so a quiet second erase leaves no event carrying the id."""
        ...

    async def user_events(self, user_id: str) -> list[Event]:
        """Every stored event carrying exactly this user id, in every domain,
        expired ones not yet purged included; all of them, never a page; newest
        first by occurred_at (then domain, id desc). What `erase_user` would
        delete: a data-subject export or forget reads it first to find the data
        derived from those events."""
        ...

    async def domains(self) -> list[str]:
        """Every domain that has (or had, until purged) a stored event, sorted;
        a domain whose only events are expired but not purged is listed."""
        ...

    async def purge_expired(self) -> int:
        """Delete events past retention; the count."""
        ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class LeaseStore(Protocol):
    """Atomic leases with owner and fencing token, addressed by `(scope, key)`."""

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        """Take the lease if it is free, expired, or already ours and unexpired (then
        extend it and replace its payload, keeping the token). None when someone else
        holds it. A fresh acquisition (of a free or expired key, by anyone, its last
        owner included) gets a token greater than any earlier one for the key."""
        ...

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        """Extend a lease we hold (optionally replacing the payload); `LeaseNotHeld`
        when it is expired or held by another owner."""
        ...

    async def release(self, scope: str, key: str, owner: str) -> bool:
        """Release a lease we hold; False (and nothing changes) otherwise, also for
        an expired lease released by the owner it had (an expired lease is free)."""
        ...

    async def get(self, scope: str, key: str) -> Lease | None:
        """The current, unexpired lease, or None."""
        ...

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        """Unexpired leases in scope whose key starts with `prefix`, ordered by key."""
        ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class Cache(Protocol):
    """Bytes with a TTL, addressed by `(scope, key)`."""

    async def get(self, scope: str, key: str) -> bytes | None:
        """The value, or None when missing or expired."""
        ...

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        """Store (overwrite) a value; `ttl=None` keeps it until deleted."""
        ...

    async def delete(self, scope: str, key: str) -> bool:
        """Delete one entry; False when it did not exist."""
        ...

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        """Delete every entry in scope whose key starts with `prefix`; the count."""
        ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


@frozen
class CacheEntry:
    """One live cache entry as `CacheListing.entries` returns it."""

    key: str
    value: bytes
    expires_at: datetime | None
    """When it expires (UTC), None when it was stored without a ttl."""


@runtime_checkable
class CacheListing(Protocol):
    """Optional Cache capability: enumerate a scope's live entries with their expiry,
    so they can be exported and re-created elsewhere with the remaining ttl."""

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        """Unexpired entries in scope whose key starts with `prefix`, ordered by key
        (code point); `expires_at` to the backend's precision (at least milliseconds)."""
        ...


@runtime_checkable
class TripleStore(Protocol):
    """Fact triples of a knowledge graph, scoped to an owner and an agent loop.

    A triple's identity is `(owner, loop, subject, predicate, object)`: adding it
    again changes nothing (the first `source` and `created_at` stay). Results are
    ordered by `agent_memory.domain.triples.triple_sort_key` (newest first, then
    loop, subject, predicate, object ascending by code point); walks by distance
    first. `loop=None` means every loop of the owner.
    """

    async def add(self, triples: Sequence[Triple]) -> int:
        """Store a batch (any owners/loops); the number newly stored."""
        ...

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
        """The owner's triples matching every given filter (exact match), at most `limit`."""
        ...

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        """Triples reachable from `node` within `hops` edges (either direction), each
        once at its smallest distance, by distance then triple order (see `domain.triples.walk`)."""
        ...

    async def delete_scope(self, owner: str, *, loop: str | None = None) -> int:
        """Delete the owner's triples (of one loop, or all); the count."""
        ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class AuditLog(Protocol):
    """The audit trail (`agent_memory.domain.audit`): one entry per forget,
    delete_scope, import with replace, re-embed switch and migration, holding
    ids and counts only. Served by every backend that serves events, in storage
    of its own: nothing that erases user data (`EventLog.erase_user`,
    `MemoryStore.delete_scope`, `Cache.delete_prefix`) ever deletes an entry,
    and entries never expire."""

    async def append(self, entry: AuditEntry) -> bool:
        """Store one entry, idempotent by `entry.id` (a retry after a lost reply
        stores nothing twice): True when newly stored, False when an entry with
        that id was already there (it is kept unchanged). A non-`AuditEntry`
        raises `InvalidInput` naming `entry`."""
        ...

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        """Entries newest first by `at`, ties by `id` descending (code point),
        keyset-paginated by an opaque cursor (`next_cursor`, None on the last
        page): an entry appended while a reader pages is never returned twice,
        and every entry that existed when paging began is returned once.
        `tenant` keeps one tenant's entries ("" the library's own; None every
        tenant); `since` keeps entries with `at >= since` (aware datetime)."""
        ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...

"""Export a deployment (or one data subject) to the export format, import it
idempotently and resumably, and verify a copy. Drives ports only."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import IO, Any, Protocol, runtime_checkable

import attrs
import numpy as np
from attrs import define, field

from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.errors import DuplicateRecord, InvalidInput
from agent_memory.domain.records import Event, Lease, MemoryRecord
from agent_memory.domain.triples import MAX_LIMIT as TRIPLE_LIMIT
from agent_memory.domain.triples import Triple
from agent_memory.domain.validation import MAX_LIMIT, require_positive
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import (
    AuditLog,
    Cache,
    CacheListing,
    EventLog,
    LeaseStore,
    MemoryStore,
    OwnerListing,
    TripleStore,
    VersionedWrites,
)
from agent_memory.services.audit import read_entries, stored_subject
from agent_memory.services.forget_marks import being_forgotten
from agent_memory.services.graph_memory import CHECKPOINT_SCOPE, checkpoint_key
from agent_memory.services.portability.errors import (
    ExportFormatError,
    ListingUnsupported,
    PortabilityError,
    WouldReplace,
)
from agent_memory.services.portability.format import (
    FORMAT_VERSION,
    TYPES,
    CacheItem,
    ExportReader,
    ExportWriter,
    Footer,
    Header,
    Item,
    RecordItem,
)
from agent_memory.services.user_memory import ForgottenUsers, derived_from, user_cache_scope

__all__ = [
    "PORTS",
    "SWITCH_KEY",
    "SWITCH_SCOPE",
    "BulkLoad",
    "ExportSummary",
    "ImportFailed",
    "ImportSummary",
    "Ports",
    "check_skip",
    "count_replaced",
    "export_data",
    "import_data",
    "verify_copy",
]

#: Where a re-embed records the switch `connect()` follows: one cache entry without
#: ttl in the deployment's coordination cache (`reembed.EmbeddingSwitch`). Every
#: export carries it, so an import reads the space the source read.
SWITCH_SCOPE = "agent-memory/embedding"
SWITCH_KEY = "active"

#: The ports an export, import or migrate can leave out (`skip=`), and the item
#: type each one holds.
PORTS = {
    "events": "event",
    "triples": "triple",
    "cache": "cache",
    "leases": "lease",
    "audit": "audit",
}


def check_skip(skip: Collection[str]) -> tuple[str, ...]:
    """The ports to skip, validated (`InvalidInput` naming an unknown one)."""
    if isinstance(skip, str):
        skip = (skip,)
    unknown = sorted(set(skip) - set(PORTS))
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise InvalidInput("skip", f"unknown port {names}: the ports are {', '.join(PORTS)}")
    return tuple(p for p in PORTS if p in skip)


#: Progress callback: (stage, done, total or None).
Progress = Callable[[str, int, int | None], None]

_PAGE = 500
_LABELS = {
    "record": "records",
    "event": "events",
    "triple": "triples",
    "cache": "cache entries",
    "lease": "leases",
    "audit": "audit entries",
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


@runtime_checkable
class BulkLoad(Protocol):
    """Optional memory-store capability an import uses when the target has it
    (found structurally, like the ports' other optional capabilities): a session
    for loading about `expected` new records fast. Inside it the importer `add`s
    batches exactly as without it — each batch atomic, `DuplicateRecord` when a
    record exists — so an import stays idempotent and resumable; the store may
    defer index maintenance to the session's end (PostgreSQL: the HNSW index is
    built once, after the rows are in). The session yields whether it deferred
    anything (the store decides whether that pays)."""

    def bulk_load(self, expected: int) -> AbstractAsyncContextManager[bool]: ...


@define
class Ports:
    """The ports an export reads or an import writes (None: not served)."""

    store: MemoryStore
    events: EventLog | None = None
    cache: Cache | None = None
    leases: LeaseStore | None = None
    triples: TripleStore | None = None
    backend: str = "unknown"
    audit: AuditLog | None = None
    """Where an import with replace (and a migration) records its audit entry."""


@define
class ExportSummary:
    counts: dict[str, int]
    footer: Footer | None = None
    owners: dict[str, int] = field(factory=dict)
    """Records exported per owner."""
    skipped: tuple[str, ...] = ()
    """Ports left out on purpose (`skip=`)."""
    unexported: dict[str, str] = field(factory=dict)
    """Ports the source has that could not be exported, and why."""


@define
class ImportSummary:
    """Exactly what an import did. `written` counts items newly stored, `updated`
    records replaced by the file's version, `unchanged` items already there
    (a re-run), `skipped` expired cache entries/leases, leases held by another
    owner and the file's re-embed switch where the target keeps its own
    (`keep_switch`); `last_line` is the last line fully applied."""

    written: dict[str, int] = field(factory=lambda: dict.fromkeys(TYPES, 0))
    updated: dict[str, int] = field(factory=lambda: dict.fromkeys(TYPES, 0))
    unchanged: dict[str, int] = field(factory=lambda: dict.fromkeys(TYPES, 0))
    skipped: dict[str, int] = field(factory=lambda: dict.fromkeys(TYPES, 0))
    resumed_after: int = 0
    last_line: int = 0
    complete: bool = False
    bulk: bool = False
    """Whether the target's bulk-load session deferred its index (`BulkLoad`)."""
    check_seconds: float = 0.0
    """Time spent verifying the whole file before writing."""
    write_seconds: float = 0.0
    """Time spent writing batches (after the file was checked)."""
    index_seconds: float = 0.0
    """Time the bulk-load session spent building the deferred index at its end."""
    skipped_ports: dict[str, int] = field(factory=dict)
    """Ports left out on purpose (`skip=`) and how many of the file's items that left out."""
    forgotten: dict[str, int] = field(factory=lambda: dict.fromkeys(TYPES, 0))
    """The file's items of users forgotten in the target after the file was
    written (its audit trail's `forget_user` entries), left out, per type."""
    forgotten_users: int = 0
    """How many users the target's audit trail says were forgotten since the file
    was written (0 when `restore_forgotten`)."""

    def audit_counts(self) -> dict[str, int]:
        """What an audit entry records of this import: items written, updated
        (replaced), unchanged and skipped, over every kind."""
        return {
            "written": sum(self.written.values()),
            "updated": sum(self.updated.values()),
            "unchanged": sum(self.unchanged.values()),
            "skipped": sum(self.skipped.values()),
            "forgotten": sum(self.forgotten.values()),
        }

    def applied(self, kind: str) -> int:
        return self.written[kind] + self.updated[kind] + self.unchanged[kind]

    def describe(self) -> str:
        parts = []
        for kind in TYPES:
            w, u, n, s = (
                self.written[kind],
                self.updated[kind],
                self.unchanged[kind],
                self.skipped[kind],
            )
            if w or u or n or s:
                extra = [f"{u} updated"] * bool(u) + [f"{n} already there"] * bool(n)
                extra += [f"{s} skipped"] * bool(s)
                label = _LABELS[kind]
                parts.append(f"{label}: {w} new" + "".join(f", {x}" for x in extra))
        state = "complete" if self.complete else f"stopped after line {self.last_line}"
        resumed = f" (resumed after line {self.resumed_after})" if self.resumed_after else ""
        index = f"; bulk load, index built in {self.index_seconds:.1f} s" if self.bulk else ""
        left = "".join(
            f"; skipped {port} ({n} in the file)" for port, n in self.skipped_ports.items()
        )
        if sum(self.forgotten.values()):
            left += (
                f"; left out {sum(self.forgotten.values())} items of {self.forgotten_users} "
                "users forgotten since the file was written (--restore-forgotten imports them)"
            )
        return (
            f"import {state}{resumed}: " + ("; ".join(parts) or "nothing to import") + left + index
        )


class ImportFailed(PortabilityError):
    """An import stopped part-way; `summary` says exactly what was written, and
    re-running the import resumes after `summary.last_line`."""

    def __init__(self, summary: ImportSummary, cause: BaseException) -> None:
        super().__init__(f"{cause} — {summary.describe()}")
        self.summary = summary
        self.cause = cause


# -- export ---------------------------------------------------------------------


async def _owners(port: object, what: str) -> list[str]:
    if not isinstance(port, OwnerListing):
        raise ListingUnsupported(
            f"the {what} ({type(port).__name__}) cannot list its owners (no owners()): "
            "export one data subject with --user, or add OwnerListing to the adapter"
        )
    return await port.owners()


async def _records(
    store: MemoryStore, owner: str, namespace: str | None, page_size: int = _PAGE
) -> AsyncIterator[MemoryRecord]:
    cursor = None
    while True:
        page = await store.list(owner, namespace=namespace, limit=page_size, cursor=cursor)
        for record in page.records:
            yield record
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def domain_events(events: EventLog, domain: str) -> list[Event]:
    """Every live event of the domain itself (not the global events of others),
    newest first, paging back in event time by the port's `until` rule."""
    out: dict[str, Event] = {}
    until: datetime | None = None
    while True:
        window = await events.window(domain, since=_EPOCH, limit=MAX_LIMIT, until=until)
        for e in window.events:
            if e.domain == domain:
                out.setdefault(e.id, e)
        if not window.limited or not window.events:
            break
        oldest = window.events[-1].occurred_at
        whole = await events.window(domain, since=oldest, limit=MAX_LIMIT, until=oldest + _MICRO)
        if whole.limited:
            raise PortabilityError(
                f"domain {domain!r} has more than {MAX_LIMIT} events at {oldest.isoformat()}: "
                "the event log cannot page through them"
            )
        for e in whole.events:
            if e.domain == domain:
                out.setdefault(e.id, e)
        until = oldest
    return sorted(out.values(), key=lambda e: (e.occurred_at, e.id), reverse=True)


async def _owner_triples(triples: TripleStore, owner: str) -> list[Triple]:
    found = await triples.query(owner, limit=TRIPLE_LIMIT)
    if len(found) >= TRIPLE_LIMIT:
        raise PortabilityError(
            f"owner {owner!r} has {TRIPLE_LIMIT} or more triples: more than one query returns"
        )
    return found


def _checkpoint_prefix(owner: str) -> str:
    return checkpoint_key(owner, "-").split("/", 1)[0] + "/"


async def _cache_items(cache: Cache, scope: str, prefix: str = "") -> list[CacheItem]:
    if not isinstance(cache, CacheListing):
        raise ListingUnsupported(
            f"the cache ({type(cache).__name__}) cannot list its entries (no entries()): "
            "export without the cache (include_cache=False, --no-cache)"
        )
    return [
        CacheItem(scope=scope, key=e.key, value=e.value, expires_at=e.expires_at)
        for e in await cache.entries(scope, prefix)
    ]


async def export_data(
    ports: Ports,
    stream: IO[bytes],
    *,
    clock: Clock,
    user: str | None = None,
    namespace: str | None = None,
    include_cache: bool = True,
    include_leases: bool = False,
    progress: Progress | None = None,
    on_record: Callable[[MemoryRecord], None] | None = None,
    skip: Collection[str] = (),
    deployment: str | None = None,
    url: str | None = None,
) -> ExportSummary:
    """Write the ports' durable data to `stream` (see `format`). With `user`, a
    data-subject export: what `UserMemory.forget` would delete (the user's
    records, events carrying the id, the user's cache scope, knowledge derived
    from the user's data, the user's triples and checkpoints). `on_record` sees
    every record written (migrate samples them there, with no second read).
    `skip` leaves whole ports out (`PORTS`); `deployment` and `url` (redacted)
    are recorded in the header as the file's source. The re-embed switch entry
    is carried whenever the cache is (even with `include_cache=False`)."""
    skipped = check_skip(skip)
    ports = Ports(
        store=ports.store,
        events=None if "events" in skipped else ports.events,
        cache=None if "cache" in skipped else ports.cache,
        leases=None if "leases" in skipped else ports.leases,
        triples=None if "triples" in skipped else ports.triples,
        backend=ports.backend,
        audit=None if "audit" in skipped else ports.audit,
    )
    tick = progress or (lambda _stage, _done, _total: None)
    header = Header(
        version=FORMAT_VERSION,
        source=ports.backend,
        spaces=(ports.store.space,),
        created_at=clock.now(),
        user=user,
        namespace=namespace,
        includes=tuple(
            t
            for t in TYPES
            if (t != "cache" or include_cache)
            and (t != "lease" or include_leases)
            and t not in {PORTS[p] for p in skipped}
        ),
        deployment=deployment,
        url=url,
        skipped=skipped,
    )
    writer = ExportWriter(stream, header)
    sid = ports.store.space.identity
    events = ports.events
    domains = await events.domains() if events is not None else []
    if user is not None:
        mine = await events.user_events(user) if events is not None else []
        owners = [user]
    else:
        mine = []
        owners = await _owners(ports.store, "memory store")
    per_owner: dict[str, int] = {}
    for i, owner in enumerate(owners):
        async for record in _records(ports.store, owner, namespace):
            writer.write(RecordItem(space=sid, record=record))
            per_owner[owner] = per_owner.get(owner, 0) + 1
            if on_record is not None:
                on_record(record)
        tick("records", i + 1, len(owners))
    if user is not None and namespace is None:
        for domain in sorted({*domains, *(e.domain for e in mine)}):
            async for record in _records(ports.store, domain, None):
                if record.namespace == "knowledge" and derived_from(record, user, mine):
                    writer.write(RecordItem(space=sid, record=record))
                    per_owner[domain] = per_owner.get(domain, 0) + 1
                    if on_record is not None:
                        on_record(record)
    user_ids: set[str] = set(owners)
    if events is not None:
        if user is not None:
            for e in mine:
                writer.write(e)
        else:
            for i, domain in enumerate(domains):
                for e in await domain_events(events, domain):
                    writer.write(e)
                    if e.user_id is not None:
                        user_ids.add(e.user_id)
                tick("events", i + 1, len(domains))
    if ports.triples is not None:
        triple_owners = [user] if user is not None else await _owners(ports.triples, "triples")
        for owner in triple_owners:
            for t in await _owner_triples(ports.triples, owner):
                writer.write(t)
    if ports.cache is not None:
        switch = await ports.cache.get(SWITCH_SCOPE, SWITCH_KEY)
        if switch is not None:  # the space reads use: an import follows it too
            writer.write(CacheItem(SWITCH_SCOPE, SWITCH_KEY, switch, expires_at=None))
    if include_cache and ports.cache is not None:
        if user is not None:
            scopes: list[tuple[str, str]] = [
                (user_cache_scope(user), ""),
                (CHECKPOINT_SCOPE, _checkpoint_prefix(user)),
            ]
        else:
            names = {CHECKPOINT_SCOPE, *domains, *(user_cache_scope(u) for u in user_ids)}
            scopes = [(s, "") for s in sorted(names)]
        for i, (scope, prefix) in enumerate(scopes):
            for item in await _cache_items(ports.cache, scope, prefix):
                writer.write(item)
            tick("cache", i + 1, len(scopes))
    if include_leases and ports.leases is not None and user is None:
        for scope in sorted({*domains, *owners}):
            for lease in await ports.leases.scan(scope):
                writer.write(lease)
    if ports.audit is not None:
        # the trail moves with the data (a forget's entry keeps an older file
        # from bringing the user back); a data subject's export holds theirs
        for entry in reversed(await audit_entries(ports.audit)):
            if user is None or stored_subject(entry) == user:
                writer.write(entry)
    footer = writer.finish()
    return ExportSummary(counts=footer.counts, footer=footer, owners=per_owner, skipped=skipped)


async def audit_entries(audit: AuditLog | None, since: datetime | None = None) -> list[AuditEntry]:
    """Every entry of the trail (at or after `since`), newest first (none without one)."""
    return [entry async for entry in read_entries(audit, since=since)]


# -- import ---------------------------------------------------------------------


async def _import_records(ports: Ports, batch: Sequence[MemoryRecord], out: ImportSummary) -> None:
    try:
        await ports.store.add(batch)
        out.written["record"] += len(batch)
        return
    except DuplicateRecord:
        pass  # a re-run or a resumed import: reconcile one by one
    for record in batch:
        stored = await ports.store.get(record.owner, record.id)
        if stored is None:
            await ports.store.add([record])
            out.written["record"] += 1
        elif stored == record:
            out.unchanged["record"] += 1
        else:
            await ports.store.update(record)
            out.updated["record"] += 1


async def _apply(
    ports: Ports,
    kind: str,
    batch: list[Any],
    out: ImportSummary,
    now: datetime,
    *,
    keep_switch: bool = False,
) -> None:
    if kind == "record":
        await _import_records(ports, [i.record for i in batch], out)
    elif kind == "event":
        if ports.events is None:
            raise PortabilityError("the target serves no event log")
        new = await ports.events.append(batch)
        out.written["event"] += new
        out.unchanged["event"] += len(batch) - new
    elif kind == "triple":
        if ports.triples is None:
            raise PortabilityError("the target serves no triple store")
        new = await ports.triples.add(batch)
        out.written["triple"] += new
        out.unchanged["triple"] += len(batch) - new
    elif kind == "cache":
        if ports.cache is None:
            raise PortabilityError("the target serves no cache")
        for item in batch:
            if keep_switch and (item.scope, item.key) == (SWITCH_SCOPE, SWITCH_KEY):
                out.skipped["cache"] += 1  # the target's own switch leads to this space
                continue
            ttl = None if item.expires_at is None else item.expires_at - now
            if ttl is not None and ttl <= timedelta(0):
                out.skipped["cache"] += 1
                continue
            await ports.cache.put(item.scope, item.key, item.value, ttl)
            out.written["cache"] += 1
    elif kind == "audit":
        if ports.audit is None:
            raise PortabilityError("the target keeps no audit trail")
        for entry in batch:  # idempotent by id: a re-run stores nothing twice
            if await ports.audit.append(entry):
                out.written["audit"] += 1
            else:
                out.unchanged["audit"] += 1
    elif kind == "lease":
        if ports.leases is None:
            raise PortabilityError("the target serves no lease store")
        for lease in batch:
            ttl = lease.expires_at - now
            got = None
            if ttl > timedelta(0):
                got = await ports.leases.acquire(
                    lease.scope, lease.key, lease.owner, ttl, lease.payload
                )
            if got is None:
                out.skipped["lease"] += 1
            else:
                out.written["lease"] += 1


async def import_data(
    ports: Ports,
    open_stream: Callable[[], IO[bytes]],
    *,
    clock: Clock,
    batch_size: int = 500,
    resume_after: int = 0,
    on_batch: Callable[[int, ImportSummary], None] | None = None,
    progress: Progress | None = None,
    verified: tuple[Header, Footer, Sequence[int]] | None = None,
    skip: Collection[str] = (),
    replace: bool = False,
    target_deployment: str | None = None,
    keep_switch: bool = False,
    restore_forgotten: bool = False,
) -> ImportSummary:
    """Import an export file into `ports`: idempotent (a re-run changes nothing and
    duplicates nothing) and resumable (`resume_after`: lines up to it are skipped).

    The whole file is verified first (format version, every line, dimensions,
    footer counts and checksum), so a bad file writes nothing; `verified` is the
    `(header, footer, fingerprints)` of an `ExportReader.verify()` the caller
    already ran on this file (the writing pass then skips re-validating records).
    `on_batch(line, summary)` runs after each batch is stored: persist `line` to
    resume after it. A target store with the `BulkLoad` capability is written in
    one bulk-load session (same batches, its index built once at the end).
    A failure while writing raises `ImportFailed` carrying the exact summary.

    `skip` leaves the file's items of those ports (`PORTS`) out. Unless `replace`,
    an import that would change stored records (same owner and id, other content)
    raises `WouldReplace` with their count before writing anything.

    `keep_switch`: the target reads the file's space already and records its
    own re-embed switch: the file's switch entry is skipped, not written over it
    (a switch from another configured space would move the target's reads away).

    A forget is not undone by restoring an older file: the items of users the
    target's audit trail says were forgotten after the file was written
    (`forget_user` entries at or after the header's `created_at`) are left
    out — what `UserMemory.forget` removes, `ForgottenUsers` — and counted in
    `forgotten`, unless `restore_forgotten`."""
    skipped = check_skip(skip)
    left_out = {PORTS[p] for p in skipped}
    require_positive(batch_size, "batch_size")
    checking = time.perf_counter()
    if verified is None:
        with open_stream() as stream:
            reader = ExportReader(stream)
            verified = (*reader.verify(), reader.fingerprints)
    header, footer, fingerprints = verified
    checked = time.perf_counter() - checking
    spaces = {s.identity for s in header.spaces}
    if spaces and ports.store.space.identity not in spaces:
        raise PortabilityError(
            f"the target store is bound to space {ports.store.space.identity!r}, the file holds "
            f"{sorted(spaces)}: open the target in the file's space (or re-embed afterwards)"
        )
    needs: dict[str, object] = {
        "event": ports.events,
        "triple": ports.triples,
        "cache": ports.cache,
        "lease": ports.leases,
        "audit": ports.audit,
    }
    missing = [
        k
        for k, port in needs.items()
        if footer.counts.get(k) and port is None and k not in left_out
    ]
    if missing:  # refused before anything is written
        names = [p for p, k in PORTS.items() if k in missing]
        raise PortabilityError(
            f"the file holds {', '.join(f'{footer.counts[k]} {k}s' for k in missing)}, which the "
            f"target ({ports.backend}) has no port for; nothing was imported "
            f"(leave them out with {' '.join(f'--skip {n}' for n in names)})"
        )
    forgotten = (
        None
        if restore_forgotten
        else await forgotten_since(ports, header.created_at, open_stream, fingerprints)
    )
    if not replace:
        changing = await count_replaced(
            ports, open_stream, fingerprints, resume_after, forgotten=forgotten
        )
        if changing:
            raise WouldReplace(
                changing,
                source_deployment=header.deployment,
                target_deployment=target_deployment,
            )
    total = footer.lines
    out = ImportSummary(resumed_after=resume_after, last_line=resume_after, check_seconds=checked)
    if forgotten is not None:
        out.forgotten_users = len(forgotten.users)
    out.skipped_ports = {p: footer.counts.get(k, 0) for p, k in PORTS.items() if p in skipped}
    tick = progress or (lambda _stage, _done, _total: None)
    kind: str | None = None
    batch: list[Any] = []
    last = resume_after

    # A forget completing while the import runs: its user's items are left out
    # from the next batch on, and what was written of them is removed at the end
    # (of every forgotten user: an interrupted run of this file, resumed or
    # restarted now, may have stored a batch of theirs while their forget ran).
    checked_at = clock.now()

    async def recheck() -> None:
        nonlocal forgotten, checked_at
        if restore_forgotten or (ports.audit is None and ports.cache is None):
            return
        # the forgets in progress first, then the trail: a forget removes its
        # mark only after its entry is written, so none slips between the reads
        running = await being_forgotten(ports.cache)
        since, checked_at = checked_at - _FORGET_CHECK_SLACK, clock.now()
        known = frozenset() if forgotten is None else forgotten.users
        if not running - known and not await _forgets_since(ports, since, known):
            return
        forgotten = await forgotten_since(
            ports, header.created_at, open_stream, fingerprints, running=running | known
        )
        out.forgotten_users = 0 if forgotten is None else len(forgotten.users)

    async def flush() -> None:
        nonlocal batch
        if batch and kind is not None:
            await recheck()
            if forgotten is not None:
                kept = [item for item in batch if not _holds(forgotten, item)]
                out.forgotten[kind] += len(batch) - len(kept)
                batch = kept
        if batch and kind is not None:
            await _apply(ports, kind, batch, out, clock.now(), keep_switch=keep_switch)
            batch = []
            out.last_line = last
            if on_batch is not None:
                on_batch(last, out)
            tick("import", last, total)

    # Records still to write (records come first in an export; an upper bound
    # otherwise). The session opens even for none: an interrupted bulk load's
    # index is rebuilt by the run that resumes it, whatever is left to write.
    expected = max(0, min(footer.counts.get("record", 0), total - max(resume_after, 1)))
    session: AbstractAsyncContextManager[bool] = contextlib.nullcontext(False)
    if isinstance(ports.store, BulkLoad):
        session = ports.store.bulk_load(expected)
    tick("import", resume_after, total)
    started = time.perf_counter()
    written: float | None = None
    try:
        async with session as bulk:
            out.bulk = bulk
            with open_stream() as stream:
                for number, item in ExportReader(stream, checked=fingerprints).items():
                    if number <= resume_after:
                        continue
                    item_kind = _kind(item)
                    if item_kind in left_out:
                        continue
                    if forgotten is not None and _holds(forgotten, item):
                        out.forgotten[item_kind] += 1
                        last = number
                        continue
                    if item_kind != kind or len(batch) >= batch_size:
                        await flush()
                        kind = item_kind
                    batch.append(item)
                    last = number
                await flush()
                batch, kind = [], None
            await recheck()
            if forgotten is not None:
                await _unwrite(
                    ports, forgotten, forgotten.users, open_stream, fingerprints, left_out
                )
            written = time.perf_counter()
            if bulk:
                tick("index", 0, None)
        if out.bulk and written is not None:
            out.index_seconds = time.perf_counter() - written
    except ExportFormatError:
        raise
    except Exception as exc:
        raise ImportFailed(out, exc) from exc
    finally:
        out.write_seconds = (written or time.perf_counter()) - started
    out.last_line = total
    out.complete = True
    return out


#: How far before the last check a forget's audit entry may be stamped (the
#: clocks of the forgetting process and the importing one may differ).
_FORGET_CHECK_SLACK = timedelta(minutes=5)


async def _forgets_since(ports: Ports, since: datetime, known: frozenset[str]) -> bool:
    """Whether the target's audit trail holds a `forget_user` at or after `since`
    of a user not in `known`."""
    async for entry in read_entries(ports.audit, since=since):
        if entry.operation == "forget_user" and stored_subject(entry) not in known:
            return True
    return False


async def _unwrite(
    ports: Ports,
    forgotten: ForgottenUsers,
    users: frozenset[str],
    open_stream: Callable[[], IO[bytes]],
    fingerprints: Sequence[int] | None,
    left_out: Collection[str] = (),
) -> None:
    """Remove what an import of this file wrote of `users`, forgotten since it
    was written (a batch stored while their forget was deleting, by this run or
    by an interrupted one it resumes or restarts), of every kind the file carries
    (what `UserMemory.forget` removes): the file's records of theirs (their
    facts, derived knowledge, registry entries) that the target holds as the
    file has them (a record written since is kept); their events when every
    event the target holds of theirs is one of the file's (an event appended
    since keeps them all: `erase_user` has no per-event form); the triples of
    each of their loops when every triple the target holds in that loop is one
    of the file's, as the file has it (`delete_scope` per loop is the finest
    the port deletes); and the file's cache entries of theirs (their scope,
    their checkpoints, the digests their events fed) that hold the file's value
    (read, then deleted: the port has no conditional delete, so a value written
    between the two is lost). Kinds the import left out (`left_out`) are not
    touched."""
    late = ForgottenUsers(
        users, tuple(e for e in forgotten.events if e.user_id in users), forgotten.loops
    )
    file_events: dict[str, set[tuple[str, str]]] = {u: set() for u in users}
    file_triples: dict[tuple[str, str], dict[tuple[str, str, str], Triple]] = {}
    file_cache: list[CacheItem] = []
    pending: dict[str, MemoryRecord] = {}  # the file's records of theirs, of one owner
    with open_stream() as stream:
        for _, item in ExportReader(stream, checked=fingerprints).items():
            if isinstance(item, RecordItem) and late.holds_record(item.record):
                record = item.record
                if pending and (
                    record.owner != next(iter(pending.values())).owner or len(pending) >= MAX_LIMIT
                ):
                    await _unwrite_records(ports.store, pending)
                pending[record.id] = record
            elif isinstance(item, Event) and item.user_id in file_events:
                file_events[item.user_id].add((item.domain, item.id))
            elif isinstance(item, Triple) and late.holds_triple(item.owner):
                filed = file_triples.setdefault((item.owner, item.loop), {})
                filed[(item.subject, item.predicate, item.object)] = item
            elif isinstance(item, CacheItem) and late.holds_cache(item.scope, item.key):
                file_cache.append(item)
    if pending:
        await _unwrite_records(ports.store, pending)
    if ports.events is not None and "event" not in left_out:
        for user, ours in file_events.items():
            held = {(e.domain, e.id) for e in await ports.events.user_events(user)}
            if held and held <= ours:
                await ports.events.erase_user(user)
    if ports.triples is not None and "triple" not in left_out:
        for (owner, loop), theirs in file_triples.items():
            stored = await ports.triples.query(owner, loop=loop, limit=TRIPLE_LIMIT)
            if stored and len(stored) < TRIPLE_LIMIT and all(_filed(t, theirs) for t in stored):
                await ports.triples.delete_scope(owner, loop=loop)
    if ports.cache is not None and "cache" not in left_out:
        for entry in file_cache:
            if await ports.cache.get(entry.scope, entry.key) == entry.value:
                await ports.cache.delete(entry.scope, entry.key)


def _filed(triple: Triple, theirs: dict[tuple[str, str, str], Triple]) -> bool:
    """Whether `triple` is one of `theirs` (the file's triples of its loop), as
    the file has it."""
    want = theirs.get((triple.subject, triple.predicate, triple.object))
    return want is not None and not compare_triples(triple, want)


async def _unwrite_records(store: MemoryStore, pending: dict[str, MemoryRecord]) -> None:
    """Delete the records of `pending` (the file's, all of one owner) that
    `store` holds as the file has them, then empty `pending`. The owner is read
    by listing pages (in their one namespace, when they share it), not a read
    per record; a record rewritten since is kept (on a `VersionedWrites` store
    also when it is rewritten between the listing and the delete)."""
    first = next(iter(pending.values()))
    namespaces = {r.namespace for r in pending.values()}
    namespace = first.namespace if len(namespaces) == 1 else None
    doomed = [
        stored
        async for stored in _records(store, first.owner, namespace)
        if pending.get(stored.id) == stored
    ]
    pending.clear()
    for record in doomed:
        if isinstance(store, VersionedWrites):  # kept if rewritten since
            await store.delete_if_unchanged(record.owner, record.id, record.updated_at)
        else:
            await store.delete(record.owner, record.id)


async def count_replaced(
    ports: Ports,
    open_stream: Callable[[], IO[bytes]],
    fingerprints: Sequence[int] | None = None,
    resume_after: int = 0,
    *,
    forgotten: ForgottenUsers | None = None,
) -> int:
    """How many of the file's records (after line `resume_after`) the target
    holds with other content: what an import would replace (the records of
    `forgotten` users are left out, not replaced). Reads the target one owner at
    a time, by listing pages (no read per record); writes nothing."""
    held: set[str] | None = None
    if isinstance(ports.store, OwnerListing):
        held = set(await ports.store.owners())
        if not held:
            return 0  # an empty target (a fresh migrate): nothing to compare
    changed = 0
    owner: str | None = None
    stored: dict[str, MemoryRecord] = {}
    with open_stream() as stream:
        for number, item in ExportReader(stream, checked=fingerprints).items():
            if number <= resume_after or not isinstance(item, RecordItem):
                continue
            record = item.record
            if held is not None and record.owner not in held:
                continue
            if forgotten is not None and forgotten.holds_record(record):
                continue
            if record.owner != owner:
                owner = record.owner
                stored = {r.id: r async for r in _records(ports.store, owner, None, MAX_LIMIT)}
            have = stored.get(record.id)
            if have is not None and have != record:
                changed += 1
    return changed


async def forgotten_since(
    ports: Ports,
    written: datetime,
    open_stream: Callable[[], IO[bytes]],
    fingerprints: Sequence[int] | None = None,
    *,
    running: Collection[str] | None = None,
) -> ForgottenUsers | None:
    """The users the target's audit trail says were forgotten (`forget_user`)
    at or after `written` (when the file was written), and those whose forget
    is in progress (`forget_marks`; `running`: read already), with the file's
    events of theirs and loops of their triples (what their derived data is
    found by); None when there are none (or the target keeps no audit trail and
    no cache)."""
    if running is None:  # before the trail: a forget unmarks after its entry
        running = await being_forgotten(ports.cache)
    users = set(running)
    users.update(
        subject
        for entry in await audit_entries(ports.audit, since=written)
        if entry.operation == "forget_user" and (subject := stored_subject(entry)) is not None
    )
    if not users:
        return None
    events: list[Event] = []
    loops: set[tuple[str, str]] = set()
    with open_stream() as stream:
        for _, item in ExportReader(stream, checked=fingerprints).items():
            if isinstance(item, Event) and item.user_id in users:
                events.append(item)
            elif isinstance(item, Triple) and item.owner in users:
                loops.add((item.owner, item.loop))
    return ForgottenUsers(frozenset(users), tuple(events), frozenset(loops))


def _holds(forgotten: ForgottenUsers, item: Item) -> bool:
    if isinstance(item, RecordItem):
        return forgotten.holds_record(item.record)
    if isinstance(item, Event):
        return forgotten.holds_event(item)
    if isinstance(item, Triple):
        return forgotten.holds_triple(item.owner)
    if isinstance(item, CacheItem):
        return forgotten.holds_cache(item.scope, item.key)
    return False


def _kind(item: Item) -> str:
    if isinstance(item, RecordItem):
        return "record"
    if isinstance(item, Event):
        return "event"
    if isinstance(item, Triple):
        return "triple"
    if isinstance(item, CacheItem):
        return "cache"
    if isinstance(item, Lease):
        return "lease"
    if isinstance(item, AuditEntry):
        return "audit"
    raise TypeError(type(item).__name__)  # pragma: no cover - parse_item made it


# -- verification -------------------------------------------------------------------


def compare_records(got: MemoryRecord | None, want: MemoryRecord) -> list[str]:
    """Field-by-field differences (timestamps within 1 ms, vectors to float32)."""
    where = f"record {want.owner!r}/{want.id!r}"
    if got is None:
        return [f"{where} is missing"]
    problems = []
    for name in ("namespace", "kind", "content", "context", "attributes"):
        if getattr(got, name) != getattr(want, name):
            problems.append(f"{where}: {name} differs")
    if not math.isclose(got.importance, want.importance, abs_tol=1e-6):
        problems.append(f"{where}: importance differs")
    for name in ("created_at", "updated_at"):
        if abs(getattr(got, name) - getattr(want, name)) > timedelta(milliseconds=1):
            problems.append(f"{where}: {name} differs")
    if got.vector.shape != want.vector.shape or not np.array_equal(
        got.vector.astype(np.float32), want.vector.astype(np.float32)
    ):
        problems.append(f"{where}: vector differs")
    return problems


def compare_events(got: Event | None, want: Event) -> list[str]:
    """Field-by-field differences of an event (times within 1 ms)."""
    where = f"event {want.domain!r}/{want.id!r}"
    if got is None:
        return [f"{where} is missing on the target"]
    times = ("occurred_at", "recorded_at")
    if any(abs(getattr(got, n) - getattr(want, n)) > timedelta(milliseconds=1) for n in times):
        return [f"{where} differs on the target: {', '.join(times)}"]
    differ = [
        a.name
        for a in attrs.fields(Event)
        if a.name not in times and getattr(got, a.name) != getattr(want, a.name)
    ]
    return [f"{where} differs on the target: {', '.join(differ)}"] if differ else []


def compare_triples(got: Triple | None, want: Triple) -> list[str]:
    """Differences of a triple of the same identity (its time within 1 ms)."""
    where = f"triple {want.key!r}"
    if got is None:
        return [f"{where} is missing on the target"]
    if got.source != want.source or abs(got.created_at - want.created_at) > timedelta(
        milliseconds=1
    ):
        return [f"{where} differs on the target: created_at or source"]
    return []


async def verify_copy(
    source: Ports,
    target: Ports,
    *,
    counts: dict[str, int],
    sample: Iterable[MemoryRecord],
    owner_counts: dict[str, int] | None = None,
    skip: Collection[str] = (),
) -> list[str]:
    """Problems found comparing the target with what the source holds (its store
    in the space it was opened in: the one `connect()` reads): per-port counts
    (records per owner, events per domain, triples), every record of the source
    by identity (the target's own records do not make up for one it lacks),
    every event and triple field by field (an event or triple of the same
    identity the target held already is kept by the import, whatever it says)
    and a sample of records field by field. Empty when the copy is faithful. The source is counted
    itself, never taken from the export, so an export that missed records
    (`counts`, `owner_counts`: what it wrote) fails too. `skip`: ports left out."""
    skipped = check_skip(skip)
    problems: list[str] = []
    src_owners = await _owners(source.store, "source store")
    dst_owners = await _owners(target.store, "target store")
    if set(src_owners) - set(dst_owners):
        problems.append(
            f"owners missing on the target: {sorted(set(src_owners) - set(dst_owners))[:5]}"
        )
    records = 0
    held = 0
    for owner in src_owners:
        # by identity, not count: the target's own records of the owner must not
        # make up for one of the source it lacks; and each one field by field
        # against what the source holds now (a writer may have changed it since
        # the export read it)
        dst_records = {r.id: r async for r in _records(target.store, owner, None, MAX_LIMIT)}
        src_ids: set[str] = set()
        differ: list[str] = []
        async for record in _records(source.store, owner, None, MAX_LIMIT):
            src_ids.add(record.id)
            if record.id in dst_records:
                differ += compare_records(dst_records[record.id], record)
        dst_ids = set(dst_records)
        problems += differ[:5]
        if len(differ) > 5:
            problems.append(f"owner {owner!r}: {len(differ)} record differences")
        n_src, n_dst = len(src_ids), len(dst_ids)
        held += n_src
        records += n_dst
        if n_dst < n_src:
            problems.append(
                f"owner {owner!r}: {n_src} records on the source, {n_dst} on the target"
            )
        lacking = sorted(src_ids - dst_ids)
        if lacking:
            problems += [f"record {owner!r}/{i!r} is missing on the target" for i in lacking[:5]]
            if len(lacking) > 5:
                problems.append(f"owner {owner!r}: {len(lacking)} records missing on the target")
        if owner_counts is not None and owner_counts.get(owner, 0) < n_src:
            problems.append(
                f"owner {owner!r}: {n_src} records on the source, "
                f"{owner_counts.get(owner, 0)} exported"
            )
        elif owner_counts is not None and owner_counts.get(owner, 0) > n_src:
            problems.append(_changed(owner, owner_counts[owner], n_src))
    gone = set(owner_counts or ()) - set(src_owners)
    for owner in sorted(gone)[:5]:  # every record deleted since the export read them
        assert owner_counts is not None
        problems.append(_changed(owner, owner_counts[owner], 0))
    if records < counts.get("record", 0):
        problems.append(f"{counts['record']} records exported, {records} on the target")
    if counts.get("record", 0) < held:
        problems.append(f"{held} records on the source, {counts.get('record', 0)} exported")
    if source.events is not None and target.events is not None and "events" not in skipped:
        for domain in await source.events.domains():
            src_events = await domain_events(source.events, domain)
            dst_events = {e.id: e for e in await domain_events(target.events, domain)}
            n_src, n_dst = len(src_events), len(dst_events)
            if n_dst < n_src:
                problems.append(
                    f"domain {domain!r}: {n_src} events on the source, {n_dst} on the target"
                )
            # every event, field by field: an append is idempotent by id, so a
            # target holding another event under the same id keeps it
            for event in src_events:
                problems += compare_events(dst_events.get(event.id), event)
    if source.triples is not None and target.triples is not None and "triples" not in skipped:
        src_total = 0
        for owner in await _owners(source.triples, "source triples"):
            src_triples = await _owner_triples(source.triples, owner)
            src_total += len(src_triples)
            dst_triples = {t.key: t for t in await _owner_triples(target.triples, owner)}
            n_src, n_dst = len(src_triples), len(dst_triples)
            if n_dst < n_src:
                problems.append(
                    f"triples of {owner!r}: {n_src} on the source, {n_dst} on the target"
                )
            for triple in src_triples:  # by identity, then field by field
                problems += compare_triples(dst_triples.get(triple.key), triple)
        if counts.get("triple", 0) > src_total:  # some deleted since the export read them
            problems.append(
                f"{counts['triple']} triples exported, {src_total} on the source now: "
                "the source changed during the migration (the target holds its earlier state)"
            )
    if source.audit is not None and target.audit is not None and "audit" not in skipped:
        held_ids = {e.id for e in await audit_entries(target.audit)}
        lost = [e.id for e in await audit_entries(source.audit) if e.id not in held_ids]
        if lost:
            problems.append(f"{len(lost)} audit entries of the source are not on the target")
    for record in sample:
        problems += compare_records(await target.store.get(record.owner, record.id), record)
    return problems


def _changed(owner: str, exported: int, now: int) -> str:
    return (
        f"owner {owner!r}: {exported} records exported, {now} on the source now: the source "
        "changed during the migration (the target holds records the source deleted)"
    )


def reservoir(k: int, seed: int = 0) -> tuple[list[MemoryRecord], Callable[[MemoryRecord], None]]:
    """A uniform sample of at most k records from a stream (reservoir sampling)."""
    rng = random.Random(seed)
    kept: list[MemoryRecord] = []
    seen = 0

    def offer(record: MemoryRecord) -> None:
        nonlocal seen
        seen += 1
        if len(kept) < k:
            kept.append(record)
        else:
            j = rng.randrange(seen)
            if j < k:
                kept[j] = record

    return kept, offer

"""Re-embedding: build a store in a new embedding space from the stored content of
the old one, in batches and resumably, leaving the old space intact; then record
the switch so `connect()` reads from the new space (see `EmbeddingSwitch`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import attrs
from attrs import define, frozen

from agent_memory.domain.errors import DuplicateRecord, NotFound
from agent_memory.domain.langgraph_layout import holds_path_only
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.domain.validation import require_positive
from agent_memory.ports.models import Embedder
from agent_memory.ports.storage import Cache, CacheListing, MemoryStore, VersionedWrites
from agent_memory.services.portability.errors import PortabilityError
from agent_memory.services.portability.format import space_json
from agent_memory.services.portability.transfer import (
    SWITCH_KEY,
    SWITCH_SCOPE,
    _owners,
    _records,
)

__all__ = [
    "SPACES_KEY",
    "SPACE_PREFIX",
    "SWITCH_KEY",
    "SWITCH_SCOPE",
    "EmbeddingSwitch",
    "ReembedSummary",
    "drop_space",
    "holds_records",
    "read_spaces",
    "read_switch",
    "record_space",
    "reembed",
    "write_switch",
]

#: Where the spaces that may hold the deployment's records are listed (next to
#: the switch, `SWITCH_SCOPE`): a re-embed adds its source and target before it
#: copies anything, and a space stays listed (`--drop-old` empties it, and a
#: process connected before the switch may still write there). A forget deletes
#: in every listed space, so a kept old space or a half-built new one holds
#: nothing forgotten.
#: One entry per space, key `SPACE_PREFIX + space.identity`, so two re-embeds
#: recording at once never overwrite each other's; a cache without
#: `CacheListing` (which cannot enumerate them) keeps the list in one entry,
#: `SPACES_KEY`, which lists written before per-space entries existed also use.
SPACE_PREFIX = "space/"
SPACES_KEY = "spaces"

# Where the switch is recorded (`SWITCH_SCOPE`, `SWITCH_KEY`): one cache entry
# without ttl, in the deployment's coordination cache (the one `connect()` opens
# next to the memory store); defined beside the export that carries it.


@define
class ReembedSummary:
    owners: int = 0
    records: int = 0
    embedded: int = 0
    """Records embedded and stored in the new space by this run."""
    already: int = 0
    """Records the new space already held (an earlier, interrupted run)."""
    removed: int = 0
    """Records deleted from the new space because the old one no longer holds them
    (deleted while the copy ran)."""
    deleted_since: int = 0
    """Completing after the switch: records of the old space the new one deleted
    since the switch (not copied back)."""
    complete: bool = False
    dropped: int = 0
    """With `drop_old`: records deleted from the old space."""
    old_kept: bool = False
    """With `drop_old`: the old space still holds records the new one does not
    hold unchanged (written there since the copy); a run again copies them."""


@frozen
class EmbeddingSwitch:
    """Reads of the deployment moved from space `old` to `new` (embedded by
    `provider`: "hashing" or "openai", with `model`)."""

    old: str
    new: EmbeddingSpace
    provider: str
    switched_at: datetime

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "version": 1,
            "old": self.old,
            "new": space_json(self.new),
            "provider": self.provider,
            "switched_at": self.switched_at.isoformat(),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> EmbeddingSwitch:
        try:
            body = json.loads(raw)
            return cls(
                old=str(body["old"]),
                new=_space_of(body["new"]),
                provider=str(body["provider"]),
                switched_at=datetime.fromisoformat(body["switched_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PortabilityError(f"the embedding switch record is unreadable: {exc}") from None


def _space_of(body: Any) -> EmbeddingSpace:
    return EmbeddingSpace(
        model=body["model"],
        dimension=body["dimension"],
        revision=body.get("revision", ""),
        provable=bool(body.get("provable", True)),
    )


async def read_spaces(cache: Cache) -> list[EmbeddingSpace]:
    """The spaces that may hold the deployment's records: those of the one-entry
    list (`SPACES_KEY`) in the order recorded, then the per-space entries
    (`SPACE_PREFIX`) by identity, each space once; `PortabilityError` when an
    entry is unreadable."""
    found = {space.identity: space for space in await _listed(cache)}
    if isinstance(cache, CacheListing):
        for entry in await cache.entries(SWITCH_SCOPE, SPACE_PREFIX):
            (space,) = _parsed(entry.value, one_entry=False)
            found.setdefault(space.identity, space)
    return list(found.values())


def _parsed(raw: bytes, *, one_entry: bool) -> list[EmbeddingSpace]:
    """The spaces of the one-entry list (`one_entry`) or of one space's entry;
    `PortabilityError` when it is unreadable."""
    try:
        body = json.loads(raw)
        return [_space_of(b) for b in body["spaces"]] if one_entry else [_space_of(body)]
    except (KeyError, TypeError, ValueError) as exc:
        raise PortabilityError(f"the list of embedding spaces is unreadable: {exc}") from None


async def _listed(cache: Cache) -> list[EmbeddingSpace]:
    """The spaces of the one-entry list (`SPACES_KEY`)."""
    raw = await cache.get(SWITCH_SCOPE, SPACES_KEY)
    return [] if raw is None else _parsed(raw, one_entry=True)


async def _write_spaces(cache: Cache, spaces: list[EmbeddingSpace]) -> None:
    body = {"version": 1, "spaces": [space_json(s) for s in spaces]}
    await cache.put(SWITCH_SCOPE, SPACES_KEY, json.dumps(body, sort_keys=True).encode())


async def record_space(cache: Cache, space: EmbeddingSpace) -> None:
    """List `space` among the spaces that may hold records (once): its own entry
    where the cache can list entries (a write that races no other), else in the
    one-entry list (read, then written)."""
    if isinstance(cache, CacheListing):
        value = json.dumps(space_json(space), sort_keys=True).encode()
        await cache.put(SWITCH_SCOPE, SPACE_PREFIX + space.identity, value)
        return
    spaces = await _listed(cache)
    if all(s.identity != space.identity for s in spaces):
        await _write_spaces(cache, [*spaces, space])


#: Passes `reembed` makes over the old space at most: the copy, then checks that
#: copy what was written, changed or deleted meanwhile, until one finds nothing.
MAX_PASSES = 5


#: Every field a copy keeps (all but the vector, which it re-embeds).
_KEPT = tuple(f.name for f in attrs.fields(MemoryRecord) if f.name != "vector")


def _same(a: MemoryRecord, b: MemoryRecord) -> bool:
    """The same record apart from its vector (what a copy keeps)."""
    return all(getattr(a, name) == getattr(b, name) for name in _KEPT)


async def reembed(
    old: MemoryStore,
    new: MemoryStore,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    progress: Callable[[str, int, int | None], None] | None = None,
    mirror_deletes: bool = True,
    switched_at: datetime | None = None,
) -> ReembedSummary:
    """Make `new` (another space) hold every record of `old`, each with a vector
    of `embedder` for its content. Resumable: records `new` already holds
    unchanged are skipped, so an interrupted run continues where it stopped.
    `old` is not changed.

    Writers may go on meanwhile: after the copy, further passes re-embed what
    was added or changed in `old` since (a record whose fields differ from its
    copy), and with `mirror_deletes` (while reads do not use `new` yet, so only
    this copy writes there) delete from `new` what was deleted from `old`, until
    a pass finds nothing; `complete` is True then. Still changing after
    `MAX_PASSES` passes, the run stops with `complete` False (run it again).
    Without `mirror_deletes` (reads use `new` already, and writers with them) a
    record `new` holds is replaced only by a later version from `old`, and, with
    `switched_at` (when reads moved), one `new` lacks is copied only when written
    after the switch: an older one was copied before it, so `new` deleted it
    since, and it is not brought back."""
    if embedder.space != new.space:
        raise PortabilityError(
            f"the embedder's space {embedder.space.identity!r} is not the new store's "
            f"{new.space.identity!r}"
        )
    if old.space.identity == new.space.identity:
        raise PortabilityError(f"the new space is the old one ({old.space.identity!r})")
    require_positive(batch_size, "batch_size")
    out = ReembedSummary()
    tick = progress or (lambda _stage, _done, _total: None)
    for first in [True] + [False] * (MAX_PASSES - 1):
        changed = await _pass(old, new, embedder, batch_size, out, tick if first else None,
                              first=first, mirror_deletes=mirror_deletes,
                              switched_at=switched_at)  # fmt: skip
        if not changed:
            out.complete = True
            break
    return out


async def _pass(
    old: MemoryStore,
    new: MemoryStore,
    embedder: Embedder,
    batch_size: int,
    out: ReembedSummary,
    tick: Callable[[str, int, int | None], None] | None,
    *,
    first: bool,
    mirror_deletes: bool,
    switched_at: datetime | None,
) -> int:
    """One pass over every owner: embed into `new` what it lacks or holds changed,
    delete what `old` no longer holds (`mirror_deletes`); the number of changes.
    The first pass fills the summary's counts; later ones add what they embed."""
    owners = await _owners(old, "old store")
    if mirror_deletes:
        gone = set(await _owners(new, "new store")) - set(owners)
        owners += sorted(gone)
    changes = 0
    for i, owner in enumerate(owners):
        have = {r.id: r async for r in _records(new, owner, None)}
        pending: list[MemoryRecord] = []
        seen: set[str] = set()
        async for record in _records(old, owner, None):
            if holds_path_only(record):
                raise PortabilityError(
                    f"owner {owner!r} has LangGraph vector records that hold their path, "
                    "not their text (written before vector records held it): a re-embed "
                    "would embed the path. Run `await agent_memory.langgraph.AgentMemoryStore("
                    "memory).areindex()` on this deployment once, then re-embed"
                )
            seen.add(record.id)
            if first:
                out.records += 1
            held = have.get(record.id)
            if (
                held is None
                and not mirror_deletes
                and switched_at is not None
                and record.updated_at <= switched_at
            ):
                out.deleted_since += int(first)  # deleted from `new` after the switch
                continue
            if held is not None and (
                _same(held, record)
                # reads use `new` already: its own later write wins over the origin's
                or (not mirror_deletes and held.updated_at >= record.updated_at)
            ):
                out.already += int(first)
                continue
            pending.append(record)
            if len(pending) >= batch_size:
                out.embedded += await _embed_batch(
                    new, embedder, pending, have, old, mirror_deletes
                )
                changes += len(pending)
                pending = []
        if pending:
            out.embedded += await _embed_batch(new, embedder, pending, have, old, mirror_deletes)
            changes += len(pending)
        if mirror_deletes:
            for record_id in sorted(set(have) - seen):  # deleted from `old` since
                if await new.delete(owner, record_id):
                    out.removed += 1
                    changes += 1
        if first:
            out.owners += 1
        if tick is not None:
            tick("reembed", i + 1, len(owners))
    return changes


async def _embed_batch(
    new: MemoryStore,
    embedder: Embedder,
    batch: list[MemoryRecord],
    held: Mapping[str, MemoryRecord],
    old: MemoryStore,
    mirror_deletes: bool,
) -> int:
    """Embed `batch` into `new`: added, or replacing the version `new` holds
    (`held`). Without `mirror_deletes` (after the switch, where no later pass
    mirrors deletions) a record deleted from `old` while this batch was embedded
    (a forget reaching both spaces) is deleted again from `new` at once.

    Without `mirror_deletes` writers use `new` too, so a version `new` holds is
    replaced only by a later one: in one conditional write where `new` has
    `VersionedWrites` (no writer's version can land between the check and the
    write), else by reading it again right before replacing it."""
    vectors = await embedder.embed([r.content for r in batch])
    copies = [attrs.evolve(r, vector=vectors[i]) for i, r in enumerate(batch)]
    fresh = [c for c in copies if c.id not in held]
    if fresh:
        await new.add(fresh)
    for copy in copies:
        if copy.id not in held:
            continue
        if not mirror_deletes and isinstance(new, VersionedWrites):
            if await new.update_if_older(copy):
                continue
            if await new.get(copy.owner, copy.id) is not None:
                continue  # `new` holds a version as late or later: a writer's
            # deleted from `new` meanwhile: the checks below decide
            with contextlib.suppress(DuplicateRecord):  # a writer added it again
                await new.add([copy])
            continue
        if not mirror_deletes:
            now = await new.get(copy.owner, copy.id)
            if now is not None and now.updated_at >= copy.updated_at:
                continue
        try:
            await new.update(copy)
        except NotFound:  # deleted from `new` meanwhile: the checks below decide
            await new.add([copy])
    if not mirror_deletes:
        for copy in copies:
            if await old.get(copy.owner, copy.id) is None:
                await new.delete(copy.owner, copy.id)
    return len(batch)


def _superseded(record: MemoryRecord, held: MemoryRecord | None, switched_at: datetime) -> bool:
    """Whether the new space makes an old-space record redundant: it holds it
    unchanged or in a version as late, or it deleted it after the switch (it is
    older than the switch, so it was copied before)."""
    if held is None:
        return record.updated_at <= switched_at
    return _same(held, record) or held.updated_at >= record.updated_at


async def drop_space(old: MemoryStore, new: MemoryStore, switched_at: datetime) -> int:
    """Delete the records of the old space that the new one makes redundant
    (`_superseded`; after a complete switch at `switched_at`); the count. A
    record written to the old space after the switch (by a process connected
    before it) that the new space lacks or holds older is kept, so nothing
    acknowledged is lost: a re-embed run again copies it, then drops it."""
    removed = 0
    versioned = old if isinstance(old, VersionedWrites) else None
    for owner in await _owners(old, "old store"):
        have = {r.id: r async for r in _records(new, owner, None)}
        doomed = [
            (r.id, r.updated_at)
            async for r in _records(old, owner, None)
            if _superseded(r, have.get(r.id), switched_at)
        ]
        for record_id, version in doomed:
            if versioned is not None:
                # only the version listed goes: one a process connected before
                # the switch wrote since is kept, whenever it landed
                removed += int(await versioned.delete_if_unchanged(owner, record_id, version))
                continue
            # read again right before deleting: a version written since the
            # listing is kept (one landing between this read and the delete is
            # not: the store has no conditional delete)
            now = await old.get(owner, record_id)
            if now is not None and _superseded(now, have.get(record_id), switched_at):
                removed += int(await old.delete(owner, record_id))
    return removed


async def holds_records(store: MemoryStore) -> bool:
    """Whether `store` holds any record (of any owner)."""
    return bool(await _owners(store, "store"))


async def write_switch(cache: Cache, switch: EmbeddingSwitch) -> None:
    await cache.put(SWITCH_SCOPE, SWITCH_KEY, switch.to_bytes())


async def read_switch(cache: Cache) -> EmbeddingSwitch | None:
    raw = await cache.get(SWITCH_SCOPE, SWITCH_KEY)
    return None if raw is None else EmbeddingSwitch.from_bytes(raw)

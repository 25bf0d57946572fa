"""A re-embed while writers go on: what is added, changed or deleted in the old
space during the copy reaches the new one before the switch; a drop deletes
only what the new space holds unchanged; completing after the switch never
deletes or overwrites what writers stored in the new space."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.bootstrap.connect import connect
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.portability import open_ports, reembed
from agent_memory.services.portability.reembed import drop_space
from agent_memory.services.portability.reembed import reembed as reembed_store

from .helpers import settings as isolated

OLD = HashingEmbedder(256)
NEW = HashingEmbedder(64)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _record(owner: str, i: int, text: str, at: datetime = T0) -> MemoryRecord:
    return MemoryRecord(
        id=f"{owner}{i}", owner=owner, namespace="n", kind="fact", content=text,
        vector=np.ones(OLD.space.dimension, dtype=np.float32), created_at=T0, updated_at=at,
    )  # fmt: skip


class Meddling:
    """NEW's embedder that awaits `meddle(n)` before its n-th call (a writer
    acting on the old space while the copy runs)."""

    def __init__(self, meddle: Callable[[int], Awaitable[None]]) -> None:
        self.inner, self.meddle, self.calls = NEW, meddle, 0

    @property
    def space(self) -> EmbeddingSpace:
        return self.inner.space

    async def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        await self.meddle(self.calls)
        return await self.inner.embed(texts)


async def _view(store: InMemoryMemoryStore | Any, owners: Sequence[str]) -> dict[str, str]:
    out = {}
    for owner in owners:
        for r in (await store.list(owner, limit=1000)).records:
            out[r.id] = r.content
    return out


# one step of a writer on the old space: add a record, change one, delete one
_STEP = st.tuples(
    st.sampled_from(["add", "change", "delete"]), st.sampled_from("ab"), st.integers(0, 5)
)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 8), _STEP), max_size=8))
async def test_writes_during_the_copy_reach_the_new_space(
    steps: list[tuple[int, tuple[str, str, int]]],
) -> None:
    """When this fails, a write acknowledged while the copy ran (a new record, a
    changed one, a deletion) was missing from the new space the switch would
    make reads use: lost for reads, or a deleted record brought back."""
    old = InMemoryMemoryStore(OLD.space)
    new = InMemoryMemoryStore(NEW.space)
    await old.add([_record(o, i, f"{o} fact {i}") for o in "ab" for i in range(3)])
    clock = iter(range(1, 1000))

    async def meddle(call: int) -> None:
        for when, (op, owner, i) in steps:
            if when != call:
                continue
            at = T0 + timedelta(minutes=next(clock))
            await old.delete(owner, f"{owner}{i}")
            if op != "delete":
                await old.add([_record(owner, i, f"{owner} {op} {at}", at)])

    done = await reembed_store(old, new, Meddling(meddle), batch_size=1)
    assert done.complete
    assert await _view(new, "ab") == await _view(old, "ab")


async def test_a_copy_that_never_settles_is_not_complete() -> None:
    old = InMemoryMemoryStore(OLD.space)
    new = InMemoryMemoryStore(NEW.space)
    await old.add([_record("a", 0, "first")])

    async def meddle(call: int) -> None:  # a new record before every batch
        await old.add([_record("a", 100 + call, f"late {call}")])

    done = await reembed_store(old, new, Meddling(meddle), batch_size=1)
    assert not done.complete


async def _switched(
    n: int,
) -> tuple[InMemoryMemoryStore, InMemoryMemoryStore, datetime, datetime, npt.NDArray[np.float32]]:
    """`n` records of owner "a" copied from the old space to the new one; the
    stores, the switch's time, a time after it, and a vector for new-space writes."""
    old = InMemoryMemoryStore(OLD.space)
    new = InMemoryMemoryStore(NEW.space)
    await old.add([_record("a", i, f"fact {i}") for i in range(n)])
    assert (await reembed_store(old, new, NEW)).complete
    switched = T0 + timedelta(hours=1)
    ones = np.ones(NEW.space.dimension, np.float32)
    return old, new, switched, switched + timedelta(minutes=5), ones


async def test_drop_keeps_only_what_the_new_space_lacks_from_after_the_switch() -> None:
    """When this fails, `--drop-old` deleted a record written to the old space
    after the switch (by a process connected before it): an acknowledged write
    lost for good; or it kept records the new space supersedes (a later version,
    or deleted there after the switch), so the old space never empties."""
    old, new, switched, after, ones = await _switched(4)
    await old.add([_record("a", 7, "written late", after)])  # old connection, after
    await old.delete("a", "a1")
    await old.add([_record("a", 1, "changed late", after)])  # in old, after: newer than new's
    await new.delete("a", "a2")
    await new.add([attrs.evolve(_record("a", 2, "updated in new", after), vector=ones)])
    await new.delete("a", "a3")  # deleted in the new space after the switch
    assert await drop_space(old, new, switched) == 3  # a0 unchanged, a2 newer, a3 deleted
    assert await _view(old, "a") == {"a1": "changed late", "a7": "written late"}


async def test_completing_after_the_switch_keeps_the_new_spaces_own_writes() -> None:
    """After the switch writers use the new space: a run completing from the
    origin adds what the origin got after the switch, and neither deletes,
    overwrites with an older version, nor brings back what the new space deleted
    since."""
    old, new, switched, later, ones = await _switched(3)
    await new.add([attrs.evolve(_record("a", 9, "new space only"), vector=ones)])
    await new.delete("a", "a0")
    await new.add([attrs.evolve(_record("a", 0, "updated in new", later), vector=ones)])
    await new.delete("a", "a2")  # deleted in the new space after the switch
    await old.add([_record("a", 5, "late in the origin", later)])
    done = await reembed_store(old, new, NEW, mirror_deletes=False, switched_at=switched)
    assert done.complete
    assert done.deleted_since == 1
    assert await _view(new, "a") == {
        "a0": "updated in new",
        "a1": "fact 1",
        "a5": "late in the origin",
        "a9": "new space only",
    }


async def test_a_write_during_a_reembed_run_is_read_after_the_switch(tmp_path: Path) -> None:
    """End to end on SQLite: a record added by another connection while the
    command copies is in the space reads switch to."""
    s = isolated(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    async with connect(url, settings=s) as m:
        await m.store.add([_record(o, i, f"{o} fact {i}") for o in "ab" for i in range(3)])

    async def meddle(call: int) -> None:
        if call == 2:
            async with connect(url, settings=s) as m:
                await m.store.add([_record("a", 9, "written during the copy")])

    done = await reembed(url, to_model="hashing", embedder=Meddling(meddle), batch_size=2,
                         settings=s)  # fmt: skip
    assert done.complete
    async with open_ports(url, space=NEW.space, settings=s) as ports:
        ids = {r.id for r in (await ports.store.list("a")).records}
    assert ids == {"a0", "a1", "a2", "a9"}


async def test_a_forget_while_completing_after_the_switch_stays_forgotten() -> None:
    """When this fails, a run completing after the switch (which mirrors no
    deletions) re-added, from the batch it was embedding, a record a forget had
    just deleted from both spaces: forgotten data back in the space reads use."""
    old = InMemoryMemoryStore(OLD.space)
    new = InMemoryMemoryStore(NEW.space)
    switched = T0 + timedelta(hours=1)
    late = switched + timedelta(minutes=5)
    await old.add([_record("a", i, f"late {i}", late) for i in range(3)])

    async def forget(call: int) -> None:  # the forget lands while batch 1 embeds
        if call == 1:
            for store in (old, new):
                await store.delete_scope("a")

    done = await reembed_store(
        old, new, Meddling(forget), batch_size=2, mirror_deletes=False, switched_at=switched
    )
    assert done.complete
    assert await _view(new, "a") == {}


class _WriterBetween(InMemoryMemoryStore):
    """A store where another writer stores `late` just before the first `get`
    or conditional write of its id: after a listing that read the record,
    before the write that follows it."""

    def __init__(self, space: EmbeddingSpace, late: MemoryRecord) -> None:
        super().__init__(space)
        self.late: MemoryRecord | None = late

    async def _meddle(self, id: str) -> None:
        if self.late is not None and self.late.id == id:
            late, self.late = self.late, None
            await self.update(late)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        await self._meddle(id)
        return await super().get(owner, id)

    async def update_if_older(self, record: MemoryRecord) -> bool:
        await self._meddle(record.id)
        return await super().update_if_older(record)

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        await self._meddle(id)
        return await super().delete_if_unchanged(owner, id, updated_at)


async def test_drop_keeps_a_version_written_after_it_listed_the_old_space() -> None:
    """When this fails, `--drop-old` deleted, by the id it had listed, a newer
    version a writer stored in the old space just before the delete."""
    switched = T0 + timedelta(hours=1)
    newer = _record("a", 0, "rewritten just now", switched + timedelta(minutes=5))
    old = _WriterBetween(OLD.space, newer)
    new = InMemoryMemoryStore(NEW.space)
    await old.add([_record("a", 0, "fact 0")])
    assert (await reembed_store(old, new, NEW)).complete
    old.late = newer
    assert await drop_space(old, new, switched) == 0
    assert old.late is None  # the writer did write, before the drop's delete
    assert await _view(old, "a") == {"a0": "rewritten just now"}


async def test_completing_after_the_switch_does_not_overwrite_a_write_made_meanwhile() -> None:
    """When this fails, a run completing after the switch replaced, with the
    origin's version, one a writer stored in the new space after the pass read it."""
    switched = T0 + timedelta(hours=1)
    ones = np.ones(NEW.space.dimension, np.float32)
    newest = attrs.evolve(
        _record("a", 0, "written to new meanwhile", switched + timedelta(minutes=9)), vector=ones
    )
    old = InMemoryMemoryStore(OLD.space)
    new = _WriterBetween(NEW.space, newest)
    await old.add([_record("a", 0, "fact 0")])
    new.late = None
    assert (await reembed_store(old, new, NEW)).complete
    await old.update(_record("a", 0, "late in the origin", switched + timedelta(minutes=5)))
    new.late = newest
    done = await reembed_store(old, new, NEW, mirror_deletes=False, switched_at=switched)
    assert done.complete
    assert new.late is None  # the writer did write, before the copy's write
    assert await _view(new, "a") == {"a0": "written to new meanwhile"}

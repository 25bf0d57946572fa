"""A re-embed's writes that race writers, on each backend's own store: a version
a writer stores right before the copy's write lands (after every read the
copy made) is neither overwritten by an older copy nor deleted by `--drop-old`.
The stores' conditional writes (`VersionedWrites`) close that window; a store
without them reads, then writes (tests/portability/test_reembed_writers.py
covers the writes that land before the read)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, Page, ScoredRecord
from agent_memory.portability import open_ports
from agent_memory.ports.storage import MemoryStore, VersionedWrites
from agent_memory.services.portability.reembed import drop_space
from agent_memory.services.portability.reembed import reembed as reembed_store

from .helpers import settings as isolated

OLD = HashingEmbedder(256)
NEW = HashingEmbedder(64)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SWITCHED = T0 + timedelta(hours=1)


def _record(space: EmbeddingSpace, text: str, at: datetime) -> MemoryRecord:
    return MemoryRecord(
        id="r0", owner="ana", namespace="n", kind="fact", content=text,
        vector=np.ones(space.dimension, dtype=np.float32), created_at=T0, updated_at=at,
    )  # fmt: skip


class WriterAtTheWrite:
    """`inner`, where another writer stores `late` (through the same store) just
    before the first write to its id reaches it: after every read the caller
    made of that record, before its own write."""

    def __init__(self, inner: MemoryStore, late: MemoryRecord) -> None:
        self.inner, self.late = inner, late
        self.versioned = isinstance(inner, VersionedWrites)

    async def _meddle(self, id: str) -> None:
        if self.late is not None and self.late.id == id:
            late, self.late = self.late, None
            await self.inner.update(late)

    @property
    def space(self) -> EmbeddingSpace:
        return self.inner.space

    async def add(self, records: Sequence[MemoryRecord]) -> None:
        await self.inner.add(records)

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        return await self.inner.get(owner, id)

    async def update(self, record: MemoryRecord) -> None:
        await self._meddle(record.id)
        await self.inner.update(record)

    async def delete(self, owner: str, id: str) -> bool:
        await self._meddle(id)
        return await self.inner.delete(owner, id)

    async def update_if_older(self, record: MemoryRecord) -> bool:
        await self._meddle(record.id)
        assert isinstance(self.inner, VersionedWrites)
        return await self.inner.update_if_older(record)

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        await self._meddle(id)
        assert isinstance(self.inner, VersionedWrites)
        return await self.inner.delete_if_unchanged(owner, id, updated_at)

    async def search(self, *args: Any, **kwargs: Any) -> list[ScoredRecord]:
        return await self.inner.search(*args, **kwargs)

    async def list(self, *args: Any, **kwargs: Any) -> Page:
        return await self.inner.list(*args, **kwargs)

    async def delete_scope(self, *args: Any, **kwargs: Any) -> int:
        return await self.inner.delete_scope(*args, **kwargs)

    async def owners(self) -> list[str]:
        return await self.inner.owners()  # type: ignore[attr-defined, no-any-return]

    async def ping(self) -> None:
        await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/m.db"
    found: str = request.getfixturevalue(f"{request.param}_url")
    return found


@pytest.fixture
async def spaces(url: str, tmp_path: Path) -> AsyncIterator[tuple[MemoryStore, MemoryStore]]:
    s = isolated(tmp_path, embedder="hashing")
    async with (
        open_ports(url, space=OLD.space, settings=s) as old,
        open_ports(url, space=NEW.space, settings=s) as new,
    ):
        await old.store.delete_scope("ana")
        await new.store.delete_scope("ana")
        yield old.store, new.store
        await old.store.delete_scope("ana")
        await new.store.delete_scope("ana")


async def test_completing_after_the_switch_never_overwrites_a_write_at_its_write(
    spaces: tuple[MemoryStore, MemoryStore],
) -> None:
    """When this fails, a re-embed completing after the switch replaced a
    version a writer stored in the new space after the copy's last read of it
    (with the origin's older one): the writer's acknowledged write was lost."""
    old, new = spaces
    assert isinstance(new, VersionedWrites)
    await old.add([_record(OLD.space, "fact 0", T0)])
    assert (await reembed_store(old, new, NEW)).complete
    await old.update(_record(OLD.space, "late in the origin", SWITCHED + timedelta(minutes=5)))
    newest = _record(NEW.space, "written to new meanwhile", SWITCHED + timedelta(minutes=9))
    racing = WriterAtTheWrite(new, newest)
    done = await reembed_store(old, racing, NEW, mirror_deletes=False, switched_at=SWITCHED)
    assert done.complete
    assert racing.late is None  # the writer did write, at the copy's write
    got = await new.get("ana", "r0")
    assert got is not None
    assert got.content == "written to new meanwhile"


async def test_drop_never_deletes_a_version_written_at_its_delete(
    spaces: tuple[MemoryStore, MemoryStore],
) -> None:
    """When this fails, `--drop-old` deleted a version a process connected
    before the switch stored in the old space after the drop's last read of it:
    an acknowledged write lost (it was in neither space)."""
    old, new = spaces
    assert isinstance(old, VersionedWrites)
    await old.add([_record(OLD.space, "fact 0", T0)])
    assert (await reembed_store(old, new, NEW)).complete
    late = _record(OLD.space, "rewritten just now", SWITCHED + timedelta(minutes=5))
    racing = WriterAtTheWrite(old, late)
    assert await drop_space(racing, new, SWITCHED) == 0
    assert racing.late is None  # the writer did write, at the drop's delete
    got = await old.get("ana", "r0")
    assert got is not None
    assert got.content == "rewritten just now"

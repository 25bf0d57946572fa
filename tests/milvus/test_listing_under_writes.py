"""Milvus listings (`list`, `owners`) read every matching row by queries of at
most `_WINDOW` rows, splitting by primary-key prefix. Rows written between two
of a listing's steps never cut it: every record stored throughout is listed.

The window is made small (8) so a few records cross it. Milvus Lite answers a
limited query with the oldest rows first, so rows inserted late are the ones a
full window leaves out; a server answers any `limit` of the matching rows
(segments in any order). The query here answers newest first, as a server may,
so a cut shows on records stored throughout."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent_memory.adapters.milvus import MilvusMemoryStore
from agent_memory.adapters.milvus import store as milvus_store
from agent_memory.domain.records import MemoryRecord
from milvus.support import rec

WINDOW = 8


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(milvus_store, "_WINDOW", WINDOW)


def _newest_first_with_writes(
    store: MilvusMemoryStore, before_first: Callable[[], Awaitable[None]]
) -> list[int]:
    """Queries answer newest rows first (cut at `limit`); `before_first()` runs
    just before the first query. Returns the list of limits asked for."""
    query = store._query
    limits: list[int] = []

    async def newest_first(name: str, expr: str, fields: list[str], limit: int) -> Any:
        limits.append(limit)
        if len(limits) == 1:  # (the hook's own queries come after this one)
            await before_first()
        rows = await query(name, expr, fields, 16_384)
        return rows[::-1][:limit]

    store._query = newest_first  # type: ignore[method-assign]
    return limits


async def test_list_keeps_every_record_when_inserts_land_before_its_query(
    store: MilvusMemoryStore,
) -> None:
    """One record less than the window, then three more inserted just before the
    listing's first query: every record stored throughout is listed, once."""
    stable = [rec(f"r{i}", seconds=i) for i in range(WINDOW - 1)]
    await store.add(stable)

    async def insert() -> None:
        await store.add([rec(f"n{i}", seconds=100 + i) for i in range(3)])

    _newest_first_with_writes(store, insert)
    page = await store.list("alice", limit=100)
    ids = [r.id for r in page.records]
    assert len(ids) == len(set(ids)), ids
    assert {r.id for r in stable} <= set(ids), sorted({r.id for r in stable} - set(ids))
    assert page.next_cursor is None


async def test_owners_keeps_every_owner_when_inserts_land_before_its_query(
    store: MilvusMemoryStore,
) -> None:
    """One owner a record, one less than the window, then three new owners' records
    inserted just before the listing's first query: every owner stored throughout
    is listed."""
    stable = [f"o{i}" for i in range(WINDOW - 1)]
    await store.add([rec("r", owner=o) for o in stable])

    async def insert() -> None:
        await store.add([rec("r", owner=f"new{i}") for i in range(3)])

    _newest_first_with_writes(store, insert)
    found = await store.owners()
    assert set(stable) <= set(found), sorted(set(stable) - set(found))
    assert found == sorted(found)


async def test_list_and_owners_split_full_windows(store: MilvusMemoryStore) -> None:
    """Many times the window (several levels of primary-key prefixes): every record
    and owner is read exactly once."""
    records: list[MemoryRecord] = [rec(f"r{i:03d}", seconds=i) for i in range(300)]
    records += [rec(f"x{i:02d}", owner=f"o{i:02d}") for i in range(40)]
    await store.add(records)
    limits = _newest_first_with_writes(store, _nothing)
    listed: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.list("alice", limit=120, cursor=cursor)
        listed += [r.id for r in page.records]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert listed == [f"r{i:03d}" for i in reversed(range(300))]
    assert await store.owners() == ["alice", *(f"o{i:02d}" for i in range(40))]
    assert limits.count(WINDOW) > 16  # the windows were split, more than one level


async def _nothing() -> None:
    return None

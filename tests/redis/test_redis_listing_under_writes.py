"""Listings on Redis that take several round trips stay exact while others write:
a write landing between two reads of one call never skips or repeats an item
stored throughout (the contract's MS-LIST-9 races the same on every backend;
here the write is placed deterministically, between the reads)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from agent_memory.adapters.redis import RedisCache, RedisMemoryStore
from agent_memory.domain.records import MemoryRecord
from redis_listing_race import (
    check_lease_scan_keeps_a_reacquired_lease,
    check_owners_survive_deletes,
)

T = datetime(2030, 1, 1, tzinfo=UTC)


def _rec(store: RedisMemoryStore, id: str) -> MemoryRecord:
    return MemoryRecord(
        id=id, owner="o", namespace="n", kind="k", content="c",
        vector=np.ones(store.space.dimension, np.float32), created_at=T, updated_at=T,
    )  # fmt: skip


async def test_list_of_tied_records_survives_deletes_between_reads(
    store: RedisMemoryStore,
) -> None:
    """60 records of one created_at, pages of 5: the later pages need more than one
    search; a record listed earlier is deleted after each search. Every record
    that was never deleted is listed once."""
    await store.add([_rec(store, f"r{i:02d}") for i in range(60)])
    listed: list[str] = []
    doomed: list[str] = []
    search = store._ft

    async def search_then_delete(*args: Any) -> Any:
        reply = await search(*args)
        if doomed:  # another agent deletes a record the pager already has
            await store.delete("o", doomed.pop(0))
        return reply

    store._ft = search_then_delete  # type: ignore[method-assign]
    cursor: str | None = None
    while True:
        page = await store.list("o", limit=5, cursor=cursor)
        ids = [r.id for r in page.records]
        listed += ids
        doomed += ids
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == {f"r{i:02d}" for i in range(60)}


async def test_cache_entries_survive_deletes_and_puts_between_batches(
    cache: RedisCache,
) -> None:
    """More entries than one batch reads; between batches another client deletes
    entries already listed and puts new ones before them: every entry present
    throughout is listed once, in key order."""
    stable = [f"k{i:04d}" for i in range(1_200)]
    for key in stable:
        await cache.put("s", key, b"v")
    for i in range(40):
        await cache.put("s", f"a{i:02d}", b"gone soon")
    read = cache._r.zrangebylex
    calls = 0

    async def read_then_write(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        reply = await read(*args, **kwargs)
        calls += 1
        for i in range(20):  # keys before the batch's position: fewer, then more
            if calls == 1:
                await cache.delete("s", f"a{i:02d}")
            elif calls == 2:
                await cache.put("s", f"b{i:02d}", b"new")
        return reply

    cache._r.zrangebylex = read_then_write  # type: ignore[method-assign]
    keys = [e.key for e in await cache.entries("s")]
    assert calls > 2
    assert len(keys) == len(set(keys)), sorted(k for k in set(keys) if keys.count(k) > 1)
    assert set(stable) <= set(keys), sorted(set(stable) - set(keys))
    assert keys == sorted(keys)


async def test_lease_scan_keeps_a_lease_acquired_between_its_reads(
    redis_url: str, deployment: str
) -> None:
    """An expired lease re-acquired between scan's read of its hash and the index
    clean-up stays listed by every later scan."""
    await check_lease_scan_keeps_a_reacquired_lease(redis_url, deployment)


@pytest.mark.parametrize("owners", [3, 12])
async def test_owners_survive_deletes_between_scan_and_read(
    redis_url: str, deployment: str, owners: int
) -> None:
    """The record `owners` picked per owner is deleted before it is read: owners
    with other records are still listed, an owner with none left is not."""
    await check_owners_survive_deletes(redis_url, deployment, owners)

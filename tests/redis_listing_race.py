"""Listings on Redis that read in several round trips, with another client's
write placed deterministically between two of them (the first pipeline a listing
sends). Shared by tests/redis (one server) and tests/redis_cluster (a cluster)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from agent_memory.adapters.redis import RedisLeaseStore, RedisMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

__all__ = ["check_lease_scan_keeps_a_reacquired_lease", "check_owners_survive_deletes"]

SPACE = EmbeddingSpace(model="test-model", dimension=8)
T = datetime(2030, 1, 1, tzinfo=UTC)


def _once_around_first_pipeline(
    client: Any,
    *,
    before: Callable[[list[Any]], Awaitable[None]] | None = None,
    after: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Hook `client`'s first pipeline: `before(keys it read)` runs just before the
    pipeline is sent, `after()` just after its reply; later pipelines (the hooks'
    own writes among them) run untouched."""
    make = client.pipeline
    armed = [True]

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = make(*args, **kwargs)
        if not armed[0]:
            return pipe
        armed[0] = False
        send = pipe.execute
        read: list[Any] = []
        for name in ("hget", "hgetall"):
            command = getattr(pipe, name)

            def queued(key: Any, *rest: Any, _command: Any = command) -> Any:
                read.append(key)
                return _command(key, *rest)

            setattr(pipe, name, queued)

        async def execute(*a: Any, **kw: Any) -> Any:
            if before is not None:
                await before(read)
            out = await send(*a, **kw)
            if after is not None:
                await after()
            return out

        pipe.execute = execute
        return pipe

    client.pipeline = pipeline


async def check_lease_scan_keeps_a_reacquired_lease(url: str, deployment: str) -> None:
    """A lease expires; `scan` reads the index (the key is still a member) and the
    lease hash (empty); another agent acquires the key before scan cleans the
    index. The held lease must stay listed by every later scan (the acquire's
    ZADD was a no-op: the member was still there)."""
    leases = RedisLeaseStore.from_url(url, deployment=deployment)
    other = RedisLeaseStore.from_url(url, deployment=deployment)
    try:
        assert await leases.acquire("s", "k", "old", timedelta(milliseconds=20))
        assert await leases.acquire("s", "kept", "x", timedelta(minutes=5))
        await asyncio.sleep(0.05)  # the lease expires (its hash is gone)
        assert await leases.get("s", "k") is None
        held: list[Any] = []

        async def acquire_meanwhile() -> None:
            held.append(await other.acquire("s", "k", "new", timedelta(minutes=5)))

        read_live = leases._read_live

        async def read_then_acquire(scope: str, keys: list[str]) -> Any:
            # scan's read of the leases (one script), then the acquire, then
            # scan's clean-up of the index
            out = await read_live(scope, keys)
            leases._read_live = read_live  # type: ignore[method-assign]
            await acquire_meanwhile()
            return out

        leases._read_live = read_then_acquire  # type: ignore[method-assign]
        await leases.scan("s")
        assert held
        assert held[0] is not None
        for _ in range(2):
            found = {(lease.key, lease.owner) for lease in await leases.scan("s")}
            assert found == {("k", "new"), ("kept", "x")}, found
            assert [lease.key for lease in await other.scan("s", "k")] == ["k", "kept"]
    finally:
        await leases.close()
        await other.close()


def _rec(owner: str, id: str) -> MemoryRecord:
    return MemoryRecord(
        id=id, owner=owner, namespace="n", kind="k", content="c",
        vector=np.ones(SPACE.dimension, np.float32), created_at=T, updated_at=T,
    )  # fmt: skip


async def check_owners_survive_deletes(url: str, deployment: str, owners: int = 3) -> None:
    """`owners` reads the record keys (SCAN), then the owner of one key per owner
    tag; between the two, another agent deletes exactly the records whose keys
    were picked. Owners that kept other records throughout are still listed; the
    last owner, whose only record was deleted, is not. (More than 8 owners to look
    again for: one SCAN over every record key, else one per owner tag.)"""
    store = RedisMemoryStore.from_url(url, SPACE, deployment=deployment)
    other = RedisMemoryStore.from_url(url, SPACE, deployment=deployment)
    names = [f"o{i:02d}" for i in range(owners)]
    try:
        records = [_rec(o, f"{o}-{j}") for o in names for j in range(1 if o == names[-1] else 3)]
        for o in names:
            await store.add([r for r in records if r.owner == o])
        assert await store.owners() == names
        ids = {store._key(r.owner, r.id): (r.owner, r.id) for r in records}
        picked: list[tuple[str, str]] = []

        async def delete_the_picked(read: list[Any]) -> None:
            for key in read:
                name = key.decode() if isinstance(key, bytes) else str(key)
                owner, id_ = ids[name]
                assert await other.delete(owner, id_)
                picked.append((owner, id_))

        _once_around_first_pipeline(store._r, before=delete_the_picked)
        found = await store.owners()
        assert sorted(owner for owner, _ in picked) == names, picked
        assert found == names[:-1], found
    finally:
        cleanup = RedisMemoryStore.from_url(url, SPACE, deployment=deployment)
        await cleanup.drop_index()
        await cleanup.close()
        await store.close()
        await other.close()

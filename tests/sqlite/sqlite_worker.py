"""One writer process for the two-process SQLite test (run as a script).

Waits for a start file, then interleaves batches of record adds, event appends
and lease-guarded increments of a shared counter, and writes what it observed
(fencing tokens per key) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from agent_memory.adapters.sqlite import open_sqlite
from agent_memory.domain.records import EmbeddingSpace, Event, MemoryRecord

SPACE = EmbeddingSpace(model="two-process", dimension=16)
RECORDS = 500
EVENTS = 500
BATCH = 25
LEASE_ROUNDS = 40
KEYS = ("k%0", "k_1", "k2")


async def _guarded_increment(stores: object, name: str, key: str) -> int:
    """Take the lease on `key` (retrying), read-increment-write its counter, release."""
    leases = stores.leases  # type: ignore[attr-defined]
    cache = stores.cache  # type: ignore[attr-defined]
    while True:
        lease = await leases.acquire("locks", key, name, timedelta(seconds=30))
        if lease is not None:
            break
        await asyncio.sleep(0.001)
    raw = await cache.get("counters", key)
    value = 0 if raw is None else int(raw)
    await asyncio.sleep(0)  # widen the window a lost update would need
    await cache.put("counters", key, str(value + 1).encode())
    released = await leases.release("locks", key, name)
    assert released, "a lease we hold must release"
    return int(lease.token)


async def _open(db: str) -> None:
    stores = open_sqlite(db, space=SPACE)
    await stores.store.ping()
    await stores.close()


async def work(db: str, name: str) -> dict[str, list[int]]:
    stores = open_sqlite(db, space=SPACE)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    now = datetime.now(UTC)
    tokens: dict[str, list[int]] = {k: [] for k in KEYS}
    lease_every = (RECORDS // BATCH) // 10 or 1
    rounds = 0
    for b in range(RECORDS // BATCH):
        records = [
            MemoryRecord(
                id=f"{name}-{i}",
                owner="shared",
                namespace="ns",
                kind="note",
                content=f"{name} record {i}",
                vector=rng.standard_normal(SPACE.dimension),
                created_at=now,
                updated_at=now,
            )
            for i in range(b * BATCH, (b + 1) * BATCH)
        ]
        await stores.store.add(records)
        events = [
            Event(
                id=f"{name}-{i}",
                domain="shared",
                agent=name,
                action="write",
                outcome="ok",
                summary=f"event {i}",
                occurred_at=now - timedelta(seconds=i),
                recorded_at=now,
            )
            for i in range(b * BATCH, (b + 1) * BATCH)
        ]
        assert await stores.events.append(events) == BATCH
        # Search through the warm matrix cache: the other process's writes must show.
        await stores.store.search("shared", rng.standard_normal(SPACE.dimension), limit=5)
        if b % lease_every == 0:
            for _ in range(LEASE_ROUNDS // 10):
                key = KEYS[rounds % len(KEYS)]
                tokens[key].append(await _guarded_increment(stores, name, key))
                rounds += 1
    while rounds < LEASE_ROUNDS:
        key = KEYS[rounds % len(KEYS)]
        tokens[key].append(await _guarded_increment(stores, name, key))
        rounds += 1
    await stores.close()
    return tokens


def main(db: str, name: str, go: str, out: str) -> None:
    asyncio.run(_open(db))  # imports done, schema in place
    Path(out + ".ready").touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("start file never appeared")
        time.sleep(0.001)
    started = time.time()
    tokens = asyncio.run(work(db, name))
    Path(out).write_text(json.dumps({"tokens": tokens, "span": [started, time.time()]}))


if __name__ == "__main__":
    main(*sys.argv[1:5])

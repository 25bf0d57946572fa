"""10,000 owners on the cluster: their keys spread over all three primaries, and
search for sampled owners is complete (recall 1.0 against the in-memory oracle).

Every owner has one record; the sampled owners have `EXTRA` more, so their
searches rank several records. The records are written in batches that span
thousands of slots (one pipeline per batch, one script per slot)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np

from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.redis import RedisMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

OWNERS = 10_000
SAMPLED = 40
EXTRA = 5
DIM = 16
SPACE = EmbeddingSpace(model="cluster-scale", dimension=DIM)


def _records(rng: np.random.Generator, sampled: list[int]) -> list[MemoryRecord]:
    owners = list(range(OWNERS)) + [o for o in sampled for _ in range(EXTRA)]
    vectors = rng.standard_normal((len(owners), DIM)).astype(np.float32)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        MemoryRecord(
            id=f"r{i}",
            owner=f"user-{o}",
            namespace="n",
            kind="fact",
            content=f"note {i} about topic{i % 3}",
            vector=vectors[i],
            created_at=at + timedelta(seconds=i),
            updated_at=at,
        )
        for i, o in enumerate(owners)
    ]


async def test_ten_thousand_owners_spread_and_search_complete(
    redis_cluster_url: str, deployment: str
) -> None:
    rng = np.random.default_rng(22)
    sample = [int(o) for o in rng.choice(OWNERS, size=SAMPLED, replace=False)]
    records = _records(rng, sample)
    # A cheaper HNSW build: owners this small are searched exactly (ADHOC_BF).
    store = RedisMemoryStore.from_url(
        redis_cluster_url, SPACE, deployment=deployment, hnsw_ef_construction=64
    )
    oracle = InMemoryMemoryStore(SPACE)
    try:
        started = time.perf_counter()
        for start in range(0, len(records), 5_000):  # each batch: one pipeline, per slot
            await store.add(records[start : start + 5_000])
        await oracle.add(records)
        elapsed = time.perf_counter() - started
        print(f"added {len(records)} records of {OWNERS} owners in {elapsed:.1f} s")
        client = store._cluster_client
        primaries = client.get_primaries()
        assert len(primaries) == 3

        # Slot distribution: by the slot map, and by the keys each primary holds.
        expected: dict[str, int] = {n.name: 0 for n in primaries}
        for o in range(OWNERS):
            expected[client.get_node_from_key(store._stats_key(f"user-{o}")).name] += 1
        prefix = store._keys.ms_stats_prefix(SPACE.identity)
        held: dict[str, int] = {}
        for node in primaries:
            count = 0
            cursor = 0
            while True:
                reply = await client.execute_command(
                    "SCAN", cursor, "MATCH", prefix + "*", "COUNT", 5000, target_nodes=node
                )
                cursors, keys = reply  # ({node name: cursor}, keys)
                cursor = cursors[node.name]
                count += len(keys)
                if int(cursor) == 0:
                    break
            held[node.name] = count
        assert held == expected, (held, expected)
        assert sum(held.values()) == OWNERS
        for name, count in held.items():
            assert 0.28 * OWNERS < count < 0.39 * OWNERS, (name, held)

        # Search complete for sampled owners on every primary: the same hits, in
        # the same order, as the oracle (limit above the owner's record count).
        seen_nodes = set()
        for o in sample:
            owner = f"user-{o}"
            seen_nodes.add(client.get_node_from_key(store._stats_key(owner)).name)
            q = rng.standard_normal(DIM).astype(np.float32)
            got = await store.search(owner, q, limit=EXTRA)
            want = await oracle.search(owner, q, limit=EXTRA)
            assert len(got) == EXTRA
            assert [h.record.id for h in got] == [h.record.id for h in want], owner
            assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
            page = await store.list(owner)
            assert [r.id for r in page.records] == [
                r.id for r in (await oracle.list(owner)).records
            ]
            text = await store.search_text(owner, "topic1")
            oracle_text = await oracle.search_text(owner, "topic1")
            assert [h.record.id for h in text] == [h.record.id for h in oracle_text], owner
        assert seen_nodes == set(expected)
        assert elapsed < 60, f"adding {len(records)} records took {elapsed:.1f} s"
    finally:
        await store.drop_index()
        await store.close()

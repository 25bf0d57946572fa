"""A primary that lacks its index (a replica promoted without it, a resharding
that changed its index name) gets it back on the first query there: the index is
created, the records already on that primary are indexed, and the query answers
as before, on the same store object."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from agent_memory.adapters.redis import RedisMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

SPACE = EmbeddingSpace(model="healing", dimension=8)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_missing_index_on_a_primary_is_recreated(
    redis_cluster_url: str, deployment: str
) -> None:
    rng = np.random.default_rng(3)
    store = RedisMemoryStore.from_url(redis_cluster_url, SPACE, deployment=deployment)
    try:
        owners = [f"o{i}" for i in range(30)]
        await store.add(
            [
                MemoryRecord(
                    id=f"r{j}",
                    owner=o,
                    namespace="n",
                    kind="k",
                    content=f"word{j} text",
                    vector=rng.standard_normal(8).astype(np.float32),
                    created_at=T0,
                    updated_at=T0,
                )
                for o in owners
                for j in range(4)
            ]
        )
        q = rng.standard_normal(8).astype(np.float32)
        before = {o: [h.record.id for h in await store.search(o, q, limit=3)] for o in owners}
        client = store._cluster_client
        node = client.get_node_from_key(store._stats_key("o0"))
        name = store._names(client, node)
        # Drop the index behind the store's back, keeping the records.
        await client.execute_command("FT.DROPINDEX", name, target_nodes=node)
        on_node = [o for o in owners if client.get_node_from_key(store._stats_key(o)) == node]
        for o in on_node:
            assert [h.record.id for h in await store.search(o, q, limit=3)] == before[o], o
            assert len((await store.list(o)).records) == 4
            assert [h.record.id for h in await store.search_text(o, "word1")] == ["r1"]
        names = await client.execute_command("FT._LIST", target_nodes=node)
        assert name.encode() in names
    finally:
        await store.drop_index()
        await store.close()

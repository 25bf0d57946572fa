"""Vector index parameters on Qdrant: URL round trip into the collection's HNSW
config, bad values are `ConfigurationError`s naming the parameter, and a small
owner (under the exact threshold: Qdrant's full scan) gets the oracle's answer."""

from __future__ import annotations

import numpy as np
import pytest

from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.qdrant import open_qdrant_store, open_stores
from agent_memory.adapters.qdrant.store import (
    DEFAULT_EF_CONSTRUCTION,
    DEFAULT_EF_SEARCH,
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_M,
)
from agent_memory.domain.errors import ConfigurationError
from qdrant.support import SPACE, rec


async def test_defaults_and_url_parameters_round_trip() -> None:
    plain = open_qdrant_store("qdrant+memory://", SPACE)
    assert plain.index_options == IndexOptions(
        m=DEFAULT_M,
        ef_construction=DEFAULT_EF_CONSTRUCTION,
        ef_search=DEFAULT_EF_SEARCH,
        exact_threshold=DEFAULT_EXACT_THRESHOLD,
    )
    await plain.close()
    url = "qdrant+memory://?hnsw_m=8&hnsw_ef_construction=50&hnsw_ef=30&exact_threshold=256"
    parts = await open_stores(url, space=SPACE, index=IndexOptions(m=24, ef_search=99))
    store = parts["store"]
    try:
        assert store.index_options == IndexOptions(
            m=8, ef_construction=50, ef_search=30, exact_threshold=256
        )
        # What the collection is created (or `rebuild_index` updated) with; local
        # mode keeps no HNSW config of its own (it reports Qdrant's defaults).
        hnsw = store._hnsw_config()
        assert (hnsw.m, hnsw.ef_construct) == (8, 50), hnsw
        # 256 vectors of SPACE.dimension float32 values, in kilobytes (rounded up).
        assert hnsw.full_scan_threshold == -(-256 * SPACE.dimension * 4 // 1024)
    finally:
        await store.close()
    spelled = open_qdrant_store("qdrant+memory://?hnsw_ef_search=31", SPACE)
    assert spelled.index_options.ef_search == 31
    await spelled.close()


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("hnsw_m=x", "hnsw_m"),
        ("hnsw_m=0", "hnsw_m"),
        ("hnsw_ef_construction=1", "hnsw_ef_construction"),
        ("hnsw_ef=0", "hnsw_ef"),
        ("hnsw_ef_search=10001", "hnsw_ef_search"),
        ("exact_threshold=many", "exact_threshold"),
    ],
)
async def test_bad_url_parameters_name_the_parameter(query: str, name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        await open_stores(f"qdrant+memory://?{query}", space=SPACE)
    with pytest.raises(ConfigurationError, match=name):
        open_qdrant_store(f"qdrant+memory://?{query}", SPACE)


async def test_small_owner_gets_the_oracles_answer() -> None:
    rng = np.random.default_rng(9)
    store = open_qdrant_store("qdrant+memory://?exact_threshold=500", SPACE)
    oracle = InMemoryMemoryStore(SPACE)
    records = [
        rec(f"r{i:04d}", "o", vector=v)
        for i, v in enumerate(rng.standard_normal((300, SPACE.dimension)).astype(np.float32))
    ]
    try:
        await store.add(records)
        await oracle.add(records)
        for _ in range(5):
            q = rng.standard_normal(SPACE.dimension).astype(np.float32)
            got = await store.search("o", q, limit=10)
            want = await oracle.search("o", q, limit=10)
            assert [h.record.id for h in got] == [h.record.id for h in want]
    finally:
        await store.close()

"""Vector index parameters on Redis: URL and settings round trip, bad values are
`ConfigurationError`s naming the parameter, the index is built with them, and an
owner under the exact threshold gets exactly the oracle's answer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.redis import RedisMemoryStore, open_stores
from agent_memory.adapters.redis.store import (
    DEFAULT_EF_CONSTRUCTION,
    DEFAULT_EF_RUNTIME,
    DEFAULT_EXACT_THRESHOLD,
    DEFAULT_M,
)
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

DIM = 16
SPACE = EmbeddingSpace(model="index-options", dimension=DIM)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _with(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


async def _open(url: str, deployment: str, **kw: Any) -> RedisMemoryStore:
    from datetime import timedelta

    parts = await open_stores(
        url, space=SPACE, retention=timedelta(days=1), deployment=deployment, **kw
    )
    store: RedisMemoryStore = parts["store"]
    for name in ("events", "leases", "cache"):
        await parts[name].close()
    return store


async def test_defaults_when_nothing_is_set(redis_url: str, deployment: str) -> None:
    store = await _open(redis_url, deployment)
    try:
        assert store.index_options == IndexOptions(
            m=DEFAULT_M,
            ef_construction=DEFAULT_EF_CONSTRUCTION,
            ef_search=DEFAULT_EF_RUNTIME,
            exact_threshold=DEFAULT_EXACT_THRESHOLD,
        )
    finally:
        await store.close()


async def test_url_parameters_round_trip_into_the_index(redis_url: str, deployment: str) -> None:
    """When this fails, a URL parameter was dropped or FT.CREATE ignores it."""
    url = _with(redis_url, "hnsw_m=8&hnsw_ef_construction=50&hnsw_ef_runtime=30&exact_threshold=7")
    # Settings fill what the URL leaves unset; the URL wins where both are set.
    store = await _open(url, deployment, index=IndexOptions(m=24, exact_threshold=99))
    try:
        assert store.index_options == IndexOptions(
            m=8, ef_construction=50, ef_search=30, exact_threshold=7
        )
        await store.ensure_index()
        info = await store._cmd("FT.INFO", store.index_name)
        text = repr(info)
        assert "b'M', 8, b'ef_construction', 50" in text, text
    finally:
        await store.drop_index()
        await store.close()
    spelled = await _open(_with(redis_url, "hnsw_ef_search=31"), deployment)
    try:
        assert spelled.index_options.ef_search == 31
    finally:
        await spelled.close()


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("hnsw_m=abc", "hnsw_m"),
        ("hnsw_m=0", "hnsw_m"),
        ("hnsw_m=101", "hnsw_m"),
        ("hnsw_ef_construction=3", "hnsw_ef_construction"),
        ("hnsw_ef_runtime=-1", "hnsw_ef_runtime"),
        ("hnsw_ef_search=", "hnsw_ef_search"),
        ("exact_threshold=1.5", "exact_threshold"),
    ],
)
async def test_bad_url_parameters_name_the_parameter(
    redis_url: str, deployment: str, query: str, name: str
) -> None:
    with pytest.raises(ConfigurationError, match=name):
        await _open(_with(redis_url, query), deployment)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"hnsw_m": 0}, "hnsw_m"),
        ({"hnsw_ef_construction": True}, "hnsw_ef_construction"),
        ({"ef_runtime": 10_001}, "hnsw_ef_search"),
        ({"exact_threshold": -1}, "exact_threshold"),
    ],
)
def test_bad_constructor_values_name_the_parameter(
    redis_url: str, kwargs: dict[str, Any], name: str
) -> None:
    with pytest.raises(ConfigurationError, match=name):
        RedisMemoryStore.from_url(redis_url, SPACE, **kwargs)


def _records(owner: str, vectors: np.ndarray, start: int = 0) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            owner=owner,
            id=f"r{start + i:05d}",
            namespace="ns",
            kind="fact",
            content="",
            vector=v,
            created_at=AT,
            updated_at=AT,
        )
        for i, v in enumerate(vectors)
    ]


async def test_small_owner_is_searched_exactly(redis_url: str, deployment: str) -> None:
    """An owner under the exact threshold gets the oracle's answer, ids and scores,
    even from a graph built to be poor (M=2, EF_CONSTRUCTION=4). When this fails,
    the exact branch of the search script was not taken or is not exact."""
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((1_500, DIM)).astype(np.float32)
    store = RedisMemoryStore.from_url(
        redis_url,
        SPACE,
        deployment=deployment,
        hnsw_m=2,
        hnsw_ef_construction=4,
        ef_runtime=1,
        exact_threshold=1_500,
    )
    oracle = InMemoryMemoryStore(SPACE)
    records = _records("owner", vectors)
    try:
        await store.add(records)
        await oracle.add(records)
        for _ in range(20):
            q = rng.standard_normal(DIM).astype(np.float32)
            got = await store.search("owner", q, limit=10)
            want = await oracle.search("owner", q, limit=10)
            assert [h.record.id for h in got] == [h.record.id for h in want]
            assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
    finally:
        await store.drop_index()
        await store.close()


async def test_the_search_script_switches_on_the_owners_record_count(
    redis_url: str, deployment: str
) -> None:
    """The script runs its first query for an owner with at most `exact_threshold`
    records (the exact one) and its second otherwise. Here the first query matches
    the owner's records and the second matches nothing, so the reply's count shows
    which one ran. When this fails, the count or the comparison is wrong."""
    from agent_memory.adapters.redis._keys import digest
    from agent_memory.adapters.redis.store import _knn_rows

    rng = np.random.default_rng(3)
    store = RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment, exact_threshold=5)
    try:
        await store.add(_records("five", rng.standard_normal((5, DIM)).astype(np.float32)))
        await store.add(_records("six", rng.standard_normal((6, DIM)).astype(np.float32)))
        for owner, exact in (("five", True), ("six", False), ("nobody", True)):
            reply = await store._knn_script(
                keys=[store._stats_key(owner)],
                args=[
                    5,
                    store.index_name,
                    f"(@oh:{{{digest(owner)}}})=>[KNN 10 @vec $v AS __d]",
                    "(@oh:{none})=>[KNN 10 @vec $v AS __d]",
                    10,
                    10,
                    rng.standard_normal(DIM).astype(np.float32).tobytes(),
                ],
            )
            matched = {"five": 5, "six": 6, "nobody": 0}[owner] if exact else 0
            assert _knn_rows(reply)[0] == matched, (owner, reply)
    finally:
        await store.drop_index()
        await store.close()


def test_the_knn_reply_is_read_by_its_marks() -> None:
    """The KNN scripts' flat reply: per row the distance, then "s" (score only) or
    "0" and the record's fields. A row sent in full whose vector is zero is
    skipped and reported, so `_knn` asks again with every row in full. When this
    fails, the reply's layout and `_knn_rows` disagree."""
    from agent_memory.adapters.redis._codec import RECORD_FIELDS
    from agent_memory.adapters.redis.store import _knn_rows

    def full(id: str, vec: bytes) -> list[bytes]:
        values = [b"x"] * len(RECORD_FIELDS)
        values[0], values[-1] = id.encode(), vec
        return values

    nonzero, zero = np.ones(4, dtype=np.float32).tobytes(), bytes(16)
    reply = [b"0.25", b"0", *full("a", nonzero), b"0.75", b"s", b"1.5", b"s"]
    seen, rows, below, odd = _knn_rows(reply)
    assert (seen, [(s, i) for s, i, _ in rows], below, odd) == (
        3,
        [(-0.75, "a")],
        [-0.25, 0.5],
        False,
    )
    seen, rows, below, odd = _knn_rows([b"-0.5", b"0", *full("z", zero), b"0.1", b"s"])
    assert (seen, rows, below, odd) == (2, [], [-0.9], True)


async def test_the_graph_path_is_exact_where_the_graph_is_exhaustive(
    redis_url: str, deployment: str
) -> None:
    """`exact_threshold=0` sends every query to the graph query (`EF_RUNTIME`,
    no `HYBRID_POLICY`); with EF_RUNTIME above the owner's record count it is
    exhaustive, so the answer is the oracle's (ids and scores), with another
    owner's records in the same index (the owner filter inside the KNN query; at
    this size the engine's own hybrid policy may score the filtered records by
    brute force, which must agree too). When this fails, the graph query or its
    owner filter is wrong (e.g. a query without the filter returns the other
    owner's records)."""
    rng = np.random.default_rng(5)
    store = RedisMemoryStore.from_url(
        redis_url, SPACE, deployment=deployment, exact_threshold=0, ef_runtime=600
    )
    oracle = InMemoryMemoryStore(SPACE)
    mine = _records("owner", rng.standard_normal((400, DIM)).astype(np.float32))
    other = _records("other", rng.standard_normal((400, DIM)).astype(np.float32))
    try:
        for s in (store, oracle):
            await s.add(mine)
            await s.add(other)
        assert store.index_options.exact_threshold == 0
        for _ in range(20):
            q = rng.standard_normal(DIM).astype(np.float32)
            for limit in (1, 10, 50):
                got = await store.search("owner", q, limit=limit)
                want = await oracle.search("owner", q, limit=limit)
                assert [h.record.id for h in got] == [h.record.id for h in want]
                assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
    finally:
        await store.drop_index()
        await store.close()

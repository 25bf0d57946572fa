"""Focused behaviour of the Qdrant memory store (local mode, and a server when
QDRANT_URL is set). The shipped contract suite runs in test_contract.py."""

from __future__ import annotations

import asyncio
import socket
import uuid

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.adapters.qdrant._codec import _POINT_NAMESPACE, point_id
from agent_memory.domain.errors import (
    BackendUnavailable,
    DimensionMismatch,
    DuplicateRecord,
    InvalidInput,
    NotFound,
    ScopeRequired,
    StoreClosed,
)
from agent_memory.domain.records import EmbeddingSpace, ScoredRecord
from qdrant.support import SPACE, OpenStore, rec


async def test_round_trip_is_exact(store: QdrantMemoryStore) -> None:
    """Qdrant normalises cosine vectors; the store must still return the vector added."""
    vector = np.array([3.0, -4.0, 0.1, 1e-8, 7.5, 0.0, 2.0, -1.0], dtype=np.float32)
    r = rec("x", vector=vector, attributes={"n": 1, "f": 1.0, "nested": {"k": [1, "a"]}})
    await store.add([r])
    got = await store.get("alice", "x")
    assert got == r
    assert got is not None
    assert got.vector.tobytes() == vector.tobytes()
    assert isinstance(got.attributes["n"], int)
    assert isinstance(got.attributes["f"], float)


@pytest.mark.parametrize(("owner", "rid"), [("a", "bc"), ("ü:所", "x|y"), ("o" * 300, "")])
def test_point_id_is_uuid5_of_length_prefixed_pair(owner: str, rid: str) -> None:
    name = f"{len(owner)}:{owner}{rid}"
    assert point_id(owner, rid) == str(uuid.uuid5(_POINT_NAMESPACE, name))


async def test_point_ids_never_collide_across_owner_id_splits(store: QdrantMemoryStore) -> None:
    """("a", "bc") and ("ab", "c") concatenate alike; they must stay two records."""
    assert point_id("a", "bc") != point_id("ab", "c")
    await store.add([rec("bc", "a", content="first"), rec("c", "ab", content="second")])
    first, second = await store.get("a", "bc"), await store.get("ab", "c")
    assert first is not None
    assert first.content == "first"
    assert second is not None
    assert second.content == "second"
    assert await store.get("a", "c") is None


@pytest.mark.parametrize("owner", ["o:1*", "{o}|@-\\ x", "ü 所有者", "a OR b"])
async def test_opaque_owners_do_not_widen_queries(store: QdrantMemoryStore, owner: str) -> None:
    await store.add([rec("1", owner), rec("1", "other"), rec("2", owner + "x")])
    hits = await store.search(owner, np.ones(8, dtype=np.float32), limit=10)
    assert [(h.record.owner, h.record.id) for h in hits] == [(owner, "1")]
    page = await store.list(owner)
    assert [(r.owner, r.id) for r in page.records] == [(owner, "1")]
    assert await store.delete_scope(owner) == 1
    assert await store.get("other", "1") is not None


async def test_duplicate_in_store_rejects_whole_batch(store: QdrantMemoryStore) -> None:
    await store.add([rec("a")])
    with pytest.raises(DuplicateRecord) as err:
        await store.add([rec("b"), rec("a", content="changed")])
    assert err.value.ids == ("a",)
    assert err.value.scope == "alice"
    assert await store.get("alice", "b") is None
    got = await store.get("alice", "a")
    assert got is not None
    assert got.content == "content of a"


async def test_duplicate_within_batch_rejected(store: QdrantMemoryStore) -> None:
    with pytest.raises(DuplicateRecord):
        await store.add([rec("a"), rec("b"), rec("a")])
    assert (await store.list("alice")).records == ()


async def test_concurrent_duplicate_adds_in_one_process(open_store: OpenStore) -> None:
    """Within one process the check-then-write is serialised: exactly one add wins,
    even across two handles sharing a client."""
    one, two = await open_store(), await open_store()
    results = await asyncio.gather(
        *(s.add([rec("same", content=f"v{i}")]) for i, s in enumerate([one, two] * 4)),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, DuplicateRecord) for r in results if r is not None)


async def test_update_and_delete(store: QdrantMemoryStore) -> None:
    with pytest.raises(NotFound):
        await store.update(rec("missing"))
    await store.add([rec("a")])
    await store.update(rec("a", content="new"))
    got = await store.get("alice", "a")
    assert got is not None
    assert got.content == "new"
    assert await store.delete("alice", "a") is True
    assert await store.delete("alice", "a") is False
    assert await store.get("alice", "a") is None


async def test_search_ties_by_id_and_min_score(store: QdrantMemoryStore) -> None:
    """Twenty identical vectors tie; the page is the ten smallest ids, in order."""
    same = np.ones(8, dtype=np.float32)
    ids = [f"r{i:02d}" for i in range(20)]
    await store.add([rec(i, vector=same) for i in reversed(ids)])
    await store.add([rec("far", vector=-same)])
    hits = await store.search("alice", same, limit=10)
    assert [h.record.id for h in hits] == ids[:10]
    assert all(h.score == pytest.approx(1.0, abs=1e-6) for h in hits)
    low = await store.search("alice", same, limit=50, min_score=0.5)
    assert [h.record.id for h in low] == ids
    everything = await store.search("alice", same, limit=50, min_score=-1.0)
    assert everything[-1].record.id == "far"
    assert everything[-1].score == pytest.approx(-1.0)


async def test_zero_vectors_score_zero(store: QdrantMemoryStore) -> None:
    await store.add([rec("z", vector=np.zeros(8)), rec("a", vector=np.ones(8))])
    hits = await store.search("alice", np.zeros(8, dtype=np.float32), limit=5)
    assert [(h.record.id, h.score) for h in hits] == [("a", 0.0), ("z", 0.0)]


async def test_filters(store: QdrantMemoryStore) -> None:
    await store.add(
        [
            rec("1", namespace="n1", kind="k1"),
            rec("2", namespace="n1", kind="k2"),
            rec("3", namespace="n2", kind="k1"),
        ]
    )
    q = np.ones(8, dtype=np.float32)

    def ids(hits: list[ScoredRecord]) -> list[str]:
        return sorted(h.record.id for h in hits)

    assert ids(await store.search("alice", q, namespace="n1")) == ["1", "2"]
    assert ids(await store.search("alice", q, kinds=["k1"])) == ["1", "3"]
    assert ids(await store.search("alice", q, namespace="n1", kinds=["k2", "k9"])) == ["2"]
    assert await store.search("alice", q, kinds=[]) == []
    assert await store.delete_scope("alice", namespace="n1", kinds=["k2"]) == 1
    assert await store.delete_scope("alice", kinds=[]) == 0
    assert await store.delete_scope("alice", namespace="n1") == 1
    assert await store.delete_scope("nobody") == 0
    assert [r.id for r in (await store.list("alice")).records] == ["3"]


async def test_list_pages_through_timestamp_ties(store: QdrantMemoryStore) -> None:
    """Many records share a created_at; keyset pages must neither skip nor repeat."""
    records = [rec(f"r{i}", seconds=i % 3) for i in range(40)]
    await store.add(records)
    expected = sorted(((r.created_at, r.id) for r in records), reverse=True)
    seen: list[tuple[object, str]] = []
    cursor = None
    while True:
        page = await store.list("alice", limit=7, cursor=cursor)
        assert len(page.records) <= 7
        seen.extend((r.created_at, r.id) for r in page.records)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == expected


async def test_invalid_inputs_are_typed(store: QdrantMemoryStore) -> None:
    q = np.ones(8, dtype=np.float32)
    with pytest.raises(ScopeRequired):
        await store.search("  ", q)
    with pytest.raises(DimensionMismatch):
        await store.search("alice", np.ones(3, dtype=np.float32))
    with pytest.raises(DimensionMismatch):
        await store.add([rec("a", vector=np.ones(3))])
    with pytest.raises(InvalidInput, match="limit"):
        await store.list("alice", limit=0)
    with pytest.raises(InvalidInput, match="cursor"):
        await store.list("alice", cursor="not-a-cursor")
    with pytest.raises(InvalidInput, match="kinds"):
        await store.search("alice", q, kinds="fact")


async def test_wrong_dimension_collection_is_refused(
    qclient: AsyncQdrantClient, open_store: OpenStore
) -> None:
    """A collection that exists with another dimension is never written to; the
    error names both dimensions and the collection."""
    store8 = await open_store(SPACE)
    name = store8.collection_name
    await qclient.create_collection(
        name, vectors_config=qm.VectorParams(size=16, distance=qm.Distance.COSINE)
    )
    with pytest.raises(DimensionMismatch) as err:
        await store8.add([rec("a")])
    assert err.value.expected == 8
    assert err.value.got == 16
    assert "expected dimension 8, got 16" in str(err.value)
    assert name in str(err.value)
    with pytest.raises(DimensionMismatch):
        await store8.get("alice", "a")
    info = await qclient.get_collection(name)
    assert info.points_count == 0
    assert isinstance(info.config.params.vectors, qm.VectorParams)
    assert info.config.params.vectors.size == 16


async def test_spaces_use_separate_collections(open_store: OpenStore) -> None:
    small = await open_store(EmbeddingSpace("m", 8))
    other = await open_store(EmbeddingSpace("m", 8, revision="2"))
    assert small.collection_name != other.collection_name
    await small.add([rec("a")])
    assert await other.get("alice", "a") is None


async def test_close_semantics(open_store: OpenStore) -> None:
    store = await open_store()
    await store.add([rec("a")])
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.get("alice", "a")
    with pytest.raises(StoreClosed):
        await store.add([rec("b")])
    again = await open_store()
    assert await again.get("alice", "a") is not None
    assert await again.get("alice", "b") is None


async def test_write_racing_close_is_done_or_rejected(open_store: OpenStore) -> None:
    store = await open_store()
    write = asyncio.ensure_future(store.add([rec("racer")]))
    await asyncio.sleep(0)
    await store.close()
    outcome = await asyncio.gather(write, return_exceptions=True)
    persisted = await (await open_store()).get("alice", "racer")
    if outcome[0] is None:
        assert persisted is not None
    else:
        assert isinstance(outcome[0], StoreClosed)
        assert persisted is None


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_server_raises_backend_unavailable() -> None:
    client = AsyncQdrantClient(
        url=f"http://127.0.0.1:{_dead_port()}", timeout=2, check_compatibility=False
    )
    store = QdrantMemoryStore(client, SPACE, owns_client=True)
    try:
        with pytest.raises(BackendUnavailable) as err:
            await store.ping()
        assert err.value.backend == "qdrant"
        with pytest.raises(BackendUnavailable):
            await store.add([rec("a")])
        with pytest.raises(BackendUnavailable):
            await store.search("alice", np.ones(8, dtype=np.float32))
    finally:
        await store.close()


async def test_scans_page_past_one_batch(store: QdrantMemoryStore) -> None:
    """1,100 records share one timestamp (more than one 1,024-point scroll batch):
    list pages and keyword search must still see every one of them."""
    records = [rec(f"r{i:04d}", content=f"shared word w{i}") for i in range(1_100)]
    for start in range(0, len(records), 550):
        await store.add(records[start : start + 550])
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list("alice", limit=500, cursor=cursor)
        seen.extend(r.id for r in page.records)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == sorted((r.id for r in records), reverse=True)
    hits = await store.search_text("alice", "shared w1099", limit=3)
    assert hits[0].record.id == "r1099"
    assert len(hits) == 3

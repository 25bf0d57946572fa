"""A resharding under an owner's records, driven by hand on a cluster of this
module's own (2 primaries, no replicas; the session's shared cluster is never
touched): CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the source,
MIGRATE of part of the slot's keys (hypothesis draws which, and whether the
owner's statistics moved yet), a pause, then the rest and SETSLOT NODE.

- search (vector, zero vector, filtered), list (paged by cursor) and
  search_text of the owner answer during the migration exactly what they
  answered before it: before the fix they silently answered only the records
  still on the source (the query ran on the index of the primary holding the
  owner's statistics; each node's index holds only its own keys), or failed
  once the statistics had moved; and the first search after the migration
  ended (the handle's slot map stale) failed.
- A key moved, or the migration ended, between the source's and the target's
  read is still seen once.
- Writes during the migration land and are read back when their keys are on
  one side; otherwise (a new record, or one split from the owner's
  statistics) they fail with `BackendUnavailable` naming the slot and change
  nothing; `delete_scope` refuses the same way. After the migration they work.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis
from agent_memory.adapters.redis import RedisMemoryStore
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from servers.redis_cluster_server import RedisCluster

pytestmark = pytest.mark.slow

DIM = 4
SPACE = EmbeddingSpace(model="reshard-hunt", dimension=DIM)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = ["alpha", "beta", "gamma", "delta"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster(primaries=2, replicas_per_primary=0).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
async def store(cluster: RedisCluster) -> AsyncIterator[RedisMemoryStore]:
    s = RedisMemoryStore.from_url(cluster.url, SPACE, deployment="rh" + uuid.uuid4().hex[:10])
    yield s
    await s.close()


def _cmd(port: int, *args: Any) -> Any:
    c = redis.Redis(port=port, socket_timeout=10)
    try:
        return c.execute_command(*args)
    finally:
        c.close()


class Migration:
    """One slot moved from the primary serving it to the other, by hand."""

    def __init__(self, cluster: RedisCluster, slot: int) -> None:
        self.slot = slot
        ports = [n.port for n in cluster.nodes]
        owner = {
            int(primary[1])
            for lo, hi, primary, *_ in _cmd(ports[0], "CLUSTER", "SLOTS")
            if lo <= slot <= hi
        }
        (self.src,) = owner
        (self.dst,) = [p for p in ports if p != self.src]
        self.ports = ports
        self.ids = {p: _cmd(p, "CLUSTER", "MYID").decode() for p in ports}

    def start(self) -> None:
        _cmd(self.dst, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.ids[self.src])
        _cmd(self.src, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.ids[self.dst])

    def slot_keys(self) -> list[bytes]:
        return list(_cmd(self.src, "CLUSTER", "GETKEYSINSLOT", self.slot, 100000))

    def move(self, keys: list[bytes]) -> None:
        if keys:
            _cmd(self.src, "MIGRATE", "127.0.0.1", self.dst, "", 0, 5000, "KEYS", *keys)

    def finish(self) -> None:
        self.move(self.slot_keys())
        for port in [self.dst, self.src, *[p for p in self.ports if p not in (self.dst, self.src)]]:
            _cmd(port, "CLUSTER", "SETSLOT", self.slot, "NODE", self.ids[self.dst])


def _records(owner: str, n: int, zeros: int, rng: np.random.Generator) -> list[MemoryRecord]:
    out = []
    for i in range(n):
        vec = np.zeros(DIM, np.float32) if i < zeros else rng.standard_normal(DIM)
        out.append(
            MemoryRecord(
                id=f"r{i}",
                owner=owner,
                namespace="n" if i % 3 else "m",
                kind="fact" if i % 2 else "note",
                content=f"{WORDS[i % 4]} {WORDS[(i * 7) % 4]} item{i}",
                vector=np.asarray(vec, dtype=np.float32),
                created_at=T0 + timedelta(seconds=i % 5),
                updated_at=T0,
            )
        )
    return out


async def _listing(store: RedisMemoryStore, owner: str, **kw: Any) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        page = await store.list(owner, limit=3, cursor=cursor, **kw)
        out += [r.id for r in page.records]
        cursor = page.next_cursor
        if cursor is None:
            return out


async def _reads(store: RedisMemoryStore, owner: str, q: np.ndarray) -> dict[str, Any]:
    """Every read of the owner whose answer must not change with a migration."""
    zero = np.zeros(DIM, np.float32)
    out: dict[str, Any] = {
        "list": await _listing(store, owner),
        "list_m": await _listing(store, owner, namespace="m"),
        "list_fact": (await store.list(owner, kinds=["fact"], limit=100)).records,
    }
    for limit in (1, 4, 100):
        hits = await store.search(owner, q, limit=limit)
        out[f"search{limit}"] = [(h.record.id, round(h.score, 5)) for h in hits]
    out["search_zero"] = [h.record.id for h in await store.search(owner, zero, limit=100)]
    out["search_n"] = [h.record.id for h in await store.search(owner, q, limit=5, namespace="n")]
    for word in ("alpha", "gamma delta", "item3"):
        hits = await store.search_text(owner, word, limit=50)
        out[f"text {word}"] = [(h.record.id, round(h.score, 5)) for h in hits]
    out["text_k"] = [h.record.id for h in await store.search_text(owner, "beta", kinds=["note"])]
    return out


def _owner_in_a_fresh_slot(store: RedisMemoryStore, taken: set[int]) -> tuple[str, int]:
    client = store._cluster_client
    while True:
        owner = "o-" + uuid.uuid4().hex[:8]
        slot = int(client.keyslot(store._stats_key(owner)))
        if slot not in taken and slot > 100:  # away from the index names' tag slots
            taken.add(slot)
            return owner, slot


_TAKEN: set[int] = set()


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 14),
    zeros=st.integers(0, 2),
    moved=st.floats(0.0, 1.0),
    stats_moved=st.booleans(),
    seed=st.integers(0, 2**16),
)
async def test_reads_are_complete_while_the_owners_slot_is_migrated(
    cluster: RedisCluster, n: int, zeros: int, moved: float, stats_moved: bool, seed: int
) -> None:
    store = RedisMemoryStore.from_url(cluster.url, SPACE, deployment="rh" + uuid.uuid4().hex[:10])
    try:
        rng = np.random.default_rng(seed)
        owner, slot = _owner_in_a_fresh_slot(store, _TAKEN)
        await store.add(_records(owner, n, min(zeros, n), rng))
        q = rng.standard_normal(DIM).astype(np.float32)
        before = await _reads(store, owner, q)
        assert len(before["list"]) == n
        m = Migration(cluster, slot)
        m.start()
        try:
            stats = store._stats_key(owner).encode()
            keys = [k for k in m.slot_keys() if k != stats]
            m.move(keys[: round(len(keys) * moved)] + ([stats] if stats_moved else []))
            during = await _reads(store, owner, q)
            assert during == before, (slot, moved, stats_moved)
        finally:
            m.finish()
        after = await _reads(store, owner, q)  # first calls with a stale slot map
        assert after == before
    finally:
        await store.drop_index()
        await store.close()


@pytest.mark.parametrize("between", ["move_rest", "finish"])
async def test_a_move_between_the_two_reads_is_seen_once(
    cluster: RedisCluster, store: RedisMemoryStore, between: str
) -> None:
    """The source is read, then keys move (or the migration ends), then the
    target is read: every record is returned once."""
    rng = np.random.default_rng(7)
    owner, slot = _owner_in_a_fresh_slot(store, _TAKEN)
    await store.add(_records(owner, 9, 1, rng))
    q = rng.standard_normal(DIM).astype(np.float32)
    before = await _reads(store, owner, q)
    m = Migration(cluster, slot)
    m.start()
    m.move(m.slot_keys()[:4])
    real = store._script_on
    calls = 0

    async def script_on(node: Any, script: Any, args: list[Any], asking: bool) -> Any:
        nonlocal calls
        reply = await real(node, script, args, asking)
        calls += 1
        if calls == 1:  # after the first source read only
            if between == "finish":
                m.finish()
            else:
                m.move(m.slot_keys())
        return reply

    store._script_on = script_on  # type: ignore[method-assign]
    got = await store.list(owner, limit=100)
    assert calls >= 2
    assert sorted(r.id for r in got.records) == sorted(before["list"])
    store._script_on = real  # type: ignore[method-assign]
    if between != "finish":
        m.finish()
    assert await _reads(store, owner, q) == before


async def test_writes_during_a_migration_land_or_fail_typed(
    cluster: RedisCluster, store: RedisMemoryStore
) -> None:
    rng = np.random.default_rng(11)
    owner, slot = _owner_in_a_fresh_slot(store, _TAKEN)
    records = _records(owner, 8, 0, rng)
    await store.add(records)
    m = Migration(cluster, slot)
    m.start()
    moved = [store._key(owner, r.id).encode() for r in records[:4]]
    m.move(moved)  # r0..r3 on the target, r4..r7 and the statistics on the source

    def refused(exc: BaseException) -> bool:
        return isinstance(exc, BackendUnavailable) and f"hash slot {slot}" in str(exc)

    # Same side as the statistics: lands, and every read shows it.
    changed = attrs.evolve(records[5], content="zeta updated")
    await store.update(changed)
    assert (await store.get(owner, "r5")).content == "zeta updated"  # type: ignore[union-attr]
    assert [h.record.id for h in await store.search_text(owner, "zeta")] == ["r5"]
    assert await store.delete(owner, "r6") is True
    assert await store.get(owner, "r6") is None
    # Split from the statistics, or new: refused, naming the slot; nothing changed.
    with pytest.raises(BackendUnavailable) as info:
        await store.update(attrs.evolve(records[1], content="nope"))
    assert refused(info.value), info.value
    assert (await store.get(owner, "r1")).content == records[1].content  # type: ignore[union-attr]
    new = attrs.evolve(records[0], id="fresh")
    with pytest.raises(BackendUnavailable) as info:
        await store.add([new])
    assert refused(info.value), info.value
    with pytest.raises(BackendUnavailable) as info:
        await store.delete_scope(owner)
    assert refused(info.value), info.value
    listed = sorted(r.id for r in (await store.list(owner, limit=100)).records)
    assert listed == ["r0", "r1", "r2", "r3", "r4", "r5", "r7"]
    # The statistics moved too: writes of moved records land on the target.
    m.move([store._stats_key(owner).encode()])
    assert await store.delete(owner, "r2") is True
    changed = attrs.evolve(records[3], content="omega moved")
    await store.update(changed)
    assert [h.record.id for h in await store.search_text(owner, "omega")] == ["r3"]
    m.finish()
    await store.add([new])
    listed = sorted(r.id for r in (await store.list(owner, limit=100)).records)
    assert listed == ["fresh", "r0", "r1", "r3", "r4", "r5", "r7"]
    assert await store.delete_scope(owner) == 7


async def test_drop_index_during_a_migration_is_refused_not_a_crash(
    cluster: RedisCluster, store: RedisMemoryStore
) -> None:
    """FT.DROPINDEX DD deleting a record of a slot being migrated stops the server
    (the Search module asserts on its delete's redirection): before the fix
    `drop_index()` took both primaries down. After the migration it deletes
    every record: the module's DD leaves those that arrived by MIGRATE (before
    the fix they were still listed)."""
    rng = np.random.default_rng(5)
    owner, slot = _owner_in_a_fresh_slot(store, _TAKEN)
    await store.add(_records(owner, 6, 0, rng))
    m = Migration(cluster, slot)
    m.start()
    m.move(m.slot_keys()[:3])
    with pytest.raises(BackendUnavailable) as info:
        await store.drop_index()
    assert f"hash slot {slot}" in str(info.value), info.value
    assert all(n.alive for n in cluster.nodes)
    assert len((await store.list(owner, limit=100)).records) == 6
    m.finish()
    await store.drop_index()
    assert all(n.alive for n in cluster.nodes)
    assert (await store.list(owner, limit=100)).records == ()

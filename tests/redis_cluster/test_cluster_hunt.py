"""Adversarial hunt on a Redis Cluster of this module's own (3 primaries + 3
replicas, 1 s node timeout; the session's shared cluster is never touched).

- Every port answers on the cluster what the in-memory oracle answers for the
  same operations, with hypothesis-drawn owners, domains, scopes and ids that
  hash to many slots (hostile characters and `{hashtag}`-looking values
  included): MemoryStore search/list/delete_scope across owners, EventLog
  window across domains with global events and erase_user, LeaseStore scan,
  Cache delete_prefix, AuditLog. No call raises CROSSSLOT.
- A slot migration (CLUSTER SETSLOT MIGRATING/IMPORTING + MIGRATE, then NODE)
  under an owner's and a domain's keys is transparent: reads and writes during
  and after it give the oracle's answers.
- After a primary failover, `users.forget` completes and a raw scan of every
  node holds nothing of the user.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis
from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.audit import InMemoryAuditLog
from agent_memory.adapters.memory.cache import InMemoryCache
from agent_memory.adapters.memory.events import InMemoryEventLog
from agent_memory.adapters.memory.leases import InMemoryLeaseStore
from agent_memory.adapters.redis import (
    RedisAuditLog,
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.adapters.redis._keys import digest
from agent_memory.contract_tests import event_strategies as evs
from agent_memory.contract_tests import strategies as sts
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, MemoryRecord
from servers.redis_cluster_server import RedisCluster

pytestmark = pytest.mark.slow

DIM = 4
SPACE = EmbeddingSpace(model="cluster-hunt", dimension=DIM)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOSTILE = st.one_of(
    sts.scopes(16),
    st.sampled_from(["{a}", "{}", "{", "}", "x{a}y", "{a}{b}", "{{a}}", "{g}", "{u}"]),
    st.from_regex(r"\A\{[a-z0-9]{1,6}\}[a-z]{0,3}\Z"),
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster(node_timeout_ms=1000).start()
    try:
        yield c
    finally:
        c.stop()


def _dep() -> str:
    return "h" + uuid.uuid4().hex[:12]


def _raw_keys(cluster: RedisCluster) -> dict[int, list[bytes]]:
    """Every key of every live node (replicas included), by port."""
    out: dict[int, list[bytes]] = {}
    for node in cluster.nodes:
        if not node.alive:
            continue
        c = redis.Redis(port=node.port, socket_timeout=5)
        try:
            out[node.port] = list(c.scan_iter(count=1000))
        finally:
            c.close()
    return out


# -- MemoryStore ------------------------------------------------------------


@st.composite
def _records(draw: st.DrawFn) -> list[MemoryRecord]:
    owners = draw(st.lists(HOSTILE, min_size=1, max_size=5, unique=True))
    n = draw(st.integers(1, 12))
    out: list[MemoryRecord] = []
    seen: set[tuple[str, str]] = set()
    for i in range(n):
        owner = draw(st.sampled_from(owners))
        rid = draw(st.one_of(HOSTILE, st.just(f"r{i}")))
        if (owner, rid) in seen:
            continue
        seen.add((owner, rid))
        vec = draw(st.lists(st.integers(-3, 3), min_size=DIM, max_size=DIM))
        if not any(vec):
            vec[0] = 1
        out.append(
            MemoryRecord(
                id=rid,
                owner=owner,
                namespace=draw(st.sampled_from(["n", "m", "{n}"])),
                kind=draw(st.sampled_from(["fact", "k{1}"])),
                content=f"c{i}",
                vector=np.array(vec, dtype=np.float32),
                created_at=T0 + timedelta(seconds=draw(st.integers(0, 3))),
                updated_at=T0,
            )
        )
    return out


def _ids(records: Any) -> list[tuple[str, str]]:
    return [(r.owner, r.id) for r in records]


@pytest.fixture
async def stores(cluster: RedisCluster) -> AsyncIterator[RedisMemoryStore]:
    s = RedisMemoryStore.from_url(cluster.url, SPACE, deployment=_dep())
    yield s
    await s.close()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=_records(), data=st.data())
async def test_memory_store_agrees_with_the_oracle(
    stores: RedisMemoryStore, records: list[MemoryRecord], data: st.DataObject
) -> None:
    store = stores
    oracle = InMemoryMemoryStore(SPACE)
    tag = uuid.uuid4().hex[:6]  # examples share the store: each its own owners
    records = [
        MemoryRecord(**{**_fields(r), "owner": f"{r.owner}{tag}" if i % 2 else f"{tag}{r.owner}"})
        for i, r in enumerate(records)
    ]
    seen: set[tuple[str, str]] = set()
    records = [r for r in records if (r.owner, r.id) not in seen and not seen.add((r.owner, r.id))]
    await store.add(records)
    await oracle.add(records)
    owners = sorted({r.owner for r in records})
    query = np.array([1, 0.5, -0.25, 0.1], dtype=np.float32)
    for owner in owners:
        for ns in (None, "n", "{n}"):
            got = await store.search(owner, query, limit=20, namespace=ns)
            want = await oracle.search(owner, query, limit=20, namespace=ns)
            assert [h.record.id for h in got] == [h.record.id for h in want], (owner, ns)
            page = await store.list(owner, namespace=ns, limit=3)
            wpage = await oracle.list(owner, namespace=ns, limit=3)
            assert [r.id for r in page.records] == [r.id for r in wpage.records], (owner, ns)
        for r in [r for r in records if r.owner == owner]:
            got_r = await store.get(owner, r.id)
            assert got_r is not None
            assert got_r.content == r.content
    victim = data.draw(st.sampled_from(owners))
    kinds = data.draw(st.sampled_from([None, ["fact"], ["k{1}"]]))
    assert await store.delete_scope(victim, kinds=kinds) == await oracle.delete_scope(
        victim, kinds=kinds
    )
    for owner in owners:
        got_all = await store.list(owner, limit=100)
        want_all = await oracle.list(owner, limit=100)
        assert _ids(got_all.records) == _ids(want_all.records), owner
    for owner in owners:
        await store.delete_scope(owner)


def _fields(r: MemoryRecord) -> dict[str, Any]:
    import attrs

    return attrs.asdict(r, recurse=False)


# -- EventLog ---------------------------------------------------------------


@st.composite
def _events(draw: st.DrawFn) -> list[Event]:
    doms = draw(st.lists(st.one_of(HOSTILE, evs.domains()), min_size=1, max_size=4, unique=True))
    users = draw(st.lists(HOSTILE, min_size=1, max_size=3, unique=True))
    now = evs.now_ms()
    times = st.integers(0, 3600).map(lambda s: now - timedelta(seconds=s))
    batch = draw(
        st.lists(
            evs.events(
                domain=st.sampled_from(doms),
                ids=st.one_of(HOSTILE, st.sampled_from(["e1", "e2", "{e}"])),
                occurred_at=times,
                user_id=st.none() | st.sampled_from(users),
            ),
            min_size=1,
            max_size=14,
        )
    )
    return batch


def _eids(events: Any) -> list[tuple[str, str]]:
    return [(e.domain, e.id) for e in events]


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=_events(), data=st.data())
async def test_event_log_agrees_with_the_oracle(
    cluster: RedisCluster, batch: list[Event], data: st.DataObject
) -> None:
    log = RedisEventLog.from_url(cluster.url, deployment=_dep())
    oracle = InMemoryEventLog()
    try:
        half = len(batch) // 2
        for part in (batch[:half], batch[half:]):
            assert await log.append(part) == await oracle.append(part)
        doms = sorted({e.domain for e in batch})
        users = sorted({e.user_id for e in batch if e.user_id is not None})
        since = evs.now_ms() - timedelta(hours=2)
        entity_pool = [ent for e in batch for ent in e.entities]
        for d in doms:
            for limit in (1, 3, 50):
                got = await log.window(d, since=since, limit=limit)
                want = await oracle.window(d, since=since, limit=limit)
                assert _eids(got.events) == _eids(want.events), (d, limit)
                assert got.limited == want.limited, (d, limit)
            if entity_pool:
                ent = data.draw(st.sampled_from(entity_pool))
                got = await log.window(d, since=since, limit=5, entity=ent)
                want = await oracle.window(d, since=since, limit=5, entity=ent)
                assert _eids(got.events) == _eids(want.events), (d, ent)
        assert await log.domains() == await oracle.domains()
        for u in users:
            assert sorted(_eids(await log.user_events(u))) == sorted(
                _eids(await oracle.user_events(u))
            ), u
        if users:
            victim = data.draw(st.sampled_from(users))
            assert await log.erase_user(victim) == await oracle.erase_user(victim)
            assert await log.user_events(victim) == []
            for d in doms:
                got = await log.window(d, since=since, limit=50)
                want = await oracle.window(d, since=since, limit=50)
                assert _eids(got.events) == _eids(want.events), d
            assert await log.domains() == await oracle.domains()
    finally:
        await log.close()


async def test_erase_user_across_slots_racing_appends(cluster: RedisCluster) -> None:
    """Appends of one user's events in many domains (many slots) race erase_user:
    whatever stays is found by user_events, and a last erase leaves nothing."""
    log = RedisEventLog.from_url(cluster.url, deployment=_dep())
    user = "{u}ser:*"
    doms = [f"{{d{i}}}" if i % 2 else f"dom {i}" for i in range(12)]
    now = evs.now_ms()
    try:

        async def writer(w: int) -> None:
            for j in range(15):
                events = [
                    Event(
                        id=f"{{e}}-{w}-{j}-{k}",
                        domain=doms[(w + j + k) % len(doms)],
                        agent="a",
                        action="x",
                        outcome="ok",
                        summary="s",
                        occurred_at=now - timedelta(seconds=j),
                        recorded_at=now,
                        user_id=user if k % 2 == 0 else None,
                        is_global=(k == 3),
                    )
                    for k in range(4)
                ]
                await log.append(events)
                await asyncio.sleep(0)

        async def eraser() -> None:
            for _ in range(8):
                await log.erase_user(user)
                await asyncio.sleep(0.005)

        await asyncio.gather(*(writer(w) for w in range(4)), eraser())
        left = await log.user_events(user)
        # every stored event carrying the user is indexed for them
        since = now - timedelta(hours=1)
        shown = {
            (e.domain, e.id)
            for d in doms
            for e in (await log.window(d, since=since, limit=1000)).events
            if e.user_id == user
        }
        assert shown <= set(_eids(left)), shown - set(_eids(left))
        await log.erase_user(user)
        assert await log.user_events(user) == []
        for d in doms:
            rows = (await log.window(d, since=since, limit=1000)).events
            assert not [e for e in rows if e.user_id == user], d
    finally:
        await log.close()


# -- LeaseStore, Cache, AuditLog ----------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    items=st.lists(
        st.tuples(st.sampled_from(["s", "{s}", "x{s}"]), HOSTILE, st.sampled_from(["o1", "o2"])),
        min_size=1,
        max_size=12,
    ),
    prefixes=st.lists(st.one_of(st.just(""), HOSTILE.map(lambda s: s[:2])), max_size=4),
)
async def test_lease_scan_and_cache_prefix_agree_with_the_oracle(
    cluster: RedisCluster, items: list[tuple[str, str, str]], prefixes: list[str]
) -> None:
    dep = _dep()
    leases = RedisLeaseStore.from_url(cluster.url, deployment=dep)
    cache = RedisCache.from_url(cluster.url, deployment=dep)
    o_leases, o_cache = InMemoryLeaseStore(), InMemoryCache()
    ttl = timedelta(seconds=60)
    try:
        for scope, key, owner in items:
            got = await leases.acquire(scope, key, owner, ttl, payload=key.encode())
            want = await o_leases.acquire(scope, key, owner, ttl, payload=key.encode())
            assert (got is None) == (want is None), (scope, key)
            await cache.put(scope, key, owner.encode() + key.encode())
            await o_cache.put(scope, key, owner.encode() + key.encode())
        scopes = sorted({s for s, _, _ in items})
        for scope in scopes:
            for prefix in ["", *prefixes]:
                got_l = [(x.key, x.owner, x.payload) for x in await leases.scan(scope, prefix)]
                want_l = [(x.key, x.owner, x.payload) for x in await o_leases.scan(scope, prefix)]
                assert got_l == want_l, (scope, prefix)
                got_c = [(x.key, x.value) for x in await cache.entries(scope, prefix)]
                want_c = [(x.key, x.value) for x in await o_cache.entries(scope, prefix)]
                assert got_c == want_c, (scope, prefix)
        for scope in scopes:
            for prefix in prefixes:
                n = await cache.delete_prefix(scope, prefix)
                assert n == await o_cache.delete_prefix(scope, prefix), (scope, prefix)
            got_c = [x.key for x in await cache.entries(scope)]
            assert got_c == [x.key for x in await o_cache.entries(scope)], scope
    finally:
        await leases.close()
        await cache.close()


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    entries=st.lists(
        st.tuples(HOSTILE, st.sampled_from(["", "t{1}", "{t}"]), st.integers(0, 3)),
        min_size=1,
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
async def test_audit_log_agrees_with_the_oracle(
    cluster: RedisCluster, entries: list[tuple[str, str, int]]
) -> None:
    from agent_memory.domain.audit import AuditEntry

    audit, oracle = RedisAuditLog.from_url(cluster.url, deployment=_dep()), InMemoryAuditLog()
    try:
        for eid, tenant, sec in entries:
            entry = AuditEntry(
                id=eid,
                at=T0 + timedelta(seconds=sec),
                operation="forget_user",
                tenant=tenant,
                subject=eid,
                counts={"facts": sec},
                caller="library",
            )
            assert await audit.append(entry) == await oracle.append(entry)
        for tenant in (None, "", "t{1}", "{t}"):
            got = await audit.list(tenant=tenant, limit=3)
            want = await oracle.list(tenant=tenant, limit=3)
            assert [e.id for e in got.entries] == [e.id for e in want.entries], tenant
    finally:
        await audit.close()


def _event(id: str, domain: str, at: datetime, **kw: Any) -> Event:
    return Event(
        id=id,
        domain=domain,
        agent="a",
        action="x",
        outcome="ok",
        summary="s",
        occurred_at=at,
        recorded_at=at,
        **kw,
    )


async def test_a_refused_duplicate_lends_no_global_entries(cluster: RedisCluster) -> None:
    """An append of a different event under an id already held stores nothing:
    before the fix its global references (global timeline, global entity sets)
    were still written, so the stored event was shown for the duplicate's
    entity, or twice in its own domain (and `limited` was set on a window that
    held everything)."""
    log = RedisEventLog.from_url(cluster.url, deployment=_dep())
    now = evs.now_ms()
    a, b = Entity("pod", "a"), Entity("pod", "{b}")
    try:
        assert await log.append([_event("{e}1", "{d}", now, entities=(a,), is_global=True)]) == 1
        assert await log.append([_event("{e}1", "{d}", now, entities=(b,), is_global=True)]) == 0
        since = now - timedelta(hours=1)
        assert (await log.window("{d}", since=since, limit=5, entity=b)).events == ()
        assert (await log.window("other", since=since, limit=5, entity=b)).events == ()
        assert len((await log.window("other", since=since, limit=5, entity=a)).events) == 1
        # a local event first, then a global one under its id: shown once, unlimited
        assert await log.append([_event("{e}2", "{d}", now)]) == 1
        assert await log.append([_event("{e}2", "{d}", now, is_global=True)]) == 0
        got = await log.window("{d}", since=since, limit=2)
        assert [e.id for e in got.events] == ["{e}2", "{e}1"]
        assert not got.limited
        assert (await log.window("other", since=since, limit=5)).events[0].id == "{e}1"
        assert len((await log.window("other", since=since, limit=5)).events) == 1
        # a retry of the same global event still completes its global entries
        again = _event("{e}3", "{d}", now, entities=(b,), is_global=True)
        assert await log.append([again, again]) == 1
        assert await log.append([again]) == 0
        ids = [e.id for e in (await log.window("x", since=since, limit=5, entity=b)).events]
        assert ids == ["{e}3"]
    finally:
        await log.close()


# -- slot migration -----------------------------------------------------------


def _node_of_slot(cluster: RedisCluster, slot: int) -> tuple[Any, str]:
    """The primary serving `slot` and its node id (read from CLUSTER SLOTS)."""
    c = redis.Redis(port=cluster.nodes[0].port, socket_timeout=5)
    try:
        for lo, hi, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if lo <= slot <= hi:
                port = int(primary[1])
                node = next(n for n in cluster.nodes if n.port == port)
                return node, node.node_id()
    finally:
        c.close()
    raise AssertionError(slot)


def _cmd(port: int, *args: Any) -> Any:
    c = redis.Redis(port=port, socket_timeout=10)
    try:
        return c.execute_command(*args)
    finally:
        c.close()


def _migrate(cluster: RedisCluster, slot: int) -> None:
    """Move `slot` to another primary: SETSLOT IMPORTING/MIGRATING, MIGRATE
    every key, then SETSLOT NODE on every primary (what a resharding tool does)."""
    src, src_id = _node_of_slot(cluster, slot)
    dst = next(n for n in cluster.primary_nodes() if n.port != src.port)
    dst_id = dst.node_id()
    _cmd(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    _cmd(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    keys = _cmd(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
    assert keys, slot
    _cmd(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
    for node in cluster.primary_nodes():
        _cmd(node.port, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)


async def test_a_resharded_owner_is_served_on_the_first_call(cluster: RedisCluster) -> None:
    """An owner's slot and a domain's slot move to another primary behind the
    handles' backs (their slot maps are stale). The first search, list,
    delete_scope and window after the move answer what the oracle answers:
    before the fix the owner's first call failed with BackendUnavailable
    ("non local key": the script, redirected by MOVED to the new primary, was
    handed the index name of the old one)."""
    from redis.crc import key_slot

    dep = _dep()
    store = RedisMemoryStore.from_url(cluster.url, SPACE, deployment=dep)
    log = RedisEventLog.from_url(cluster.url, deployment=dep)
    oracle, o_log = InMemoryMemoryStore(SPACE), InMemoryEventLog()
    owner, domain = "{own}er", "{own}er"  # one name, two slots (owner's, domain's)
    now = evs.now_ms()
    since = now - timedelta(hours=1)
    rng = np.random.default_rng(3)
    records = [
        MemoryRecord(
            id=f"{{r}}{i}",
            owner=owner,
            namespace="n",
            kind="fact",
            content=f"c{i}",
            vector=rng.standard_normal(DIM).astype(np.float32),
            created_at=T0 + timedelta(seconds=i),
            updated_at=T0,
        )
        for i in range(6)
    ]
    batch = [_event(f"e{i}", domain, now - timedelta(seconds=i)) for i in range(6)]
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    try:
        await store.add(records)
        await oracle.add(records)
        await log.append(batch)
        await o_log.append(batch)
        assert len(await store.search(owner, q, limit=20)) == 6  # maps and index names cached
        for key in (store._keys.ms_stats(store._sid, owner), log._keys.ev_payloads(domain)):
            _migrate(cluster, key_slot(key.encode()))
        await asyncio.sleep(0.3)  # the new primary's index takes in the migrated keys
        got = [h.record.id for h in await store.search(owner, q, limit=20)]
        assert got == [h.record.id for h in await oracle.search(owner, q, limit=20)]
        assert _ids((await store.list(owner, limit=20)).records) == _ids(
            (await oracle.list(owner, limit=20)).records
        )
        w = await log.window(domain, since=since, limit=20)
        assert _eids(w.events) == _eids((await o_log.window(domain, since=since, limit=20)).events)
        late = [_event("late", domain, now)]
        assert await log.append(late) == await o_log.append(late)
        w = await log.window(domain, since=since, limit=2)
        assert _eids(w.events) == _eids((await o_log.window(domain, since=since, limit=2)).events)
        assert await store.delete_scope(owner) == 6
        assert (await store.list(owner)).records == ()
    finally:
        await store.close()
        await log.close()


# -- forget after a failover (last: it kills a primary of the module's cluster) --


def _holds(cluster: RedisCluster, base: bytes, needles: list[bytes]) -> list[bytes]:
    """Keys under `base` on any live node whose name or value holds a needle
    (the audit keys aside: the forget's own entry names its subject)."""
    hits: list[bytes] = []
    for port, keys in _raw_keys(cluster).items():
        c = redis.Redis(port=port, socket_timeout=5)
        try:
            c.execute_command("READONLY")  # a replica answers reads of its keys
            for key in keys:
                if not key.startswith(base) or b":au:" in key:
                    continue
                kind = c.type(key)
                if kind == b"hash":
                    blob = b"\n".join(k + b"=" + v for k, v in c.hgetall(key).items())
                elif kind == b"zset":
                    blob = b"\n".join(c.zrange(key, 0, -1))
                elif kind == b"set":
                    blob = b"\n".join(c.smembers(key))
                elif kind == b"string":
                    blob = c.get(key) or b""
                else:
                    blob = b""
                if any(n in key or n in blob for n in needles):
                    hits.append(b"%d %s" % (port, key))
        finally:
            c.close()
    return hits


async def test_forget_after_a_failover_leaves_nothing_on_any_node(cluster: RedisCluster) -> None:
    from agent_memory.bootstrap import Settings, connect
    from agent_memory.services.user_scope import user_cache_scope

    dep = _dep()
    memory = await connect(cluster.url, settings=Settings(deployment=dep))
    user = "{u}ser-forget"
    now = evs.now_ms()
    try:
        space = memory.embedder.space
        rng = np.random.default_rng(9)
        await memory.store.add(
            [
                MemoryRecord(
                    id=f"{{f}}{i}",
                    owner=user,
                    namespace=ns,
                    kind="fact",
                    content=f"fact {i} of {user}",
                    vector=rng.standard_normal(space.dimension).astype(np.float32),
                    created_at=T0,
                    updated_at=T0,
                )
                for i, ns in enumerate(["universal", "agent", "{x}"])
            ]
        )
        await memory.events.append(
            [
                _event(f"ev{i}", f"{{dom}}{i}", now, user_id=user, is_global=(i == 2))
                for i in range(5)
            ]
        )
        await memory.cache.put(user_cache_scope(user), "k", user.encode())
        store = memory.store
        client = store._r  # type: ignore[attr-defined]
        await client.initialize()
        key = store._keys.ms_stats(store._sid, user)  # type: ignore[attr-defined]
        port = client.get_node_from_key(key).port
        victim = next(n for n in cluster.nodes if n.port == port)
        replica = cluster.replica_of(victim)
        deadline = time.monotonic() + 10
        while not victim.replicated():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        base = f"agent_memory:v1:{dep}:".encode()
        needles = [user.encode(), digest(user).encode(), digest(user_cache_scope(user)).encode()]
        assert len(_holds(cluster, base, needles)) > 6  # the scan sees the user's data
        victim.kill()
        deadline = time.monotonic() + 30
        while replica.role() != "master" or not cluster.healthy():
            assert time.monotonic() < deadline, "no promotion"
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + 20
        while True:
            receipt = await memory.users.forget(user)
            if receipt.complete:
                break
            assert time.monotonic() < deadline, receipt.failures
            await asyncio.sleep(0.2)
        assert _holds(cluster, base, needles) == []
        assert await memory.events.user_events(user) == []
        assert (await memory.store.list(user)).records == ()
    finally:
        await memory.close()

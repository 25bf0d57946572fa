"""A resharding under the event log, leases, cache, audit log, `owners()` and a
user's forget, driven by hand on a 2-primary cluster of this module's own (the
`Migration` of test_cluster_resharding_hunt: SETSLOT IMPORTING/MIGRATING, MIGRATE
of part of the slot's keys, then the rest and SETSLOT NODE).

Every operation, with the slot half migrated, either answers what it answered
before the migration (or does the whole write) or raises `BackendUnavailable`;
a retry after the migration completes it. Nothing is silently partial.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.redis import RedisMemoryStore
from agent_memory.adapters.redis._keys import digest
from agent_memory.adapters.redis.audit import RedisAuditLog
from agent_memory.adapters.redis.cache import RedisCache
from agent_memory.adapters.redis.events import RedisEventLog
from agent_memory.adapters.redis.leases import RedisLeaseStore
from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import EmbeddingSpace, Entity, Event
from redis_cluster.test_cluster_resharding_hunt import (  # the same hand-driven migration
    _TAKEN,
    Migration,
    _cmd,
    _owner_in_a_fresh_slot,
    _records,
    cluster,
)
from servers.redis_cluster_server import RedisCluster

__all__ = ["cluster"]

pytestmark = pytest.mark.slow

SPACE = EmbeddingSpace(model="reshard-hunt2", dimension=4)
NOW = datetime.now(UTC).replace(microsecond=0)


def _dep() -> str:
    return "rh2" + uuid.uuid4().hex[:10]


def _raw_keys(cluster: RedisCluster, pattern: str) -> list[bytes]:
    """Every key matching `pattern` on every primary (node by node, raw)."""
    out: list[bytes] = []
    for node in cluster.nodes:
        cursor = 0
        while True:
            cursor, keys = _cmd(node.port, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            out += keys
            if int(cursor) == 0:
                break
    return out


def _slot(key: str) -> int:
    from redis.crc import key_slot

    return int(key_slot(key.encode()))


def _pick(keys: list[bytes], mask: int) -> list[bytes]:
    return [k for i, k in enumerate(sorted(keys)) if mask >> (i % 16) & 1]


@pytest.fixture
async def events(cluster: RedisCluster) -> AsyncIterator[RedisEventLog]:
    log = RedisEventLog.from_url(cluster.url, deployment=_dep())
    yield log
    await log.close()


# -- owners(): a key moving between the two nodes' SCANs ---------------------


async def test_owners_sees_an_owner_whose_keys_move_between_the_nodes_scans(
    cluster: RedisCluster,
) -> None:
    """The cluster SCAN asks each primary in turn: the target, then (after the
    owner's keys moved there) the source finds none of them. Before the fix the
    owner was silently missing from `owners()`."""
    store = RedisMemoryStore.from_url(cluster.url, SPACE, deployment=_dep())
    try:
        owner, slot = _owner_in_a_fresh_slot(store, _TAKEN)
        other, _ = _owner_in_a_fresh_slot(store, _TAKEN)
        await store.add(_records(owner, 3, 0, __import__("numpy").random.default_rng(1)))
        await store.add(_records(other, 2, 0, __import__("numpy").random.default_rng(2)))
        assert await store.owners() == sorted([owner, other])
        m = Migration(cluster, slot)
        m.start()
        try:
            real = store._r.scan
            moved = False

            async def scan(*args: Any, **kw: Any) -> Any:
                nonlocal moved
                if kw.get("cursor", 0) or moved or "target_nodes" in kw:
                    return await real(*args, **kw)
                # the first SCAN of every node: the target's answer, then the
                # move, then the source's (as when its reply comes later)
                nodes = {n.port: n for n in store._r.get_primaries()}
                first, data = await real(*args, target_nodes=nodes[m.dst], **kw)
                m.move(m.slot_keys())
                moved = True
                second, more = await real(*args, target_nodes=nodes[m.src], **kw)
                return {**first, **second}, [*data, *more]

            store._r.scan = scan  # type: ignore[method-assign]
            try:
                got = await store.owners()
            finally:
                store._r.scan = real  # type: ignore[method-assign]
            assert moved
            assert got == sorted([owner, other])
            assert await store.owners() == sorted([owner, other])  # during the migration
        finally:
            m.finish()
        assert await store.owners() == sorted([owner, other])
    finally:
        await store.drop_index()
        await store.close()


# -- EventLog: windows, user_events, domains, erase_user, purge ---------------


def _domain_in_a_fresh_slot(log: RedisEventLog) -> tuple[str, int]:
    while True:
        domain = "d-" + uuid.uuid4().hex[:8]
        slot = _slot(log._keys.ev_payloads(domain))
        if slot not in _TAKEN and slot > 100:
            _TAKEN.add(slot)
            return domain, slot


def _events(domain: str, user: str, n: int) -> list[Event]:
    out = []
    for i in range(n):
        out.append(
            Event(
                id=f"e{i}",
                domain=domain,
                agent="a",
                action="act",
                outcome="ok",
                summary=f"event {i}",
                occurred_at=NOW - timedelta(minutes=i),
                recorded_at=NOW - timedelta(minutes=i),
                user_id=user if i % 3 else "someone-else",
                entities=(Entity("doc", f"x{i % 2}"),),
                is_global=i == 4,
            )
        )
    return out


async def _event_reads(log: RedisEventLog, domain: str, user: str) -> dict[str, Any]:
    since = NOW - timedelta(days=1)
    return {
        "window": (await log.window(domain, since=since, limit=100)).events,
        "window3": (await log.window(domain, since=since, limit=3)),
        "entity": (await log.window(domain, since=since, limit=100, entity=Entity("doc", "x1"))),
        "user": await log.user_events(user),
        "domains": await log.domains(),
    }


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(1, 9), mask=st.integers(0, 2**16 - 1))
async def test_event_log_with_its_domains_slot_half_migrated(
    cluster: RedisCluster, n: int, mask: int
) -> None:
    log = RedisEventLog.from_url(cluster.url, deployment=_dep())
    try:
        user = "u-" + uuid.uuid4().hex[:6]
        domain, slot = _domain_in_a_fresh_slot(log)
        await log.append(_events(domain, user, n))
        before = await _event_reads(log, domain, user)
        mine = sorted(e.id for e in before["user"])
        m = Migration(cluster, slot)
        m.start()
        erased: int | None = None
        try:
            m.move(_pick(m.slot_keys(), mask))
            try:
                during = await _event_reads(log, domain, user)
            except BackendUnavailable:
                pass  # typed and retryable: allowed
            else:
                assert during == before
            try:
                erased = await log.erase_user(user)
            except BackendUnavailable:
                erased = None  # a later erase must complete it
            if erased is not None:
                assert erased == len(mine)
                assert await log.user_events(user) == []
        finally:
            m.finish()
        if erased is None:
            assert await log.erase_user(user) == len(mine)
        assert await log.user_events(user) == []
        left = sorted(
            e.id
            for e in (await log.window(domain, since=NOW - timedelta(days=1), limit=100)).events
        )
        assert left == sorted(e.id for e in before["window"] if e.user_id != user)
        assert _raw_keys(cluster, f"*{digest(user)}*") == []  # no user set left
        payloads = _cmd(m.dst, "HVALS", log._keys.ev_payloads(domain))
        assert not [v for v in payloads if user.encode() in v]  # no payload left
    finally:
        await log.close()


# -- LeaseStore and Cache ----------------------------------------------------


def _scope_in_a_fresh_slot(key_of: Any) -> tuple[str, int]:
    while True:
        scope = "s-" + uuid.uuid4().hex[:8]
        slot = _slot(key_of(scope))
        if slot not in _TAKEN and slot > 100:
            _TAKEN.add(slot)
            return scope, slot


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(mask=st.integers(0, 7))
async def test_one_lease_holder_across_the_move(cluster: RedisCluster, mask: int) -> None:
    leases = RedisLeaseStore.from_url(cluster.url, deployment=_dep(), wait_replicas=0)
    try:
        scope, slot = _scope_in_a_fresh_slot(lambda s: leases._keys.lease_index(s))
        ttl = timedelta(seconds=30)
        held = await leases.acquire(scope, "job", "A", ttl)
        assert held is not None
        m = Migration(cluster, slot)
        m.start()
        tokens = [held.token]
        try:
            m.move(_pick(m.slot_keys(), mask))
            for owner in ("B", "A"):
                try:
                    got = await leases.acquire(scope, "job", owner, ttl)
                except BackendUnavailable:
                    continue
                if owner == "B":
                    assert got is None  # A holds it
                else:
                    assert got is not None
                    assert got.token == held.token
            try:
                renewed = await leases.renew(scope, "job", "A", ttl)
                assert renewed.token == held.token
            except BackendUnavailable:
                pass
            with contextlib.suppress(BackendUnavailable):  # typed: allowed
                listed = await leases.scan(scope)
                assert [(x.key, x.owner) for x in listed] == [("job", "A")]
        finally:
            m.finish()
        assert await leases.acquire(scope, "job", "B", ttl) is None
        assert await leases.release(scope, "job", "A") is True
        b = await leases.acquire(scope, "job", "B", ttl)
        assert b is not None
        assert b.token > max(tokens)
    finally:
        await leases.close()


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(mask=st.integers(0, 2**8 - 1))
async def test_cache_with_its_scopes_slot_half_migrated(cluster: RedisCluster, mask: int) -> None:
    cache = RedisCache.from_url(cluster.url, deployment=_dep())
    try:
        scope, slot = _scope_in_a_fresh_slot(lambda s: cache._keys.cache_index(s))
        for i in range(5):
            await cache.put(scope, f"p:{i}", b"v%d" % i)
        await cache.put(scope, "q", b"other")
        before = [(e.key, e.value) for e in await cache.entries(scope)]
        m = Migration(cluster, slot)
        m.start()
        deleted: int | None = None
        try:
            m.move(_pick(m.slot_keys(), mask))
            with contextlib.suppress(BackendUnavailable):  # typed: allowed
                during = [(e.key, e.value) for e in await cache.entries(scope)]
                assert during == before
            for i in range(5):
                assert await cache.get(scope, f"p:{i}") == b"v%d" % i
            try:
                deleted = await cache.delete_prefix(scope, "p:")
                assert deleted == 5
            except BackendUnavailable:
                deleted = None
        finally:
            m.finish()
        if deleted is None:
            assert await cache.delete_prefix(scope, "p:") == 5
        assert [(e.key, e.value) for e in await cache.entries(scope)] == [("q", b"other")]
        assert [await cache.get(scope, f"p:{i}") for i in range(5)] == [None] * 5
    finally:
        await cache.close()


def _entry(id_: str, i: int) -> AuditEntry:
    return AuditEntry(
        id=id_,
        at=NOW + timedelta(seconds=i),
        operation="forget_user",
        tenant="t",
        subject="alice",
        counts={"facts": i},
        caller="library",
    )


async def test_audit_log_with_its_slot_half_migrated(cluster: RedisCluster) -> None:
    audit = RedisAuditLog.from_url(cluster.url, deployment=_dep())
    try:
        base = audit.key_prefix
        slot = _slot(base + ":z")
        entries = [_entry(f"a{i}", i) for i in range(4)]
        for e in entries:
            assert await audit.append(e) is True
        before = (await audit.list(limit=10)).entries
        m = Migration(cluster, slot)
        m.start()
        try:
            m.move([k for k in m.slot_keys() if k.endswith(b":e")])
            with contextlib.suppress(BackendUnavailable):  # typed: allowed
                assert (await audit.list(limit=10)).entries == before
            extra = _entry("a9", 9)
            try:
                landed = await audit.append(extra)
            except BackendUnavailable:
                landed = False
        finally:
            m.finish()
        if not landed:
            assert await audit.append(extra) is True
        got = (await audit.list(limit=10)).entries
        assert [e.id for e in got] == ["a9", "a3", "a2", "a1", "a0"]
    finally:
        await audit.close()

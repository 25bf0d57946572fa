"""Failover on a real cluster (a dedicated 3 + 3 cluster per test, 1 s node
timeout, so the session cluster is never touched).

- 16 agent requests run concurrently on one `Memory` handle while a primary is
  SIGKILLed: they fail open during the gap (failures land in their reports,
  nothing is raised), the replica is promoted, and afterwards (the killed node
  back as a replica) every request succeeds on the same handle; vector search
  answers from the promoted node, and no fencing token is issued twice.
- Deterministic loss: with the replica paused and its link closed, an acquire
  that does not wait for a replica issues a token the promoted replica never saw
  (it is issued again); with `wait_replicas=1` that acquire fails instead, and no
  token it issued is reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from agent_memory.adapters.redis import RedisLeaseStore
from agent_memory.bootstrap import Settings, connect
from agent_memory.domain.errors import BackendUnavailable
from agent_memory.domain.records import Entity, MemoryRecord
from agent_memory.domain.steps import Step
from servers.redis_cluster_server import RedisCluster, launch_cluster

pytestmark = pytest.mark.slow
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    c = launch_cluster(node_timeout_ms=1000)
    try:
        yield c
    finally:
        c.stop()


async def _until(check: object, timeout: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_requests_fail_open_through_failover(cluster: RedisCluster) -> None:
    settings = Settings(deployment=f"fo-{uuid.uuid4().hex[:8]}")
    memory = await connect(cluster.url, settings=settings)
    try:
        store, leases = memory.store, memory.leases
        space = memory.embedder.space
        rng = np.random.default_rng(5)
        owners = [f"owner-{i}" for i in range(24)]
        records = [
            MemoryRecord(
                id=f"r{j}",
                owner=o,
                namespace="n",
                kind="fact",
                content=f"fact {j} of {o}",
                vector=rng.standard_normal(space.dimension).astype(np.float32),
                created_at=T0,
                updated_at=T0,
            )
            for o in owners
            for j in range(3)
        ]
        await store.add(records)
        query = rng.standard_normal(space.dimension).astype(np.float32)
        before = {o: [h.record.id for h in await store.search(o, query, limit=3)] for o in owners}
        victim = cluster.nodes[0]
        replica = cluster.replica_of(victim)
        await _until(victim.replicated, 10, "the records on the replica")

        outcomes: list[tuple[float, bool]] = []  # (start time, every stage ok)
        errors: list[BaseException] = []
        tokens: dict[str, list[tuple[int, str]]] = {}  # key -> (token, holder) issued
        stop = asyncio.Event()

        async def agent(i: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                started = time.monotonic()
                try:
                    async with memory.agents.request(
                        agent=f"agent-{i}", domain=f"domain-{i % 5}",
                        request_id=f"req-{i}-{n}", entities=[Entity("pod", f"pod-{i % 7}")],
                    ) as req:  # fmt: skip
                        await req.planning_context()
                        await req.record([Step(action=f"step {n}", outcome="success")])
                    outcomes.append((started, all(r.ok for r in req.reports.values())))
                except BaseException as exc:  # nothing may escape a request
                    errors.append(exc)
                await asyncio.sleep(0.02)

        async def fencer(i: int) -> None:
            """Acquire and release shared keys; every token issued is recorded."""
            while not stop.is_set():
                key = f"job-{i % 4}"
                try:
                    lease = await leases.acquire("fence", key, f"w{i}", timedelta(seconds=5))
                except BackendUnavailable:
                    lease = None
                if lease is not None:
                    tokens.setdefault(key, []).append((lease.token, lease.owner))
                    with contextlib.suppress(BackendUnavailable):
                        await leases.release("fence", key, f"w{i}")
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(agent(i)) for i in range(16)]
        tasks += [asyncio.create_task(fencer(i)) for i in range(8)]
        await asyncio.sleep(1.0)
        killed_at = time.monotonic()
        victim.kill()
        await _until(lambda: replica.role() == "master", 30, "the replica's promotion")
        promoted_at = time.monotonic()
        await _until(cluster.healthy, 30, "cluster_state:ok after the promotion")
        # Search answers from the promoted node (its index, or one healed there): the
        # client may still route a first call by its old slot map and get a typed
        # BackendUnavailable while it rereads the map; within seconds every owner's
        # results must be exactly the ones from before the kill.
        deadline = time.monotonic() + 15
        for o in owners:
            while True:
                try:
                    got = [h.record.id for h in await store.search(o, query, limit=3)]
                    break
                except BackendUnavailable:
                    assert time.monotonic() < deadline, f"search of {o} did not recover"
                    await asyncio.sleep(0.1)
            assert got == before[o], o
        victim.start()  # back as a replica of the promoted node: leases can be acknowledged
        await _until(cluster.healthy, 30, "the killed node back as a replica")
        recovered_at = time.monotonic()
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*tasks)

        assert not errors, errors[:3]
        gap = [ok for at, ok in outcomes if killed_at <= at < promoted_at]
        assert gap, "requests ran during the gap"
        assert not all(gap), "the gap was observed: some requests failed open"
        after = [ok for at, ok in outcomes if at >= recovered_at + 0.5]
        assert len(after) >= 16, len(after)
        assert all(after), f"{after.count(False)} of {len(after)} requests failed after recovery"
        # A token goes to one holder only (a holder whose release failed gets its own
        # lease, and token, back when it acquires again), and tokens only grow.
        for key, issued in tokens.items():
            holders: dict[int, set[str]] = {}
            for token, holder in issued:
                holders.setdefault(token, set()).add(holder)
            twice = {t: h for t, h in holders.items() if len(h) > 1}
            assert not twice, f"fencing tokens of {key} issued to two holders: {twice}"
            assert [t for t, _ in issued] == sorted(t for t, _ in issued), key
        print(f"gap {promoted_at - killed_at:.1f} s, {len(outcomes)} requests")
    finally:
        await memory.close()


async def test_unacknowledged_tokens_are_reissued_only_without_wait(
    cluster: RedisCluster,
) -> None:
    deployment = f"fw-{uuid.uuid4().hex[:8]}"
    waiting = RedisLeaseStore.from_url(cluster.url, deployment=deployment)
    unsafe = RedisLeaseStore.from_url(cluster.url, deployment=deployment, wait_replicas=0)
    ttl = timedelta(seconds=30)
    try:
        assert waiting.wait_replicas == 1
        issued: list[int] = []  # tokens handed out with the wait
        for i in range(3):
            lease = await waiting.acquire("s", "k", f"before-{i}", ttl)
            assert lease is not None
            issued.append(lease.token)
            assert await waiting.release("s", "k", f"before-{i}")
        client = waiting._r
        await client.initialize()
        victim = next(
            n
            for n in cluster.nodes
            if n.port == client.get_node_from_key(waiting._keys.lease("s", "k")).port
        )
        replica = cluster.replica_of(victim)
        await _until(victim.replicated, 10, "the releases on the replica")
        replica.pause()
        victim.drop_replica_links()  # what it writes from now on reaches no replica
        lost = await unsafe.acquire("s", "k", "unsafe", ttl)  # the primary alone has it
        assert lost is not None
        assert lost.token == issued[-1] + 1
        await unsafe.release("s", "k", "unsafe")
        with pytest.raises(BackendUnavailable, match="acknowledged"):
            await waiting.acquire("s", "k", "waiting", timedelta(seconds=30))
        victim.kill()
        replica.resume()
        await _until(lambda: replica.role() == "master", 30, "the replica's promotion")
        victim.start()  # back as the promoted node's replica, so acquires can be acknowledged
        await _until(cluster.healthy, 30, "the killed node back as a replica")
        for _ in range(200):  # until the client finds the promoted primary
            try:
                again = await waiting.acquire("s", "k", "after", ttl)
                break
            except BackendUnavailable:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("no acquire succeeded after the promotion")
        assert again is not None, await waiting.get("s", "k")
        issued.append(again.token)
        assert len(issued) == len(set(issued)), f"tokens issued with the wait repeat: {issued}"
        assert again.token == lost.token, "without the wait, a token was issued twice"
    finally:
        await waiting.close()
        await unsafe.close()

"""Server restart, missing Search module: typed errors and recovery on a real server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from redis_helpers import SPACE, make_record

from agent_memory.adapters.redis import (
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.domain.errors import BackendUnavailable, SearchModuleMissing
from agent_memory.domain.records import Event
from servers.redis_server import RedisServer


def _event(id: str, domain: str = "d") -> Event:
    now = datetime.now(UTC)
    return Event(
        id=id, domain=domain, agent="a", action="act", outcome="ok", summary="s",
        occurred_at=now, recorded_at=now,
    )  # fmt: skip


async def test_adapters_survive_a_server_restart(restartable_redis: RedisServer) -> None:
    url = restartable_redis.url
    fast = {"socket_timeout": 1.0, "socket_connect_timeout": 0.5}
    store = RedisMemoryStore.from_url(url, SPACE, client_options=fast)
    log = RedisEventLog.from_url(url, client_options=fast)
    leases = RedisLeaseStore.from_url(url, client_options=fast)
    cache = RedisCache.from_url(url, client_options=fast)
    try:
        await store.add([make_record("before")])
        assert await log.append([_event("e1")]) == 1
        await cache.put("s", "k", b"v")
        assert await leases.acquire("s", "k", "me", timedelta(seconds=5)) is not None

        restartable_redis.stop()
        for op in (
            lambda: store.ping(),
            lambda: store.get("alice", "before"),
            lambda: store.search("alice", np.ones(8, dtype=np.float32)),
            lambda: log.window("d", since=datetime(2000, 1, 1, tzinfo=UTC), limit=5),
            lambda: leases.get("s", "k"),
            lambda: cache.get("s", "k"),
        ):
            with pytest.raises(BackendUnavailable):
                await op()

        restartable_redis.start()  # same port, empty (no persistence)
        await store.ping()
        assert await store.get("alice", "before") is None
        await store.add([make_record("after")])  # written before the index is back
        hits = await store.search("alice", np.ones(8, dtype=np.float32))
        assert [h.record.id for h in hits] == ["after"]
        assert await log.append([_event("e2")]) == 1
        window = await log.window("d", since=datetime(2000, 1, 1, tzinfo=UTC), limit=5)
        assert [e.id for e in window.events] == ["e2"]
        await cache.put("s", "k", b"w")
        assert await cache.get("s", "k") == b"w"
        lease = await leases.acquire("s", "k", "me", timedelta(seconds=5))
        assert lease is not None
    finally:
        for closable in (store, log, leases, cache):
            await closable.close()


async def test_without_search_module_vectors_fail_clearly(plain_redis: RedisServer) -> None:
    url = plain_redis.url
    store = RedisMemoryStore.from_url(url, SPACE)
    log = RedisEventLog.from_url(url)
    leases = RedisLeaseStore.from_url(url)
    cache = RedisCache.from_url(url)
    try:
        for op in (
            lambda: store.add([make_record("r")]),
            lambda: store.search("alice", np.ones(8, dtype=np.float32)),
            lambda: store.list("alice"),
            lambda: store.search_text("alice", "hello"),
            lambda: store.ensure_index(),
        ):
            with pytest.raises(SearchModuleMissing) as err:
                await op()
            message = str(err.value)
            assert "Redis 8+" in message
            assert "Redis Stack" in message
            assert "Valkey" in message
            assert isinstance(err.value, BackendUnavailable)
        # The other ports need no module.
        assert await log.append([_event("e1")]) == 1
        window = await log.window("d", since=datetime(2000, 1, 1, tzinfo=UTC), limit=5)
        assert [e.id for e in window.events] == ["e1"]
        lease = await leases.acquire("s", "k", "me", timedelta(seconds=5))
        assert lease is not None
        assert lease.token == 1
        await cache.put("s", "k", b"v")
        assert await cache.get("s", "k") == b"v"
        await store.ping()
    finally:
        for closable in (store, log, leases, cache):
            await closable.close()


async def test_unreachable_server_is_backend_unavailable() -> None:
    from servers.redis_server import _free_port

    url = f"redis://127.0.0.1:{_free_port()}/0"
    cache = RedisCache.from_url(url, client_options={"socket_connect_timeout": 0.2})
    try:
        with pytest.raises(BackendUnavailable) as err:
            await cache.put("s", "k", b"v")
        assert err.value.backend == "redis"
    finally:
        await cache.close()

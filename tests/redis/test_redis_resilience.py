"""Server restart, missing Search module: typed errors and recovery on a real server."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis_helpers import SPACE, make_record

from agent_memory.adapters.redis import (
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.adapters.redis._errors import translate
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


class _TornConnection(Connection):
    """A real connection on which another task's `disconnect()` lands in the task
    switch between the connected check and the write (`asyncio.wait_for` runs the
    write as its own task): the interleaving the cluster failover run hit, where
    redis-py raises a bare `AttributeError` ('NoneType' object has no attribute
    'writelines') instead of a `ConnectionError`."""

    async def _send_packed_command(self, command: Iterable[bytes]) -> None:
        await self.disconnect(nowait=True)
        await super()._send_packed_command(command)


async def test_a_connection_torn_down_under_a_write_is_backend_unavailable(
    redis_url: str,
) -> None:
    client = Redis(
        connection_pool=ConnectionPool.from_url(
            redis_url, connection_class=_TornConnection, socket_timeout=2.0
        )
    )
    leases = RedisLeaseStore(client, owns_client=True)
    cache = RedisCache(client)
    try:
        for op in (
            lambda: leases.acquire("s", "k", "me", timedelta(seconds=5)),
            lambda: cache.get("s", "k"),
        ):
            with pytest.raises(BackendUnavailable) as err:
                await op()
            # Either redis-py notices the teardown itself ("Connection closed by the
            # server before write", a ConnectionError) or the write lands on the torn
            # transport (the bare AttributeError, translated): which one depends on
            # the task switch; both must reach the caller as BackendUnavailable.
            assert "closed" in str(err.value), err.value
    finally:
        await leases.close()


def test_an_attribute_error_of_our_own_is_not_translated() -> None:
    """Only the client's transport teardown becomes `BackendUnavailable`; a bug in
    the adapter's own code still surfaces as itself."""
    with pytest.raises(AttributeError), translate("op"):
        None.writelines  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(TypeError), translate("op"):
        int.from_bytes(None)  # type: ignore[call-overload]

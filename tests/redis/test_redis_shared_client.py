"""connect("redis://...") gives the four ports one connection pool, closed with
the last port that uses it, never earlier."""

from __future__ import annotations

from datetime import timedelta

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings, open_stores


async def test_ports_share_one_pool_closed_by_the_last_port(redis_url: str) -> None:
    stores = await open_stores(
        redis_url, space=HashingEmbedder(16).space, settings=Settings(deployment="shared-pool")
    )
    assert stores.cache is not None
    assert stores.leases is not None
    assert stores.events is not None
    assert stores.audit is not None
    ports = (stores.store, stores.events, stores.leases, stores.cache, stores.audit)
    clients = {id(p._r) for p in ports}  # type: ignore[union-attr]
    assert len(clients) == 1, "one client, one pool for the five ports"
    await stores.store.close()
    await stores.events.close()
    await stores.leases.close()
    await stores.audit.close()
    await stores.cache.put("s", "k", b"v", ttl=timedelta(seconds=30))
    assert await stores.cache.get("s", "k") == b"v", "the last port still works"
    shared = stores.cache._shared  # type: ignore[attr-defined]
    assert shared._refs == 1, "four ports released the shared client, one holds it"
    closed: list[bool] = []
    real_close = shared.client.aclose

    async def spy() -> None:
        closed.append(True)
        await real_close()

    shared.client.aclose = spy
    await stores.cache.close()
    assert closed == [True], "the client is closed exactly once, with the last port"

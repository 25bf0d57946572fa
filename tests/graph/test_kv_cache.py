"""`KeyValueCache` (checkpoints in a JetStream key-value bucket) passes the Cache contract."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import ClassVar

import nats
import nats.js.errors
import pytest

from agent_memory.adapters.nats import JetStreamBus, KeyValueCache
from agent_memory.contract_tests import CacheContract
from agent_memory.contract_tests.capabilities import Capabilities


class _Buckets:
    """One test's bucket and every connection opened on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"CACHETEST_{uuid.uuid4().hex[:8]}"
        self.buses: list[JetStreamBus] = []

    async def open(self) -> KeyValueCache:
        bus = JetStreamBus(self.url)
        self.buses.append(bus)
        await bus.connect()
        kv = await bus.key_value(self.name)
        assert kv is not None
        return KeyValueCache(kv)

    async def destroy(self) -> None:
        for bus in self.buses:
            await bus.close()
        nc = await nats.connect(self.url)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(f"KV_{self.name}")
        await nc.close()


class TestKeyValueCache(CacheContract):
    capabilities: ClassVar[Capabilities] = Capabilities(ttl_resolution_ms=50, reopen=True)

    @pytest.fixture
    async def buckets(self, nats_url: str) -> AsyncIterator[_Buckets]:
        buckets = _Buckets(nats_url)
        try:
            yield buckets
        finally:
            await buckets.destroy()

    @pytest.fixture
    async def cache(self, buckets: _Buckets) -> AsyncIterator[KeyValueCache]:
        cache = await buckets.open()
        yield cache
        await cache.close()

    @pytest.fixture
    def reopen(self, buckets: _Buckets) -> Callable[[], Awaitable[KeyValueCache]]:
        return buckets.open

"""`KeyValueCache` (checkpoints in a JetStream key-value bucket) passes the Cache contract."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import ClassVar

import nats
import nats.js.errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.nats import JetStreamBus, KeyValueCache
from agent_memory.adapters.nats.kv_cache import decode_key_part, encode_key_part
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


async def test_delete_prefix_reads_keys_without_leaving_consumers(nats_url: str) -> None:
    """Listing keys for `delete_prefix` (and `ping`) reads the stream's subject state:
    nats-py's `KeyValue.keys()` created a consumer per call and left it on the server
    (two per round here; the server refused new ones after about a thousand)."""
    buckets = _Buckets(nats_url)
    try:
        cache = await buckets.open()
        await cache.put("s", "k", b"v")
        for _ in range(10):
            assert await cache.delete_prefix("s", "zz") == 0
            await cache.ping()
        nc = await nats.connect(nats_url)
        try:
            info = await nc.jetstream().stream_info(f"KV_{buckets.name}")
        finally:
            await nc.close()
        assert info.state.consumer_count == 0
        assert await cache.delete_prefix("s", "k") == 1
        assert await cache.delete_prefix("s", "k") == 0  # its delete marker is no key
    finally:
        await buckets.destroy()


async def test_delete_prefix_sees_every_key_just_written(nats_url: str) -> None:
    """A key written (and acknowledged) is one `delete_prefix` finds, every time: the
    watch nats-py's `keys()` uses could report the listing done before delivering it
    (about 1 in 450 rounds)."""
    buckets = _Buckets(nats_url)
    try:
        cache = await buckets.open()
        missed = 0
        for i in range(400):
            await cache.put(f"rt-{i}", "k", b"v")
            missed += await cache.delete_prefix(f"rt-{i}", "k") != 1
        assert missed == 0
    finally:
        await buckets.destroy()


@settings(max_examples=300)
@given(st.text(st.characters(codec="utf-8")), st.text(st.characters(codec="utf-8"), max_size=3))
def test_key_encoding_round_trips_and_keeps_prefixes(text: str, other: str) -> None:
    """`entries` decodes what `encode_key_part` wrote, and `delete_prefix` / `entries`
    filter encoded keys by the encoded prefix: exact only if the encoding keeps
    prefixes in both directions."""
    encoded = encode_key_part(text)
    assert decode_key_part(encoded) == text
    assert re.fullmatch(r"[A-Za-z0-9_\-/=]*", encoded)  # one subject token, no wildcard
    for prefix in (text[: len(text) // 2], other, text + other):
        assert encoded.startswith(encode_key_part(prefix)) == text.startswith(prefix)

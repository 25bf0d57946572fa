"""A cluster node that accepts and never answers (SIGSTOP: a frozen or
partitioned host), on a dedicated 3 + 3 cluster whose node timeout is far longer
than the test (no failover happens, the node is simply silent): the first
command to its slots fails at the socket timeout, the commands after it fail at
once for one bound instead of each waiting the timeout again, the other
primaries answer throughout, and the node answering again ends it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from agent_memory.adapters.redis._client import connect
from redis import exceptions as rexc
from retrying import eventually
from servers.redis_cluster_server import RedisCluster, launch_cluster

pytestmark = pytest.mark.slow

SLOTS = 16384


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    c = launch_cluster(node_timeout_ms=120_000)
    try:
        yield c
    finally:
        c.stop()


def _key_in(client: object, lo: int, hi: int, tag: str) -> bytes:
    """A key whose slot lies in [lo, hi]."""
    keyslot = client.keyslot  # type: ignore[attr-defined]
    for i in range(100_000):
        key = f"{tag}:{i}".encode()
        if lo <= keyslot(key) <= hi:
            return key
    raise AssertionError("no key found for the slot range")


async def test_a_silent_primary_fails_commands_at_once_after_one_timeout(
    cluster: RedisCluster,
) -> None:
    """When this fails, every command to the silent node waited the whole socket
    timeout again (at the default 30 s, an agent's request with its half-dozen
    reads waited minutes), or the client did not answer again once it ran."""
    client = connect(cluster.url, socket_timeout=1.0)
    try:
        per = SLOTS // cluster.primaries
        silent = cluster.nodes[0]  # slots [0, per)
        on_silent = _key_in(client, 0, per - 1, "s")
        elsewhere = _key_in(client, per, SLOTS - 1, "o")
        await client.set(on_silent, b"1")
        await client.set(elsewhere, b"1")
        silent.pause()
        try:
            started = time.monotonic()
            with pytest.raises((rexc.TimeoutError, rexc.ConnectionError)):
                await client.get(on_silent)
            first = time.monotonic() - started
            assert first < 5.0, first
            # the following commands to that node fail at once, not after 1 s each
            started = time.monotonic()
            for _ in range(3):
                with pytest.raises((rexc.TimeoutError, rexc.ConnectionError)):
                    await client.get(on_silent)
            after = time.monotonic() - started
            assert after < 1.5, after
            # the other primaries still answer
            assert await asyncio.wait_for(client.get(elsewhere), 10) == b"1"
        finally:
            silent.resume()
        got, _ = await eventually(
            lambda: client.get(on_silent),
            timeout=60,
            errors=(rexc.TimeoutError, rexc.ConnectionError),
            pause=0.2,
        )
        assert got == b"1"
    finally:
        await client.aclose()

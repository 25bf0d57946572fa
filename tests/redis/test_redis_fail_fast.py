"""A single Redis server that accepts and never answers (SIGSTOP, a frozen or
partitioned host): the first command fails at the socket timeout, and the
commands after it fail at once for one bound, so an agent's request fails open
in about one timeout instead of one per command; the server answering again
ends it."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory import Entity, connect
from agent_memory.domain.errors import BackendUnavailable
from servers.redis_server import RedisServer, launch_redis


@pytest.fixture
def stoppable() -> Iterator[RedisServer]:
    server = launch_redis()
    try:
        yield server
    finally:
        server.signal(signal.SIGCONT)
        server.close()


async def test_a_stopped_server_fails_a_request_open_in_about_one_timeout(
    stoppable: RedisServer,
) -> None:
    """When this fails, every command against the stopped server waited the
    whole socket timeout (an agent's request with its half-dozen reads waited
    that many timeouts: 4 minutes at the default 30 s), or the client did not
    answer again once the server ran."""
    async with connect(f"{stoppable.url}?socket_timeout=1") as memory:
        since = datetime.now(UTC) - timedelta(days=1)
        await memory.agents.events.window("d", since=since, limit=5)
        stoppable.signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable):
                await memory.agents.events.window("d", since=since, limit=5)
            assert time.monotonic() - started < 3.0
            started = time.monotonic()
            async with memory.agents.request(
                agent="a", domain="d", request_id="r1", entities=[Entity("pod", "p")]
            ) as req:
                ctx = await req.planning_context()
            waited = time.monotonic() - started
            assert not ctx.report.ok
            assert waited < 3.5, waited
        finally:
            stoppable.signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while True:
            try:
                window = await memory.agents.events.window("d", since=since, limit=5)
                break
            except BackendUnavailable:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert window.events == ()

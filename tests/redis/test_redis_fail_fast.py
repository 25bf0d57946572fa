"""A single Redis server that accepts and never answers (SIGSTOP, a frozen or
partitioned host): the first command fails at the socket timeout, and the
commands after it fail at once for one bound, so an agent's request fails open
in about one timeout instead of one per command; the server answering again
ends it."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from servers.redis_server import RedisServer, launch_redis
from silent_server import check_silent_server


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
    await check_silent_server(
        f"{stoppable.url}?socket_timeout=1",
        stoppable.signal,
        first_within=3.0,
        request_within=3.5,
    )

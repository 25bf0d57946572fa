"""A single Redis server that accepts and never answers (SIGSTOP, a frozen or
partitioned host): the first command fails at the socket timeout, and the
commands after it fail at once for one bound, so an agent's request fails open
in about one timeout instead of one per command; the server answering again
ends it."""

from __future__ import annotations

from servers.redis_server import RedisServer
from silent_server import check_silent_server


async def test_a_stopped_server_fails_a_request_open_in_about_one_timeout(
    restartable_redis: RedisServer,
) -> None:
    """When this fails, every command against the stopped server waited the
    whole socket timeout (an agent's request with its half-dozen reads waited
    that many timeouts: 4 minutes at the default 30 s), or the client did not
    answer again once the server ran."""
    await check_silent_server(
        f"{restartable_redis.url}?socket_timeout=1",
        restartable_redis.signal,
        first_within=3.0,
        request_within=3.5,
    )

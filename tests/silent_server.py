"""A server that accepts and never answers (SIGSTOP: a frozen or partitioned
host), against the public API: the first call fails at its bound, an agent's
request then fails open within a few seconds (the calls after the first fail at
once), and the store answers again once the server runs. Shared by
tests/postgres (call_timeout) and tests/redis (socket_timeout)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from agent_memory import Entity, connect
from agent_memory.domain.errors import BackendUnavailable
from retrying import eventually

__all__ = ["check_silent_server"]


async def check_silent_server(
    url: str,
    send: Callable[[int], None],
    *,
    first_within: float,
    request_within: float,
    match: str | None = None,
) -> None:
    """`url` names the server, with a 1 s bound; `send(sig)` signals it. The
    first call must fail (matching `match`) within `first_within` seconds, the
    request within `request_within`, and a call succeed within 60 s of SIGCONT."""
    async with connect(url) as memory:
        since = datetime.now(UTC) - timedelta(days=1)
        await memory.agents.events.window("d", since=since, limit=5)
        send(signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match=match):
                await memory.agents.events.window("d", since=since, limit=5)
            assert time.monotonic() - started < first_within
            started = time.monotonic()
            async with memory.agents.request(
                agent="a", domain="d", request_id="r1", entities=[Entity("pod", "p")]
            ) as req:
                ctx = await req.planning_context()
            waited = time.monotonic() - started
            assert not ctx.report.ok
            assert waited < request_within, waited
        finally:
            send(signal.SIGCONT)
        window, _ = await eventually(
            lambda: memory.agents.events.window("d", since=since, limit=5), timeout=60, pause=0.2
        )
        assert window.events == ()

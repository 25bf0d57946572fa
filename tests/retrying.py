"""Retry an operation until a server answers again (after a restart, a pause or
a failover): shared by the tests that stop servers mid-flight."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agent_memory.domain.errors import BackendUnavailable

__all__ = ["eventually"]

T = TypeVar("T")


async def eventually(
    op: Callable[[], Awaitable[T]],
    *,
    timeout: float = 15.0,
    errors: tuple[type[BaseException], ...] = (BackendUnavailable,),
    pause: float = 0.05,
) -> tuple[T, int]:
    """Await `op()` again while it raises one of `errors`, for up to `timeout`
    seconds (then the last error is raised); (result, failures before it)."""
    failures = 0
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await op(), failures
        except errors:
            failures += 1
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(pause)

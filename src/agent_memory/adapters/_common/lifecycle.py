"""The close() rule every adapter follows, in one place.

`close()` is idempotent; once it starts, new operations raise `StoreClosed`;
operations already running finish before `close()` returns, so a write racing
close is either completed before close returns or rejected, never persisted
after.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from agent_memory.domain.errors import StoreClosed

__all__ = ["Lifecycle"]


class _Operation:
    """The context manager `Lifecycle.op()` returns: a plain class, because it
    wraps every store call and a generator-based one costs a few µs each."""

    __slots__ = ("_life",)

    def __init__(self, life: Lifecycle) -> None:
        self._life = life

    async def __aenter__(self) -> None:
        self._life._enter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._life._exit()


class Lifecycle:
    """Counts in-flight operations and gates them on the closed flag."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._closing = False
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self._idle_loop: asyncio.AbstractEventLoop | None = None

    @property
    def closed(self) -> bool:
        return self._closing

    def check(self) -> None:
        """Raise `StoreClosed` once closing has started."""
        if self._closing:
            raise StoreClosed(self._what)

    def op(self) -> _Operation:
        """Wrap one operation (`async with life.op():`): rejected after close,
        waited for by close."""
        return _Operation(self)

    def _enter(self) -> None:
        self.check()
        self._inflight += 1

    def _exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._idle is not None:
            loop = self._idle_loop
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if loop is None or running is loop:
                self._idle.set()
            elif not loop.is_closed():
                # The operation ran in another thread's loop (a provider shared
                # by threads): an asyncio.Event set from here would not wake the
                # loop waiting in close().
                loop.call_soon_threadsafe(self._idle.set)

    async def begin_close(self) -> bool:
        """Mark closed and wait for in-flight operations.

        True for the first caller (who then releases resources); later callers
        also wait for in-flight operations but get False.
        """
        first = not self._closing
        self._closing = True
        if self._inflight:
            if self._idle is None:
                self._idle = asyncio.Event()
                self._idle_loop = asyncio.get_running_loop()
            await self._idle.wait()
        return first

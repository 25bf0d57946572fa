"""Audited operations that run to their end, whatever happens to the call.

A forget deletes first and writes its audit entry last (`services.audit`).
A caller that cancels it part-way (a timeout around the call, the HTTP
service's request deadline, the MCP server's call deadline, a shutdown's
drain timeout) would cut it between the two: the data is gone, or partly gone
(a delete already handed to the backend completes anyway), and the audit trail
never shows the erasure. So `UserMemory` runs each forget as a task of its
own, shielded from the call's cancellation: the caller still gets its
cancellation at once ("may or may not have taken effect"), the forget
finishes in the background with its entry, and `wait()` (`UserMemory.drain`,
which `Memory.close` calls) lets the ones still running end before the backend
is closed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Uninterrupted"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class Uninterrupted:
    """The audited operations of one server still running."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, operation: Coroutine[Any, Any, _T]) -> _T:
        """`operation`'s result; if the caller is cancelled meanwhile, the
        operation goes on (in the caller's context: its audit identity)."""
        task = asyncio.ensure_future(operation)
        self._running.add(task)
        task.add_done_callback(self._settled)
        return await asyncio.shield(task)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # The caller that awaited it has the error, unless it was cancelled.
            _log.debug("an audited operation ended with %s", type(exc).__name__)

    async def wait(self, timeout: float | None = None) -> int:
        """Wait (at most `timeout` seconds; None: until they end) for the
        operations still running; how many are left."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=timeout)
        if self._running:
            _log.error("%d audited operations still running", len(self._running))
        return len(self._running)

"""Fire-and-forget work that callers may still wait for (tests, shutdown)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from agent_memory.services.reports import StageReport

__all__ = ["BackgroundReports"]


class BackgroundReports:
    """Runs report-returning coroutines as tasks; `drain()` waits for the pending
    ones and returns every report finished since the last drain."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Task[StageReport]] = set()
        self._done: list[StageReport] = []

    def spawn(self, work: Coroutine[Any, Any, StageReport]) -> None:
        task = asyncio.create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[StageReport]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is None:
            self._done.append(task.result())

    async def drain(self) -> list[StageReport]:
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        done, self._done = self._done, []
        return done
